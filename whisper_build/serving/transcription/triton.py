"""The Triton gRPC implementation of the backend Protocol, and the request's tensors.

:class:`TritonBackend` holds ONE ``tritonclient.grpc.aio`` client (one gRPC channel, shared by all
requests); the model's inputs are built by :mod:`~whisper_build.serving.transcription.triton_inputs`;
:func:`stream_request` sends one ``whisper`` request on a gRPC stream of its own (the only way to reach a
decoupled model), the one helper every direct caller of the model uses. A decoupled model never answers
the requests its dead stub held: once any call learns the stub died, the backend fails its other
in-flight calls with :class:`ModelRestarting` too. Docs: docs/contracts.md §5.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving import contract
from whisper_build.serving.diarization.self_test import FAILED_MARKER
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn, name_turns
from whisper_build.serving.results import ResultError, WindowResult
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
    CoreRestarting,
    ModelFailed,
    ModelRestarting,
    ServedModel,
)
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton_inputs import infer_inputs, scheduler_parameters, speaker_inputs

__all__ = [
    "ENQUEUE_ERRORS",
    "STREAM_STATUS_HEADERS",
    "TritonBackend",
    "stream_request",
]

STREAM_STATUS_HEADERS = {"triton_grpc_error": "true"}
"""Stream headers asking Triton to end a failed stream with the request's gRPC status and message, as
a unary call reports them (Triton docs, "GRPC Status Codes", since 24.08). Errors Triton raises
before the request reaches the model (queue full, unknown model, a wrong input type) still come as a
message in the response: :data:`ENQUEUE_ERRORS` gives those their status back."""

ENQUEUE_ERRORS = {
    "Exceeds maximum queue size": "StatusCode.UNAVAILABLE",
    "Request timeout expired": "StatusCode.UNAVAILABLE",
    "Request for unknown model": "StatusCode.NOT_FOUND",
}
"""Triton's wording of an error refused at enqueue → the gRPC status a unary ``infer`` carries with it."""


async def _one_request(
    model_name: str, inputs: list[Any], outputs: list[Any] | None, priority: int, timeout: float
) -> AsyncIterator[dict[str, Any]]:
    """The stream's one request: ``stream_infer``'s keyword arguments, with :func:`scheduler_parameters`."""
    yield {
        "model_name": model_name,
        "inputs": inputs,
        "outputs": outputs,
        "priority": priority,
        "parameters": scheduler_parameters(priority, timeout),
    }


async def stream_request(
    client: Any,
    model_name: str,
    inputs: list[Any],
    timeout: float,
    *,
    outputs: list[Any] | None = None,
    priority: int = 0,
) -> Any:
    """One request of ``model_name`` on a gRPC stream of its own (``ModelStreamInfer``); its one ``InferResult``.

    ``client`` is a ``tritonclient.grpc.aio.InferenceServerClient``. Sent with Triton's ``priority``
    (0 = the model's default level) and :func:`scheduler_parameters`; the stream lasts at most
    ``timeout`` seconds. Cancelling the awaiting task cancels the stream, which Triton turns into the
    request's cancellation.

    Raises: ``tritonclient.utils.InferenceServerException`` with the gRPC status and message a unary
    ``infer`` would raise (:data:`STREAM_STATUS_HEADERS`, :data:`ENQUEUE_ERRORS`;
    ``StatusCode.DEADLINE_EXCEEDED`` past ``timeout``); without status for another error Triton only
    words, or a stream closed with no response. A response that came is returned whatever status
    then ends the stream (e.g. its deadline passing before Triton closes it).
    """
    from grpc import RpcError, StatusCode  # type: ignore[import-untyped]
    from tritonclient.utils import InferenceServerException

    deadline = time.monotonic() + timeout
    request = _one_request(model_name, inputs, outputs, priority, timeout)
    responses = client.stream_infer(request, stream_timeout=timeout, headers=STREAM_STATUS_HEADERS)
    answer, failure, ended = None, None, False
    try:
        # One response, then Triton closes the stream. An error response is read to the stream's end,
        # not cancelled: Triton 2.51 can crash when a cancel races the end of a stream it is closing.
        async for result, error in responses:
            if error is not None and failure is None:
                message = error.message()
                status = next((s for words, s in ENQUEUE_ERRORS.items() if words in message), None)
                failure = InferenceServerException(msg=message, status=status)
            answer = answer or result
        ended = True
    except RpcError as exc:  # grpc.aio.AioRpcError: the stream ended with a status
        ended = True
        if answer is not None:  # the request's one response came: how the stream ends after it changes nothing
            return answer
        if failure is not None:  # the model's own error answer says more than the stream's end
            raise failure from None
        code, details = exc.code(), exc.details()
        if time.monotonic() >= deadline:  # a deadline hit while sending reads INTERNAL "error from Core"
            code, details = StatusCode.DEADLINE_EXCEEDED, f"Deadline Exceeded ({details})"
        raise InferenceServerException(msg=details, status=str(code)) from None
    finally:
        if not ended:  # the awaiting task was cancelled: cancelling the stream cancels the request
            responses.cancel()
    if failure is not None:
        raise failure
    if answer is None:
        raise InferenceServerException(msg=f"Triton closed the {model_name} stream without a response")
    return answer


