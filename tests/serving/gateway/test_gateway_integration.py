"""End to end: real tritonserver (CPU, whisper tiny.en via CTranslate2) + the gateway over HTTP,
fed real speech synthesized at test time with espeak-ng + sox (+ PyAV for MP3/Opus/AAC).

One Triton and two gateways (normal, and capacity 1 / queue 0 for overload) serve the module.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import speech_samples as samples
from gateway_cases import BAD_REQUESTS, BadRequest, error_message, send_bad_request
from gateway_server import running_gateway

from whisper_build.paths import REPO_ROOT
from whisper_build.serving import contract
from whisper_build.serving.audio import decode_audio
from whisper_build.serving.gateway.settings import GatewaySettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

MAX_BODY = 20_000_000
MAX_AUDIO_S = 120.0
SHORT_TEXT = "We went to the beach last summer and swam in the ocean every single day."
LONG_SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Every morning my neighbor walks his small white dog around the block.",
    "Scientists have discovered a new species of frog in the tropical forest.",
    "Please remember to turn off the lights when you leave the office tonight.",
    "The train to the city was late because of heavy snow on the tracks.",
    "She bought fresh bread, cheese and apples at the market on Saturday.",
    "Our team finished the project two weeks before the final deadline.",
    "The old library downtown has thousands of books about history and art.",
]
wer = samples.wer


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z' ]", " ", text.lower()).split()


@pytest.fixture(scope="module")
def triton(triton_server):
    """The session's real Triton (fixture from tests/conftest.py)."""
    return triton_server


@pytest.fixture(scope="module")
def gateway_url(triton) -> str:
    settings = GatewaySettings(
        triton_url=triton.settings.grpc_url,
        capacity=32,
        queue_size=64,
        max_body_bytes=MAX_BODY,
        max_audio_seconds=MAX_AUDIO_S,
        request_timeout_seconds=600,
    )
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway_url: str):
    with httpx.Client(base_url=gateway_url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def speech_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="module")
def short_wav(speech_dir: Path) -> Path:
    """SHORT_TEXT spoken, 16 kHz mono 16-bit WAV."""
    return samples.speak(SHORT_TEXT, speech_dir / "short.wav")


@pytest.fixture(scope="module")
def long_wav(speech_dir: Path) -> Path:
    """All LONG_SENTENCES with pauses: > 40 s, 16 kHz mono."""
    parts = [samples.speak(s, speech_dir / f"part{i}.wav") for i, s in enumerate(LONG_SENTENCES)]
    path = samples.concatenate_with_pauses(parts, speech_dir / "long.wav", pause_seconds=0.7)
    assert decode_audio(path.read_bytes()).duration > 40
    return path


def _reencode(wav: Path, fmt: str, rate: int, channels: int) -> bytes:
    """Decode ``wav`` and re-encode with PyAV (MP3/Opus/AAC: sox here lacks those encoders)."""
    import soxr

    x = decode_audio(wav.read_bytes()).samples
    x = soxr.resample(x, 16000, rate) if rate != 16000 else x
    return samples.encode(np.stack([x] * channels) if channels > 1 else x, rate, fmt)


def _sox(wav: Path, out: Path, *args: str) -> bytes:
    subprocess.run(["sox", str(wav), *args, str(out)], check=True, capture_output=True)
    return out.read_bytes()


FORMAT_CASES = {
    "wav_16k_mono": lambda wav, d: wav.read_bytes(),
    "wav_8k_stereo": lambda wav, d: _sox(wav, d / "8k.wav", "-r", "8000", "-c", "2"),
    "wav_24bit_48k": lambda wav, d: _sox(wav, d / "24.wav", "-b", "24", "-r", "48000"),
    "flac_44k": lambda wav, d: _sox(wav, d / "44k.flac", "-r", "44100"),
    "mp3_44k_stereo": lambda wav, d: _reencode(wav, "mp3", 44100, 2),
    "ogg_opus_48k": lambda wav, d: _reencode(wav, "ogg_opus", 48000, 1),
    "m4a_aac_22k": lambda wav, d: _reencode(wav, "m4a_aac", 22050, 1),
}


def invoke(client: httpx.Client, audio: bytes, **fields: object) -> httpx.Response:
    return client.post("/invocations", json={"audio_data": base64.b64encode(audio).decode(), **fields})


