"""What the decoupled ``whisper`` model does per request, without ``pb_utils``: parameters, waiting, error codes.

``1/model.py`` reads each request's JSON parameters with :func:`read_parameters`
(:data:`~whisper_build.serving.contract.PRIORITY_PARAMETER`, :data:`~whisper_build.serving.contract.TIMEOUT_PARAMETER`),
submits it to the scheduler, waits with :func:`wait_for` (which polls the client's cancellation) and
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

__all__ = ["POLL_S", "ErrorCode", "error_code", "read_parameters", "wait_for"]

POLL_S = 0.05
"""Seconds between two looks at the client's cancellation while a request waits."""

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


async def wait_for(
    future: Future[Any], is_cancelled: Callable[[], bool], cancel: Callable[[], None], poll_s: float = POLL_S
) -> Any:
    """``future``'s result, awaited; every ``poll_s`` s ``is_cancelled()`` is asked, and when True ``cancel()`` is called.

    Raises:
        BatchCancelled: the client cancelled (or the future was cancelled).
        Exception: the future's own exception.
    """
    waiting = asyncio.wrap_future(future)
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=poll_s)
        if done:
            try:
                return waiting.result()
            except (CancelledError, asyncio.CancelledError) as error:
                raise BatchCancelled("cancelled by the client") from error
        if is_cancelled():
            cancel()
            waiting.cancel()
            raise BatchCancelled("cancelled by the client")
