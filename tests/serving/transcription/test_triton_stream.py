"""What the gateway's Triton client puts on a stream: Triton's priority, the scheduler's parameters, the
stream's deadline; and how a stream's error reaches the gateway. The client is recorded, not served
(the wire itself: tests/serving/transcription/test_triton_integration.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from whisper_build.serving import contract
from whisper_build.serving.transcription.backend import (
    BackendRejected,
    BackendUnavailable,
    ModelRestarting,
    ServedModel,
)
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import STREAM_STATUS_HEADERS, TritonBackend

WINDOW = np.zeros(16000, dtype=np.float32)


class _Result:
    def __init__(self, rows: int) -> None:
        self.rows = rows

    def as_numpy(self, name: str) -> np.ndarray:
        assert name == contract.RESULT.name
        return np.array([b'{"text": "ok"}'] * self.rows, dtype=object)


class _RecordingClient:
    """Records each stream's request dict, timeout and headers; answers with ``error`` or one result."""

    def __init__(self, error: str | None = None) -> None:
        self.sent: list[dict[str, Any]] = []
        self.streams: list[tuple[float, dict[str, str]]] = []
        self.error = error

    def stream_infer(self, requests: AsyncIterator[dict[str, Any]], stream_timeout: float, headers: dict) -> Any:
        self.streams.append((stream_timeout, headers))
        return _Stream(self, requests)


class _Stream:
    def __init__(self, client: _RecordingClient, requests: AsyncIterator[dict[str, Any]]) -> None:
        self.client, self.requests = client, requests
        self.answers: list[tuple[Any, Any]] | None = None

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> tuple[Any, Any]:
        if self.answers is None:
            [request] = [r async for r in self.requests]
            self.client.sent.append(request)
            rows = request["inputs"][0].shape()[0]
            error = self.client.error
            self.answers = [(None, InferenceServerException(msg=error))] if error else [(_Result(rows), None)]
        if not self.answers:
            raise StopAsyncIteration
        return self.answers.pop(0)

    def cancel(self) -> bool:
        return True


def _backend(client: _RecordingClient, priority: int = 0, max_batch: int = 16) -> TritonBackend:
    """A backend whose gRPC client is ``client`` (built in a running event loop, as the aio client needs)."""
    backend = TritonBackend("127.0.0.1:1", "whisper", priority=priority)
    backend._client = client
    backend._served = ServedModel("whisper", max_batch)
    return backend


async def _infer(client: _RecordingClient) -> None:
    await _backend(client).infer([WINDOW], WindowRequest(), 5.0)


def test_each_call_carries_its_level_and_remaining_time_to_the_scheduler() -> None:
    client = _RecordingClient()

    async def calls() -> None:
        bulk = _backend(client, priority=contract.BULK_PRIORITY, max_batch=2)
        # a bulk backend's 3 windows: two requests of at most max_batch_size, 10 s for both
        assert len(await bulk.infer([WINDOW] * 3, WindowRequest(), 10.0)) == 3
        # a live request's own level wins; a backend at level 0 sends the model's default level
        await bulk.infer([WINDOW], WindowRequest(priority=contract.LIVE_PRIORITY), 10.0)
        await _backend(client).infer([WINDOW], WindowRequest(), 2.5)

    asyncio.run(calls())
    levels = [(r["priority"], r["parameters"][contract.PRIORITY_PARAMETER]) for r in client.sent]
    assert levels == [(3, 3), (3, 3), (1, 1), (0, contract.SYNC_PRIORITY)]
    timeouts = [r["parameters"][contract.TIMEOUT_PARAMETER] for r in client.sent]
    first, second = client.streams[0][0], client.streams[1][0]
    assert 9_000 < timeouts[0] <= 10_000 and timeouts[1] <= timeouts[0] and second <= first <= 10.0
    assert 2_000 < timeouts[3] <= 2_500
    assert all(headers == STREAM_STATUS_HEADERS for _, headers in client.streams)
    assert all(r["model_name"] == "whisper" for r in client.sent)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("[request id: <id_unknown>] Exceeds maximum queue size", BackendUnavailable),
        ("Request for unknown model: 'whisper' is not found", BackendUnavailable),
    ],
)
def test_an_error_triton_words_in_the_stream_maps_as_the_unary_status_did(message: str, error: type) -> None:
    with pytest.raises(error, match="Triton is unavailable"):
        asyncio.run(_infer(_RecordingClient(error=message)))


