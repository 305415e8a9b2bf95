"""Load test: 8 concurrent one-hour speech uploads to the real gateway
(a ``python -m whisper_build.serving.gateway`` process) in front of real Triton (tiny.en, CPU).

At least 2 complete, the rest complete or are refused with 429/503 (``Retry-After``), none is lost
to a crash, and the gateway's peak RSS stays under its memory in the charts' sizing.

Choices that keep it bounded on a 2-core CI machine:

- Each upload is an hour of a quiet noise floor (RMS 3e-4, under the 1e-3 silence threshold) with
  a spoken sentence (espeak-ng) every 10 minutes, 22.05 kHz mono FLAC (~60 MB, under the 100 MB
  body limit). The gateway decodes and resamples the whole hour, like an hour of speech (the noise
  makes the FLAC as large and as slow to decode), but only the 6 windows holding speech reach the
  model: the test exercises the decode path at full length while the engine's cost stays seconds.
- The audio budget is 2 hours (``WHISPER_GATEWAY_AUDIO_BUDGET_SECONDS``), so 2 uploads are decoded
  at once, 4 wait (``queue_size``) at most 60 s and the others are refused at once: the admission
  control, not the machine, decides what runs.

The file is built once and cached (``tests/support/long_audio.py``); the measured figures are printed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import speech_samples as samples
from long_audio import sparse_speech_flac

from k8s_charts.sizing import pod_resources
from settings.gpu_catalog import INSTANCE_SIZES
from whisper_build.serving.audio import open_audio
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.process import GatewayProcess

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox"),
]

MIB = 1024 * 1024
SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."
UPLOADS = 8
HOUR = 3600
EVERY_MINUTES = 10


def smallest_pod_memory_mib() -> int:
    """Memory of the smallest serving pod the charts can size (one GPU, any catalog instance),
    less its memory-backed ``/dev/shm``: what the gateway, Triton and the engine share."""
    sizes = [pod_resources(spec) for family in INSTANCE_SIZES.values() for spec in family.values()]
    return min(r.memory_mib - r.shm_mib for r in sizes)


def _status(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS, kept by the kernel) of ``pid`` in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) * 1024
    return values


@pytest.fixture(scope="module")
def hour_flac(tmp_path_factory: pytest.TempPathFactory) -> Path:
    clip = samples.speak(SENTENCE, tmp_path_factory.mktemp("load") / "clip.wav", rate=22050)
    path = sparse_speech_flac(clip, minutes=HOUR // 60, every_minutes=EVERY_MINUTES)
    with open_audio(path.read_bytes()) as stream:
        assert stream.declared_seconds == pytest.approx(HOUR, abs=1)
    return path


async def _upload_all(url: str, data: bytes) -> list[tuple[httpx.Response, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(900, connect=30)) as client:

        async def one(i: int) -> tuple[httpx.Response, float]:
            start = time.monotonic()
            response = await client.post(
                "/v1/audio/transcriptions",
                files={"file": (f"hour{i}.flac", data, "audio/flac")},
                data={"response_format": "verbose_json"},
            )
            return response, time.monotonic() - start

        return await asyncio.gather(*(one(i) for i in range(UPLOADS)))


def test_eight_concurrent_hour_uploads_complete_or_shed_without_a_crash(triton_server, hour_flac: Path) -> None:
    data = hour_flac.read_bytes()
    settings = {
        "WHISPER_GATEWAY_AUDIO_BUDGET_SECONDS": str(2 * HOUR),
        "WHISPER_GATEWAY_QUEUE_SIZE": "4",
        "WHISPER_GATEWAY_QUEUE_TIMEOUT_SECONDS": "60",
        "WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS": "600",
        "WHISPER_GATEWAY_RETRY_AFTER_SECONDS": "5",
        # mostly silent hours: the up-front prediction (speech throughout, 0.168 s per second on
        # this CPU) would refuse them with 413 audio_too_long; this test is about memory under load
        "WHISPER_GATEWAY_PREDICTED_RTF": "0.01",
    }
    with GatewayProcess(triton_server.settings.grpc_url, capacity=8, settings=settings) as gateway:
        url = gateway.url
        idle = _status(gateway.pid)["VmRSS"]
        started = time.monotonic()
        results = asyncio.run(_upload_all(url, data))
        wall = time.monotonic() - started
        memory = _status(gateway.pid)
        assert gateway.alive(), "the gateway process died"
        assert httpx.get(f"{url}/ping", timeout=10).status_code == 200

        statuses = [r.status_code for r, _ in results]
        completed = [r for r, _ in results if r.status_code == 200]
        refused = [r for r, _ in results if r.status_code in (429, 503)]
        print(
            f"\nload: {UPLOADS} x {len(data) / MIB:.1f} MiB one-hour FLAC uploads in {wall:.0f} s; "
            f"statuses {sorted(statuses)}; durations "
            f"{', '.join(f'{r.status_code}:{s:.0f}s' for r, s in sorted(results, key=lambda x: x[1]))}; "
            f"gateway RSS idle {idle / MIB:.0f} MiB, peak {memory['VmHWM'] / MIB:.0f} MiB, "
            f"after {memory['VmRSS'] / MIB:.0f} MiB; pod memory bound {smallest_pod_memory_mib()} MiB"
        )
        assert len(completed) >= 2, statuses
        assert len(completed) + len(refused) == UPLOADS, statuses
        for response in refused:
            assert response.headers["retry-after"] == "5" and "busy" in response.json()["error"]["message"]
        for response in completed:
            body = response.json()
            assert body["duration"] == pytest.approx(HOUR, abs=0.1)  # the whole hour was decoded
            spoken = [s for s in body["segments"] if s["text"]]
            assert len(spoken) == HOUR // 60 // EVERY_MINUTES  # only the windows with speech reached the model
            for minute, segment in zip(range(0, HOUR // 60, EVERY_MINUTES), spoken, strict=True):
                assert samples.wer(SENTENCE, segment["text"]) <= 0.3, segment
                # each window's true offset: the segment starts at the speech onset (within 1 s; the
                # decoding layer trims leading silence to the first voiced 20 ms) and covers it
                assert abs(segment["start"] - minute * 60) <= 1.0 and minute * 60 < segment["end"]
        assert memory["VmHWM"] < smallest_pod_memory_mib() * MIB
        # Tighter: what the gateway holds is bodies (the buffered upload, then the file's bytes, with a
        # transient copy while parsing) and, per running upload, 64 MiB + two window groups. Keeping
        # an hour of decoded 16 kHz audio (230 MB, twice while concatenating) per running upload
        # would not fit.
        defaults = GatewaySettings().requests
        group = defaults.window_group_size * int(defaults.window_seconds * 16000) * 4  # float32 samples
        assert memory["VmHWM"] - idle <= UPLOADS * 3 * len(data) + 2 * (64 * MIB + 2 * group)
