"""The Triton gRPC implementation of the backend Protocol, and the request's tensors.

:class:`TritonBackend` holds ONE ``tritonclient.grpc.aio`` client (one gRPC channel, shared by all
requests); :func:`infer_inputs` turns a window batch and its
:class:`~whisper_build.serving.transcription.request.WindowRequest` into the model's inputs.
Docs: docs/contracts.md §5.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving import contract
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn, name_turns
from whisper_build.serving.results import ResultError, WindowResult
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
    ModelRestarting,
    ServedModel,
)
from whisper_build.serving.transcription.request import WindowRequest

__all__ = ["TritonBackend", "infer_inputs", "pack_batch", "request_values", "speaker_inputs"]


def pack_batch(windows: Sequence[npt.NDArray[np.float32]]) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int32]]:
    """Zero-pad windows into ``WAV`` FP32 ``[B, T]`` and ``WAV_LENS`` INT32 ``[B, 1]``.

    ``T`` is the longest window; ``WAV_LENS[i]`` is the true length of window ``i`` in samples
    (docs/contracts.md §5).

    Raises: ValueError if ``windows`` is empty.
    """
    if not windows:
        raise ValueError("pack_batch needs at least one window")
    if len(windows) == 1:  # the common single-window request: a view, no copy
        one = np.ascontiguousarray(windows[0], dtype=np.float32)
        return one.reshape(1, -1), np.array([[len(one)]], dtype=np.int32)
    longest = max(len(w) for w in windows)
    wav = np.zeros((len(windows), longest), dtype=np.float32)
    for i, w in enumerate(windows):
        wav[i, : len(w)] = w
    lens = np.array([[len(w)] for w in windows], dtype=np.int32)
    return wav, lens


def request_values(request: WindowRequest) -> dict[str, object]:
    """The one value per row of every per-row input ``request`` sets, by tensor name.

    Inputs of :data:`whisper_build.serving.contract.INPUTS` not named here are sent with their
    table default.
    """
    values: dict[str, object] = {
        contract.TEXT_PREFIX.name: request.text_prefix().encode(),
        contract.REPETITION_PENALTY.name: request.repetition_penalty,
    }
    values.update({t.name: getattr(request.options, t.option) for t in contract.INPUTS if t.option is not None})
    return values


def infer_inputs(windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest) -> list[Any]:
    """The ``tritonclient.grpc.InferInput`` s of one Triton request, one per input of the table (docs/contracts.md §5).

    ``WAV`` FP32 ``[B, T]`` and ``WAV_LENS`` INT32 ``[B, 1]`` from :func:`pack_batch`; every other
    input ``[B, 1]`` with the same value for every window (:func:`request_values`, else the
    table's default), in the table's type.

    Raises: ValueError if ``windows`` is empty.
    """
    from tritonclient.grpc import InferInput

    wav, lens = pack_batch(windows)
    batch = len(windows)
    arrays: dict[str, npt.NDArray[Any]] = {contract.WAV.name: wav, contract.WAV_LENS.name: lens}
    values = request_values(request)
    inputs = []
    for tensor in contract.INPUTS:
        array = arrays.get(tensor.name)
        if array is None:
            value = values.get(tensor.name, tensor.default)
            array = np.empty((batch, 1), dtype=tensor.numpy_type)
            array.fill(value)
        item = InferInput(tensor.name, list(array.shape), tensor.wire_type)
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def speaker_inputs(samples: npt.NDArray[np.float32], options: SpeakerOptions) -> list[Any]:
    """The ``InferInput`` s of one ``speaker`` request: the file, the speaker counts, the known speakers' clips."""
    from tritonclient.grpc import InferInput

    clips = [clip for _, clip in options.known]
    arrays: dict[str, npt.NDArray[Any]] = {
        contract.AUDIO.name: np.ascontiguousarray(samples, dtype=np.float32).reshape(-1),
        contract.MIN_SPEAKERS.name: np.array([options.min_speakers], dtype=np.int32),
        contract.MAX_SPEAKERS.name: np.array([options.max_speakers], dtype=np.int32),
    }
    if clips:
        arrays[contract.REFERENCES.name] = np.concatenate(clips).astype(np.float32)
        arrays[contract.REFERENCE_LENS.name] = np.array([len(c) for c in clips], dtype=np.int32)
    inputs = []
    for tensor in contract.SPEAKER_INPUTS:
        if (array := arrays.get(tensor.name)) is not None:
            item = InferInput(tensor.name, list(array.shape), tensor.wire_type)
            item.set_data_from_numpy(array)
            inputs.append(item)
    return inputs


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
            raise _translate(exc, timeout) from exc

    async def _infer_once(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """One Triton request of at most ``max_batch_size`` windows."""
        from tritonclient.grpc import InferRequestedOutput

        batch = len(windows)
        inputs = infer_inputs(windows, request)
        result = await self._client.infer(
            self.model_name,
            inputs,
            outputs=[InferRequestedOutput(contract.RESULT.name)],
            priority=request.priority or self.priority,
            client_timeout=timeout,
        )
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
    if "DEADLINE_EXCEEDED" in status:
        return BackendTimeout(f"Triton did not answer within {timeout:g} s")
    if "INVALID_ARG" in status:
        return BackendRejected(message)
    if "UNAVAILABLE" in status or "NOT_FOUND" in status:
        return BackendUnavailable(f"Triton is unavailable: {message}")
    if "Stub process" in message and "not healthy" in message:
        return ModelRestarting(f"the model's runtime died and is being loaded again: {message}")
    return BackendError(f"Triton failed the request: {message}")
