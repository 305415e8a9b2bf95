"""``stream=true`` through a real uvicorn gateway on a fake backend, read by the official ``openai`` client:
event types and fields, deltas joined = the synchronous text, usage, the error event, 400s, the
per-group deadline, and a disconnect that stops the work."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import httpx
import numpy as np
import openai
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from gateway_server import first_sse_event, running_gateway
from openai.types.audio import TranscriptionTextDeltaEvent, TranscriptionTextDoneEvent

from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import BackendError
from whisper_build.serving.transcription.request import WindowRequest

RATE = 16000


class StreamBackend(FakeBackend):
    """FakeBackend that records each call's deadline, can fail from the ``fail_at``-th call (0-based) and
    block from the ``block_at``-th until cancelled."""

    def __init__(self, fail_at: int | None = None, block_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.block_at = block_at
        self.timeouts: list[float] = []
        self.cancelled = 0

    async def infer(self, windows: Sequence[np.ndarray], request: WindowRequest, timeout: float) -> list[WindowResult]:
        if len(self.calls) == self.fail_at:
            self.error = BackendError("the model server failed (injected)")
        if len(self.calls) == self.block_at:
            self.gate = asyncio.Event()  # never set
        before = len(self.calls)
        try:
            return await super().infer(windows, request, timeout)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            if len(self.calls) > before:  # a client request's call, not the gateway's canary
                self.timeouts.append(timeout)


def _voiced_windows(count: int) -> bytes:
    """``count`` voiced windows of ~26 s (a tone, a 1 s pause after each)."""
    speech, pause = samples.tone(25.0, RATE), np.zeros(RATE, np.float32)
    return samples.encode(np.concatenate([speech, pause] * count), RATE, "flac")


def _settings(**overrides: object) -> GatewaySettings:
    return GatewaySettings(window_group_size=1, stream_group_timeout_seconds=7.0, **overrides)  # type: ignore[arg-type]


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=60, max_retries=0)


def test_stream_gives_a_delta_per_window_then_done_with_usage_equal_to_the_synchronous_text() -> None:
    backend = StreamBackend()
    audio = _voiced_windows(4)
    with running_gateway(_settings(), lambda _: backend) as url:
        client = _client(url)
        events = list(client.audio.transcriptions.create(model="whisper-1", file=("a.flac", audio), stream=True))
        plain = client.audio.transcriptions.create(model="whisper-1", file=("a.flac", audio))
    deltas = [e for e in events if isinstance(e, TranscriptionTextDeltaEvent)]
    [done] = [e for e in events if isinstance(e, TranscriptionTextDoneEvent)]
    assert len(deltas) == 4 and events[-1] is done
    assert "".join(d.delta for d in deltas) == done.text == plain.text
    assert [call[0] for call in backend.calls[:4]] == [1, 1, 1, 1]  # stream groups: one window each
    assert backend.timeouts[:4] == [7.0] * 4  # each group bounded by the per-group deadline
    usage = done.usage
    assert usage is not None and usage.type == "tokens"
    assert usage.input_tokens == usage.input_token_details.audio_tokens  # type: ignore[union-attr]
    assert usage.input_tokens == pytest.approx(4 * 26 * 50, rel=0.05)  # 50 encoder positions per second sent
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_failure_mid_stream_makes_the_official_client_raise_api_error() -> None:
    backend = StreamBackend(fail_at=2)
    with running_gateway(_settings(), lambda _: backend) as url:
        stream = _client(url).audio.transcriptions.create(
            model="whisper-1", file=("a.flac", _voiced_windows(4)), stream=True
        )
        received = []
        with pytest.raises(openai.APIError, match="injected"):
            for event in stream:
                received.append(event)
    assert [e.type for e in received] == ["transcript.text.delta"] * 2  # what came before the failure


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"stream": "banana"}, "stream must be true or false, got 'banana'"),
        ({"stream": "true", "response_format": "srt"}, "response_format must be json or text"),
        ({"stream": "true", "response_format": "vtt"}, "response_format must be json or text"),
        ({"stream": "true", "response_format": "verbose_json"}, "response_format must be json or text"),
    ],
)
def test_bad_stream_requests_answer_400_naming_the_field(fields: dict[str, str], message: str) -> None:
    backend = StreamBackend()
    with running_gateway(_settings(), lambda _: backend) as url:
        r = httpx.post(
            f"{url}/v1/audio/transcriptions", files={"file": ("a.flac", _voiced_windows(1))}, data=fields, timeout=30
        )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "stream" and message in r.json()["error"]["message"]
    assert backend.calls == []


def test_stream_false_answers_json_as_before() -> None:
    with running_gateway(_settings(), lambda _: StreamBackend()) as url:
        r = httpx.post(
            f"{url}/v1/audio/transcriptions",
            files={"file": ("a.flac", _voiced_windows(1))},
            data={"stream": "false"},
            timeout=30,
        )
    assert r.status_code == 200 and r.headers["content-type"] == "application/json" and r.json()["text"]


def test_a_disconnect_mid_stream_sends_no_further_group_and_cancels_the_call_in_flight() -> None:
    backend = StreamBackend(block_at=1)  # the second group stays with the model until cancelled
    with running_gateway(_settings(), lambda _: backend) as url:
        http = httpx.Client(timeout=60)
        request = http.build_request(
            "POST", f"{url}/v1/audio/transcriptions",
            files={"file": ("a.flac", _voiced_windows(6))}, data={"stream": "true"},
        )  # fmt: skip
        response = http.send(request, stream=True)
        chunks = response.iter_raw()  # kept: a dropped iterator closes the connection at once
        assert first_sse_event(chunks).startswith(b'data: {"type": "transcript.text.delta"')
        deadline = time.monotonic() + 20  # slack for a busy CI box
        while len(backend.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        response.close()
        http.close()  # the client is gone while the second group is with the model
        while backend.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)
        assert backend.cancelled == 1  # the call in flight at the disconnect was cancelled
        assert len(backend.calls) == 2  # and no group was sent after it (6 were due)
        metrics = httpx.get(f"{url.metrics}/metrics").text
    assert "whisper_gateway_inflight_requests 0.0" in metrics  # the admission slot was given back


def test_a_disconnect_before_the_first_event_gives_the_admission_slot_back() -> None:
    backend = StreamBackend(block_at=0)  # the first group never comes back
    with running_gateway(_settings(capacity=1, queue_size=0), lambda _: backend) as url:
        http = httpx.Client(timeout=60)
        files = {"file": ("a.flac", _voiced_windows(2))}
        response = http.send(
            http.build_request("POST", f"{url}/v1/audio/transcriptions", files=files, data={"stream": "true"}),
            stream=True,
        )
        assert response.status_code == 200  # headers are sent before the first event
        deadline = time.monotonic() + 20  # slack for a busy CI box
        while not backend.calls and time.monotonic() < deadline:
            time.sleep(0.02)
        response.close()
        http.close()
        while backend.cancelled == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        # the only slot is free again: a second request is admitted and answered
        backend.block_at = None
        backend.gate = None
        r = httpx.post(f"{url}/v1/audio/transcriptions", files=files, timeout=30)
    assert backend.cancelled == 1 and r.status_code == 200, r.text


def test_a_bug_mid_stream_still_ends_it_with_an_error_event() -> None:
    backend = StreamBackend()
    original = backend.infer

    async def buggy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - the wrapped signature
        if backend.calls:  # the first group is answered, then a bug (not a BackendError)
            raise KeyError("a bug")
        return await original(*args, **kwargs)

    with running_gateway(_settings(), lambda _: backend) as url:
        backend.infer = buggy  # type: ignore[method-assign]
        stream = _client(url).audio.transcriptions.create(
            model="whisper-1", file=("a.flac", _voiced_windows(3)), stream=True
        )
        with pytest.raises(openai.APIError, match="internal error .KeyError."):
            list(stream)
