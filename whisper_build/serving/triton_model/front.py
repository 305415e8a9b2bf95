"""What the decoupled ``whisper`` model does per request, without ``pb_utils``: parameters, waiting, error codes.

``1/model.py`` reads each request's JSON parameters with :func:`read_parameters`
(:data:`~whisper_build.serving.contract.PRIORITY_PARAMETER`, :data:`~whisper_build.serving.contract.TIMEOUT_PARAMETER`),
submits it to the scheduler, waits with :func:`wait_for` (which polls the client's cancellation, at a pace
bounded over all requests by :class:`CancelPolls`) and
answers with the gRPC status of :func:`error_code` when it fails. Docs: docs/contracts.md, "5. Triton
model contract".
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any, Literal

from whisper_build.serving import contract
from whisper_build.serving.triton_model.batching import RequestError
from whisper_build.serving.triton_model.cancellation import BatchCancelled
from whisper_build.serving.triton_model.scheduler import QueueFull, RequestTimeout

__all__ = [
    "POLLS_PER_S",
    "POLL_S",
    "CancelPolls",
    "CoalescedFlush",
    "ErrorCode",
    "error_code",
    "read_parameters",
    "wait_for",
]

POLL_S = 0.25
"""Seconds between two looks at one request's cancellation while it waits."""
POLLS_PER_S = 200.0
"""Looks at cancellation per second over all waiting requests. Each look (``InferenceResponseSender.is_cancelled``)
is a round trip to Triton that blocks the stub's event loop (python_backend ``src/pb_cancel.cc``,
``PbCancel::IsCancelled``): unbounded, hundreds of waiting requests starve the loop that sends the answers."""

ErrorCode = Literal["INVALID_ARG", "UNAVAILABLE", "CANCELLED", "INTERNAL"]


def read_parameters(text: str | None) -> tuple[int, float | None]:
    """The request's priority level and timeout from its parameters (``request.parameters()``, a JSON object).

    Args:
        text: the JSON text; ``None``/empty or a missing key: level
            :data:`~whisper_build.serving.contract.SYNC_PRIORITY`, no deadline.

    Returns:
        ``(level, timeout_s)``: level 1..3, seconds from the model's receipt (``None`` = none).

    Raises:
        RequestError: not a JSON object, a level outside 1..3, a timeout that is not a positive integer.
    """
    try:
        parameters = json.loads(text) if text else {}
    except json.JSONDecodeError as error:
        raise RequestError(f"request parameters are not JSON: {error}") from error
    if not isinstance(parameters, dict):
        raise RequestError("request parameters must be a JSON object")
    level = parameters.get(contract.PRIORITY_PARAMETER, contract.SYNC_PRIORITY)
    if isinstance(level, bool) or not isinstance(level, int) or not 1 <= level <= contract.PRIORITY_LEVELS:
        raise RequestError(
            f"parameter {contract.PRIORITY_PARAMETER} must be an integer 1..{contract.PRIORITY_LEVELS} "
            f"(1 live, 2 sync, 3 bulk), got {level!r}"
        )
    timeout = parameters.get(contract.TIMEOUT_PARAMETER)
    if timeout is None:
        return level, None
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout <= 0:
        raise RequestError(
            f"parameter {contract.TIMEOUT_PARAMETER} must be a positive integer (milliseconds), got {timeout!r}"
        )
    return level, timeout / 1000.0


def error_code(error: BaseException) -> ErrorCode:
    """The gRPC status a failed request is answered with (the gateway's client maps these).

    Bad input → INVALID_ARG; a full queue or a deadline passed while waiting → UNAVAILABLE (Triton's
    words, "Exceeds maximum queue size" / "Request timeout expired"); cancelled by the client →
    CANCELLED; anything else (the engine failed) → INTERNAL.
    """
    if isinstance(error, RequestError):
        return "INVALID_ARG"
    if isinstance(error, (QueueFull, RequestTimeout)):
        return "UNAVAILABLE"
    if isinstance(error, (BatchCancelled, CancelledError, asyncio.CancelledError)):
        return "CANCELLED"
    return "INTERNAL"


class CancelPolls:
    """Spaces the looks at cancellation of every request waiting on one event loop: at most ``per_s`` per second.

    One instance per loop (the model's); not thread-safe (the loop's thread only).
    """

    def __init__(self, per_s: float = POLLS_PER_S) -> None:
        self._gap = 1.0 / per_s
        self._next = 0.0

    async def turn(self) -> None:
        """Return when this caller may look (at once, or after the looks already granted)."""
        now = asyncio.get_running_loop().time()
        at = max(now, self._next)
        self._next = at + self._gap
        if at > now:
            await asyncio.sleep(at - now)


class CoalescedFlush:
    """``await flush()`` before each answer, one real ``flush`` for every answer ready in the same loop tick.

    Every answer is sent after the metrics it changed reached Triton (a client that sees its answer sees
    its windows counted), but a custom-metric update is a blocking round trip to Triton, so the answers of
    one batch share one flush. The loop's thread only.
    """

    def __init__(self, flush: Callable[[], None]) -> None:
        self._flush = flush
        self._pending: asyncio.Future[None] | None = None

    async def __call__(self) -> None:
        """Return once a flush that started after this call finished (raises nothing: a failed flush is logged by the loop)."""
        if self._pending is None:
            loop = asyncio.get_running_loop()
            self._pending = loop.create_future()
            loop.call_soon(self._run)
        await asyncio.shield(self._pending)

    def _run(self) -> None:
        pending, self._pending = self._pending, None
        try:
            self._flush()
        finally:
            if pending is not None:
                pending.set_result(None)


async def wait_for(
    future: Future[Any],
    is_cancelled: Callable[[], bool],
    cancel: Callable[[], None],
    polls: CancelPolls,
    poll_s: float = POLL_S,
) -> Any:
    """``future``'s result, awaited; ``is_cancelled()`` asked every ``poll_s`` s (at ``polls``' pace), ``cancel()`` when True.

    Raises:
        BatchCancelled: the client cancelled (or the future was cancelled).
        Exception: the future's own exception.
    """
    waiting = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=poll_s)
        if not done:
            turn = asyncio.ensure_future(polls.turn())  # an answer ready meanwhile is not held back by the pace
            try:
                await asyncio.wait({waiting, turn}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                turn.cancel()
            done = {waiting} if waiting.done() else set()
        if done:
            try:
                return waiting.result()
            except (CancelledError, asyncio.CancelledError) as error:
                raise BatchCancelled("cancelled by the client") from error
        if is_cancelled():
            cancel()
            waiting.cancel()
            raise BatchCancelled("cancelled by the client")