def test_ping_is_ready(client: httpx.Client) -> None:
    # ready once the first canary inference came back (at startup, within a second on CPU)
    deadline = time.monotonic() + 30
    while (r := client.get("/ping")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


@pytest.mark.parametrize("fmt", list(FORMAT_CASES))
def test_formats_transcribe_with_low_wer(client, short_wav, speech_dir, fmt: str) -> None:
    audio = FORMAT_CASES[fmt](short_wav, speech_dir)
    r = invoke(client, audio)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["code"] == 0 and body["message"] == "Success"
    assert wer(SHORT_TEXT, body["transcribe_text"]) <= 0.3, body["transcribe_text"]


def test_data_uri_and_prompts(client, short_wav) -> None:
    data = "data:audio/wav;base64," + base64.b64encode(short_wav.read_bytes()).decode()
    plain = "Holiday notes."
    raw = f"<|startofprev|>{plain}<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    for prompt in [plain, raw]:
        r = client.post("/invocations", json={"audio_data": data, "whisper_prompt": prompt, "repetition_penalty": 1.1})
        assert r.status_code == 200, r.text
        assert wer(SHORT_TEXT, r.json()["transcribe_text"]) <= 0.3, r.json()


def test_long_audio_keeps_every_sentence(client, long_wav) -> None:
    r = invoke(client, long_wav.read_bytes())
    assert r.status_code == 200, r.text
    text = r.json()["transcribe_text"]
    assert r.json()["duration"] > 40
    reference = " ".join(LONG_SENTENCES)
    assert wer(reference, text) <= 0.3, text
    heard = set(words(text))
    for sentence in LONG_SENTENCES:
        expected = words(sentence)
        found = sum(w in heard for w in expected)
        assert found >= 0.75 * len(expected), (sentence, text)
    # nothing past 30 s is lost: the last sentence's words come after the first sentence's
    assert text.lower().rfind("library") > text.lower().find("fox") >= 0


def test_silence_gives_empty_transcript(client) -> None:
    silence = samples.encode(np.zeros(16000 * 5, np.float32), 16000, "wav_s16")
    r = invoke(client, silence)
    assert r.status_code == 200 and r.json()["transcribe_text"] == ""


def test_openai_endpoint_formats(client, long_wav, short_wav) -> None:
    def post(path: Path, **form: str) -> httpx.Response:
        r = client.post("/v1/audio/transcriptions", files={"file": (path.name, path.read_bytes())}, data=form)
        assert r.status_code == 200, r.text
        return r

    assert wer(SHORT_TEXT, post(short_wav, model="whisper-1").json()["text"]) <= 0.3
    assert wer(SHORT_TEXT, post(short_wav, response_format="text").text) <= 0.3
    verbose = post(long_wav, response_format="verbose_json", language="en").json()
    assert verbose["duration"] > 40 and verbose["language"] == "english"
    segments = verbose["segments"]
    assert len(segments) >= 2 and segments[0]["start"] <= 1.0
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(segments))
    assert all(s["end"] - s["start"] <= 30.0 for s in segments)
    assert wer(" ".join(LONG_SENTENCES), " ".join(s["text"] for s in segments)) <= 0.3
    srt = post(short_wav, response_format="srt").text
    assert srt.startswith("1\n00:00:00,")
    assert wer(SHORT_TEXT, srt.split("\n", 2)[2]) <= 0.3
    vtt = post(short_wav, response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.")
    assert wer(SHORT_TEXT, vtt.split("\n", 3)[3]) <= 0.3


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c.name for c in BAD_REQUESTS])
def test_bad_requests_end_to_end(client, short_wav, case: BadRequest) -> None:
    status, body = send_bad_request(client, case, MAX_BODY, MAX_AUDIO_S)
    assert status == case.status, body
    message = error_message(case.path, body)
    assert case.message.lower() in message.lower(), message


def test_still_serving_after_bad_requests(client, short_wav) -> None:
    r = invoke(client, short_wav.read_bytes())
    assert r.status_code == 200 and wer(SHORT_TEXT, r.json()["transcribe_text"]) <= 0.3


def _triton_counts(metrics_url: str) -> tuple[float, float, float]:
    """Triton's inferences of the whisper model, its scheduler's engine passes and their rows."""
    text = httpx.get(metrics_url, timeout=10).text

    def value(name: str, labels: str) -> float:
        match = re.search(rf"^{name}{{{labels}}} (\S+)$", text, re.MULTILINE)
        assert match, f"{name} missing from Triton metrics"
        return float(match.group(1))

    scheduler = 'model="whisper"'
    return (
        value("nv_inference_count", 'model="whisper",version="1"'),
        value(contract.SCHEDULER_STEPS, scheduler),
        value(contract.SCHEDULER_STEP_ROWS, scheduler),
    )


CONCURRENT = 16
"""The test Triton's ``max_batch_size``: enough to show batching (32 requests took 49 s of the test, 16 take 30 s)."""