def test_an_unworded_stream_error_is_a_failure_not_a_rejection() -> None:
    with pytest.raises(Exception, match="Triton failed the request: boom") as caught:
        asyncio.run(_infer(_RecordingClient(error="boom")))
    assert not isinstance(caught.value, BackendRejected | BackendUnavailable)


class _AnswerThenEndsBadly(_RecordingClient):
    """The request's one response arrives, then the stream ends with ``code`` (the deadline, a late abort)."""

    def __init__(self, code: Any) -> None:
        super().__init__()
        self.code = code

    def stream_infer(self, requests: AsyncIterator[dict[str, Any]], stream_timeout: float, headers: dict) -> Any:
        from grpc.aio import AioRpcError

        stream = super().stream_infer(requests, stream_timeout, headers)
        code = self.code

        class _Late:
            def __aiter__(self) -> _Late:
                return self

            async def __anext__(self) -> tuple[Any, Any]:
                if stream.answers is None or stream.answers:
                    return await stream.__anext__()
                raise AioRpcError(code, details="after the response")

            def cancel(self) -> bool:
                return True

        return _Late()


@pytest.mark.parametrize("code", ["DEADLINE_EXCEEDED", "INTERNAL"])
def test_an_answer_that_came_is_kept_however_the_stream_then_ends(code: str) -> None:
    import grpc

    async def infer() -> list:
        return await _backend(_AnswerThenEndsBadly(getattr(grpc.StatusCode, code))).infer(
            [WINDOW] * 2, WindowRequest(), 5
        )

    results = asyncio.run(infer())
    assert [r.text for r in results] == ["ok", "ok"]


class _DeadStubClient(_RecordingClient):
    """The first stream never answers (its request was on the stub that died); later ones say the stub died."""

    def stream_infer(self, requests: AsyncIterator[dict[str, Any]], stream_timeout: float, headers: dict) -> Any:
        self.streams.append((stream_timeout, headers))
        if len(self.streams) == 1:
            return _Silent()
        self.error = "Stub process 'whisper_0_0' is not healthy."
        return _Stream(self, requests)


class _Silent(_Stream):
    def __init__(self) -> None:
        self.cancelled = False

    async def __anext__(self) -> tuple[Any, Any]:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    def cancel(self) -> bool:
        self.cancelled = True
        return True


def test_a_request_held_by_a_dead_stub_fails_as_soon_as_a_later_call_learns_it_died() -> None:
    client = _DeadStubClient()

    async def calls() -> tuple[BaseException | None, BaseException | None, float]:
        backend = _backend(client)
        held = asyncio.ensure_future(backend.infer([WINDOW], WindowRequest(), 300.0))
        await asyncio.sleep(0.05)
        started = asyncio.get_running_loop().time()
        # WHEN a later call (the canary) is told the stub is not healthy
        canary = await asyncio.gather(backend.infer([WINDOW], WindowRequest(), 5.0), return_exceptions=True)
        [outcome] = await asyncio.gather(held, return_exceptions=True)
        return canary[0], outcome, asyncio.get_running_loop().time() - started

    canary, held, waited = asyncio.run(calls())
    # THEN both fail as a restarting model (503 and a retry), the held one at once, not at its 300 s deadline
    assert isinstance(canary, ModelRestarting) and isinstance(held, ModelRestarting), (canary, held)
    assert waited < 1.0
