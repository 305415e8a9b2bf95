"""``stream=true`` end to end: the official ``openai`` client, the gateway, a real tritonserver (CPU tiny.en).

The file is 150 s: five windows, each one espeak-ng sentence and then silence (each window is
decoded: none is all silence). Progress and the disconnect are read from the model scheduler's
finished windows (one per window, whatever the batching). The engine is slowed to
:data:`SECONDS_PER_WINDOW` (tests/support/slow_engine.py), so windows finish one by one on any CPU, and
"after the disconnect" ends when the gateway and the engine are idle, not after a fixed sleep.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import soundfile
import speech_samples as samples
from gateway_server import first_sse_event, running_gateway
from openai.types.audio import TranscriptionTextDeltaEvent, TranscriptionTextDoneEvent
from prometheus_client.parser import text_string_to_metric_families
from slow_engine import SlowEngineControl, wait_until_idle

from whisper_build.serving import contract
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import BackendError
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Scientists found a new species of frog in the forest.",
    "The train was late because of heavy snow.",
    "Our team finished the project two weeks early.",
    "The museum opens at nine o'clock on Sundays.",
]
WINDOW_S = 30
RATE = 16000
SECONDS_PER_WINDOW = 1.0
"""The engine's added time per window: the file takes ≥ 5 s, a window ≥ 1 s."""


class FaultyBackend(TritonBackend):
    """The real Triton backend; its client calls fail from the ``fail_at``-th on (0-based) once armed."""

    fail_at: int | None = None
    calls = 0
    windows_sent = 0
    """Windows of client requests sent to Triton (the gateway's health canaries, one silent window each, not counted)."""
    canaries_done = 0
    """Canaries answered: Triton counts them as inferences too (counted here once back, as Triton counts them)."""

    async def infer(self, windows: Sequence[np.ndarray], request: WindowRequest, timeout: float) -> list[WindowResult]:
        if len(windows) == 1 and not np.any(windows[0]):  # the gateway's canary
            try:
                return await super().infer(windows, request, timeout)
            finally:
                self.canaries_done += 1
        self.calls += 1
        self.windows_sent += len(windows)
        if self.fail_at is not None and self.calls > self.fail_at:
            raise BackendError("the model server failed (injected mid-stream)")
        return await super().infer(windows, request, timeout)


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("stream")
    audio = np.zeros(len(SENTENCES) * WINDOW_S * RATE, np.float32)
    for k, sentence in enumerate(SENTENCES):  # each sentence 0.5 s into its 30 s, then silence
        speech, rate = soundfile.read(samples.speak(sentence, folder / f"s{k}.wav"), dtype="float32")
        assert rate == RATE and len(speech) < (WINDOW_S - 1) * RATE
        start = (k * WINDOW_S * 2 + 1) * RATE // 2
        audio[start : start + len(speech)] = speech
    path = folder / "long.flac"
    soundfile.write(path, audio, RATE)
    return path


@pytest.fixture(scope="module")
def triton_server(slow_triton_server: tuple[LocalTriton, SlowEngineControl]) -> Iterator[LocalTriton]:
    """The slowed tritonserver, at :data:`SECONDS_PER_WINDOW` for this module's tests."""
    server, control = slow_triton_server
    with control.delay(SECONDS_PER_WINDOW):
        yield server


@pytest.fixture(scope="module")
def gateway(triton_server: LocalTriton) -> Iterator[tuple[str, FaultyBackend]]:
    made: list[FaultyBackend] = []

    def factory(settings: GatewaySettings) -> FaultyBackend:  # called on the gateway's loop (grpc.aio)
        made.append(FaultyBackend(settings.triton_url, settings.model_name))
        return made[0]

    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url, request_timeout_seconds=300)
    with running_gateway(settings, factory) as url:
        yield url, made[0]