def test_concurrent_requests_succeed_and_triton_batches(gateway_url, triton, short_wav) -> None:
    audio = base64.b64encode(short_wav.read_bytes()).decode()
    count_before, steps_before, rows_before = _triton_counts(triton.settings.metrics_url)

    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=gateway_url, timeout=600) as c:
            posts = (c.post("/invocations", json={"audio_data": audio}) for _ in range(CONCURRENT))
            return await asyncio.gather(*posts)

    started = time.monotonic()
    responses = asyncio.run(burst())
    failed = [(r.status_code, r.text[:200]) for r in responses if r.status_code != 200]
    assert not failed, f"{len(failed)} of {CONCURRENT} requests failed: {failed[:3]}"
    assert all(wer(SHORT_TEXT, r.json()["transcribe_text"]) <= 0.3 for r in responses)
    count_after, steps_after, rows_after = _triton_counts(triton.settings.metrics_url)
    elapsed = time.monotonic() - started
    inferences, steps, rows = count_after - count_before, steps_after - steps_before, rows_after - rows_before
    # one window per request, plus the gateway's canary inferences meanwhile (one per interval)
    canaries = elapsed / GatewaySettings().health.canary_interval_seconds + 2
    assert CONCURRENT <= inferences <= CONCURRENT + canaries
    assert rows / steps > 1, (rows, steps)  # the model's scheduler ran batches larger than 1
    print(f"{CONCURRENT} requests -> {steps:.0f} scheduler batches, mean batch {rows / steps:.1f}")


def test_overload_gets_429_and_service_recovers(triton, short_wav) -> None:
    settings = GatewaySettings(triton_url=triton.settings.grpc_url, capacity=1, queue_size=0, retry_after_seconds=3)
    audio = base64.b64encode(short_wav.read_bytes()).decode()
    with running_gateway(settings) as url:

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=120) as c:
                return await asyncio.gather(*(c.post("/invocations", json={"audio_data": audio}) for _ in range(4)))

        responses = asyncio.run(burst())
        statuses = sorted(r.status_code for r in responses)
        assert 200 in statuses and set(statuses) <= {200, 429, 503}, statuses
        refused = [r for r in responses if r.status_code != 200]
        assert refused, statuses
        assert all(r.headers["retry-after"] == "3" and r.json()["code"] in (2001, 2002) for r in refused)
        after = httpx.post(f"{url}/invocations", json={"audio_data": audio}, timeout=120)
        assert after.status_code == 200 and wer(SHORT_TEXT, after.json()["transcribe_text"]) <= 0.3
        metrics = httpx.get(f"{url.metrics}/metrics").text
        assert 'whisper_gateway_requests_total{route="/invocations",status="429"}' in metrics


def test_sigterm_drains_in_flight_request(triton, short_wav, long_wav) -> None:
    """python -m whisper_build.serving.gateway: SIGTERM -> /ping 503 while the admitted request finishes."""
    from whisper_build.workstation.local_triton import free_ports

    port, metrics_port = free_ports(2)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        "WHISPER_GATEWAY_PORT": str(port),
        "WHISPER_GATEWAY_METRICS_PORT": str(metrics_port),
        "WHISPER_GATEWAY_TRITON_URL": triton.settings.grpc_url,
        "WHISPER_GATEWAY_DRAIN_SECONDS": "2",
        "WHISPER_GATEWAY_LOG_LEVEL": "warning",
    }
    process = subprocess.Popen([sys.executable, "-m", "whisper_build.serving.gateway"], env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ping", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.2)
        audio = base64.b64encode(short_wav.read_bytes()).decode()
        long_audio = base64.b64encode(long_wav.read_bytes()).decode()  # several windows: seconds of work

        async def scenario() -> tuple[httpx.Response, int, int]:
            async with httpx.AsyncClient(base_url=url, timeout=300) as c:
                inflight = asyncio.create_task(c.post("/invocations", json={"audio_data": long_audio}))
                # metrics are served on their own port; the traffic port has none
                assert (await c.get("/metrics")).status_code == 404
                metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
                while "whisper_gateway_inflight_requests 1.0" not in (await c.get(metrics_url)).text:
                    assert not inflight.done(), "request finished before SIGTERM could be sent"
                    await asyncio.sleep(0.02)
                process.send_signal(signal.SIGTERM)
                signal_deadline = time.monotonic() + 10
                while (ping := (await c.get("/ping")).status_code) != 503 and time.monotonic() < signal_deadline:
                    await asyncio.sleep(0.05)  # until the gateway has handled SIGTERM
                refused = (await c.post("/invocations", json={"audio_data": audio})).status_code
                return await inflight, ping, refused

        finished, ping, refused = asyncio.run(scenario())
        assert ping == 503 and refused == 503
        assert finished.status_code == 200
        assert wer(" ".join(LONG_SENTENCES), finished.json()["transcribe_text"]) <= 0.3
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