class TritonBackend:
    """:class:`~whisper_build.serving.transcription.backend.TranscriptionBackend` over Triton gRPC (model contract: docs/contracts.md §5).

    Windows beyond the model's ``max_batch_size`` are sent as several requests, in order.

    Args:
        url: Triton gRPC ``host:port``.
        model_name: Triton model name (``whisper``).
        priority: the requests' priority level (``contract.SYNC_PRIORITY`` / ``BULK_PRIORITY``); 0 = the
            model's default level (synchronous). A request's own ``priority`` (live sessions) wins.
    """

    def __init__(self, url: str, model_name: str, priority: int = 0) -> None:
        from tritonclient.grpc.aio import InferenceServerClient

        self.url = url
        self.model_name = model_name
        self.priority = priority
        self._client = InferenceServerClient(url=url)
        self._served: ServedModel | None = None
        self._speakers: bool | None = None
        self._stub_died = asyncio.Event()
        """Set when a call learns the model's stub died; replaced by a fresh one at once."""

    async def served_model(self, timeout: float) -> ServedModel:
        """See :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.served_model` (tritonclient ``get_model_config``)."""
        from tritonclient.utils import InferenceServerException

        if self._served is None:
            try:
                config = await self._client.get_model_config(self.model_name, as_json=True, client_timeout=timeout)
            except InferenceServerException as exc:
                raise _translate(exc, timeout) from exc
            self._served = ServedModel.from_triton_config(config["config"])
        return self._served

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """See :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.infer`."""
        from tritonclient.utils import InferenceServerException

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            limit = (await self.served_model(timeout)).max_batch_size
            texts: list[WindowResult] = []
            for i in range(0, len(windows), limit):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise BackendTimeout(f"Triton did not finish within {timeout:g} s")
                texts += await self._infer_once(windows[i : i + limit], request, remaining)
            return texts
        except InferenceServerException as exc:
            error = _translate(exc, timeout)
            if isinstance(error, ModelRestarting):  # the calls the dead stub held will never be answered
                died, self._stub_died = self._stub_died, asyncio.Event()
                died.set()
            raise error from exc

    async def _infer_once(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """One Triton request of at most ``max_batch_size`` windows, on a stream of its own (:func:`stream_request`)."""
        from tritonclient.grpc import InferRequestedOutput

        batch = len(windows)
        died = asyncio.ensure_future(self._stub_died.wait())  # the event of the stub this call reaches
        call = asyncio.ensure_future(
            stream_request(
                self._client,
                self.model_name,
                infer_inputs(windows, request),
                timeout,
                outputs=[InferRequestedOutput(contract.RESULT.name)],
                priority=request.priority or self.priority,
            )
        )
        try:
            await asyncio.wait({call, died}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            died.cancel()
            if not call.done():
                call.cancel()  # cancelled by the caller, or the stub died: close the stream
        if not call.done() or call.cancelled():
            raise ModelRestarting("the model's runtime died with this request in flight; it is being loaded again")
        result = call.result()
        out = result.as_numpy(contract.RESULT.name)
        if out is None or out.size != batch:
            raise BackendError(f"Triton returned {0 if out is None else out.size} results for {batch} windows")
        try:
            return [WindowResult.from_json(v) for v in out.reshape(-1)]
        except ResultError as exc:
            raise BackendError(f"Triton returned an unreadable {contract.RESULT.name}: {exc}") from exc

    async def diarize(self, samples: npt.NDArray[np.float32], options: SpeakerOptions, timeout: float) -> list[Turn]:
        """See :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.diarize` (model ``speaker``).

        Sent at this backend's priority (the speaker model's queue has no levels; its order is arrival).
        """
        from tritonclient.grpc import InferRequestedOutput
        from tritonclient.utils import InferenceServerException

        if samples.size == 0:
            return []
        try:
            result = await self._client.infer(
                contract.SPEAKER_MODEL,
                speaker_inputs(samples, options),
                outputs=[InferRequestedOutput(contract.TURNS.name)],
                client_timeout=timeout,
            )
        except InferenceServerException as exc:
            raise _translate(exc, timeout) from exc
        rows = result.as_numpy(contract.TURNS.name)
        if rows is None or rows.ndim != 2 or rows.shape[1] != 3:
            raise BackendError(f"Triton returned no {contract.TURNS.name} [n, 3] from {contract.SPEAKER_MODEL}")
        turns = [(float(start), float(end), int(index)) for start, end, index in rows]
        return name_turns(turns, [name for name, _ in options.known])

    async def speakers_served(self, timeout: float) -> bool:
        """See :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.speakers_served`.

        Triton's repository index (tritonclient ``get_model_repository_index``) lists every model of the
        repository, loaded or not: the speaker model is served when it is listed.
        """
        from tritonclient.utils import InferenceServerException

        if self._speakers is None:
            try:
                index = await self._client.get_model_repository_index(as_json=True, client_timeout=timeout)
            except InferenceServerException as exc:
                raise _translate(exc, timeout) from exc
            self._speakers = any(model.get("name") == contract.SPEAKER_MODEL for model in index.get("models", []))
        return self._speakers

    async def speaker_problem(self, timeout: float) -> str | None:
        """See :meth:`~whisper_build.serving.transcription.backend.TranscriptionBackend.speaker_problem`."""
        from tritonclient.grpc import InferInput
        from tritonclient.utils import InferenceServerException

        probe = InferInput(contract.AUDIO.name, [0], "FP32")
        probe.set_data_from_numpy(np.zeros(0, dtype=np.float32))
        try:
            await self._client.infer(contract.SPEAKER_MODEL, [probe], client_timeout=timeout)
        except InferenceServerException as exc:
            error = _translate(exc, timeout)
            return str(error) if isinstance(error, ModelFailed) else None
        return None

    async def reload(self, timeout: float) -> None:
        """``load_model`` of Triton's repository API (needs ``--model-control-mode=explicit``).

        Triton loads a new instance — a new python stub process — and swaps it in.
        """
        from tritonclient.utils import InferenceServerException

        try:
            await self._client.load_model(self.model_name, client_timeout=timeout)
        except InferenceServerException as exc:
            raise _translate(exc, timeout) from exc
        self._served = None

    async def close(self) -> None:
        """Close the gRPC channel."""
        await self._client.close()


def _translate(exc: Exception, timeout: float) -> BackendError:
    """Map a tritonclient error to the gateway's backend errors by gRPC status."""
    status = str(getattr(exc, "status", lambda: "")() or "")
    message = getattr(exc, "message", lambda: str(exc))() or str(exc)
    if FAILED_MARKER in message:
        return ModelFailed(message)
    if "DEADLINE_EXCEEDED" in status:
        return BackendTimeout(f"Triton did not answer within {timeout:g} s")
    if "INVALID_ARG" in status:
        return BackendRejected(message)
    if "UNAVAILABLE" in status and contract.ENGINE_CORE_RESTARTING in message:
        return CoreRestarting(f"Triton is unavailable: {message}")
    if "UNAVAILABLE" in status or "NOT_FOUND" in status:
        return BackendUnavailable(f"Triton is unavailable: {message}")
    if "Stub process" in message and "not healthy" in message:
        return ModelRestarting(f"the model's runtime died and is being loaded again: {message}")
    return BackendError(f"Triton failed the request: {message}")