def _windows_computed(metrics_url: str) -> float:
    """The whisper model scheduler's finished windows (``contract.SCHEDULER_FINISHED``): windows it has run.

    Not Triton's ``nv_inference_count``: the decoupled model receives every request at once.
    """
    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == contract.SCHEDULER_FINISHED and sample.labels.get("model") == "whisper"
    )


def test_the_official_client_streams_deltas_as_windows_finish(gateway, long_file: Path, triton_server) -> None:
    url, _ = gateway
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300, max_retries=0)
    audio = long_file.read_bytes()
    windows = len(SENTENCES)
    before = _windows_computed(triton_server.settings.metrics_url)
    events, progress_at_first_delta = [], None
    for event in client.audio.transcriptions.create(model="whisper-1", file=("long.flac", audio), stream=True):
        if progress_at_first_delta is None:
            progress_at_first_delta = _windows_computed(triton_server.settings.metrics_url) - before
        events.append(event)
    deltas = [e for e in events if isinstance(e, TranscriptionTextDeltaEvent)]
    [done] = [e for e in events if isinstance(e, TranscriptionTextDoneEvent)]
    assert len(deltas) >= 4 and events[-1] is done
    # the first delta comes before the last window is computed (the engine core's answer path lets the
    # scheduler finish one more window before it than the in-stub model did: 3 of 5 measured, not < 2.5)
    assert progress_at_first_delta is not None and progress_at_first_delta < windows - 1
    plain = client.audio.transcriptions.create(model="whisper-1", file=("long.flac", audio))
    assert "".join(d.delta for d in deltas) == done.text == plain.text
    assert samples.wer(" ".join(SENTENCES), done.text) <= 0.25
    assert done.usage is not None and done.usage.input_tokens > 0 and done.usage.output_tokens > 20


def test_an_error_mid_stream_raises_api_error_in_the_official_client(gateway, long_file: Path) -> None:
    url, backend = gateway
    backend.calls, backend.fail_at = 0, 2
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=300, max_retries=0)
    received = []
    try:
        with pytest.raises(openai.APIError, match="injected mid-stream"):
            for event in client.audio.transcriptions.create(
                model="whisper-1", file=("long.flac", long_file.read_bytes()), stream=True
            ):
                received.append(event)
    finally:
        backend.fail_at = None
    assert len(received) == 2 and all(isinstance(e, TranscriptionTextDeltaEvent) for e in received)


def test_a_disconnect_mid_stream_computes_no_later_group(
    gateway, long_file: Path, triton_server, slow_triton_server
) -> None:
    url, backend = gateway
    _, control = slow_triton_server
    metrics = triton_server.settings.metrics_url
    wait_until_idle(control, url.metrics)  # no canary or stream of an earlier test still at Triton
    before, canaries, sent = _windows_computed(metrics), backend.canaries_done, backend.windows_sent
    http = httpx.Client(timeout=300)
    request = http.build_request(
        "POST", f"{url}/v1/audio/transcriptions",
        files={"file": ("long.flac", long_file.read_bytes())}, data={"stream": "true"},
    )  # fmt: skip
    response = http.send(request, stream=True)
    chunks = response.iter_raw()  # kept: a dropped iterator closes the connection at once
    assert first_sse_event(chunks).startswith(b'data: {"type": "transcript.text.delta"')
    sent_at_disconnect = backend.windows_sent - sent
    response.close()
    http.close()
    # the gateway's stream ends and the engine goes idle: a gateway that kept sending groups after
    # the disconnect stays in progress until the file's end, so this wait is never too short
    wait_until_idle(control, url.metrics)
    sent_after = backend.windows_sent - sent
    computed = _windows_computed(metrics) - before - (backend.canaries_done - canaries)
    print(f"\nwindows sent when the client left {sent_at_disconnect}, in all {sent_after}; computed {computed:g}")
    # at most the group that was on its way to the model when the client left; never the 3 after it
    assert sent_after <= sent_at_disconnect + 1 < len(SENTENCES)
    assert computed <= sent_after  # Triton computed nothing the gateway did not send (canaries aside)
