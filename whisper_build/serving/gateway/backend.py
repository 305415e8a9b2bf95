"""The gateway's view of the model server: a small interface and its Triton gRPC implementation.

:class:`TranscriptionBackend` is what the app needs; :class:`TritonBackend` implements it with
ONE ``tritonclient.grpc.aio`` client (one gRPC channel, shared by all requests). Tests inject
another implementation through ``create_app(settings, backend=...)``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from whisper_build.serving import contract
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.results import ResultError, WindowResult


class BackendError(Exception):
    """The model server failed the request (answered as 502)."""


class BackendUnavailable(BackendError):
    """The model server cannot be reached or the model is not loaded (answered as 503)."""


class ModelRestarting(BackendUnavailable):
    """The model's python stub process died (Triton: "Stub process '…' is not healthy"); 503 until it is loaded again.

    A window's inference is idempotent, so the gateway retries it once on the reloaded model
    (:mod:`whisper_build.serving.gateway.recovery`).
    """


class BackendTimeout(BackendError):
    """The model server did not answer within the deadline (answered as 504)."""


class BackendRejected(BackendError):
    """The model refused the request as invalid for it (Triton INVALID_ARG; answered as 400).

    E.g. a non-English language on an English-only model, or word timestamps on tensorrt_llm.
    """


@dataclass(frozen=True)
class ServedModel:
    """What the model server's config says about the served model (docs/contracts.md §5).

    Attributes:
        name: the model's name (Triton config ``name``, e.g. ``whisper``).
        max_batch_size: most windows one request may carry.
        multilingual: the ``multilingual`` parameter; ``None`` when the config does not say.
        engine: the ``engine`` parameter (``ctranslate2``, ``tensorrt_llm``, ``torch``), if any.
    """

    name: str
    max_batch_size: int
    multilingual: bool | None = None
    engine: str | None = None

    @classmethod
    def from_triton_config(cls, config: dict[str, Any]) -> ServedModel:
        """From Triton's model config as JSON (``get_model_config(..., as_json=True)["config"]``).

        Raises:
            BackendError: the config lacks a name.
        """
        parameters = {k: (v or {}).get("string_value") for k, v in (config.get("parameters") or {}).items()}
        multilingual = parameters.get("multilingual")
        if not config.get("name"):
            raise BackendError("Triton returned a model config without a name")
        return cls(
            name=str(config["name"]),
            max_batch_size=max(1, int(config.get("max_batch_size", 1))),
            multilingual=None if multilingual not in ("true", "false") else multilingual == "true",
            engine=parameters.get("engine"),
        )


class TranscriptionBackend(Protocol):
    """What the gateway needs from a model server."""

    async def served_model(self, timeout: float) -> ServedModel:
        """The served model's config (read once, then cached until :meth:`reload`).

        Raises: BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def transcribe(
        self,
        windows: Sequence[npt.NDArray[np.float32]],
        text_prefix: str,
        repetition_penalty: float,
        timeout: float,
        options: DecodeOptions | None = None,
    ) -> list[WindowResult]:
        """Transcribe each window (16 kHz mono float32, ≤ 30 s) with the same prompt and options.

        Returns: one :class:`WindowResult` per window, in order.
        Raises: BackendRejected, BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def reload(self, timeout: float) -> None:
        """Ask the model server to load the model again (repair after its runtime died).

        Raises: BackendUnavailable, BackendTimeout, BackendError.
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class DelegatingBackend:
    """A :class:`TranscriptionBackend` that forwards every call to ``backend``; wrappers override what they add to."""

    def __init__(self, backend: TranscriptionBackend) -> None:
        self.backend = backend

    async def served_model(self, timeout: float) -> ServedModel:
        """The wrapped backend's."""
        return await self.backend.served_model(timeout)

    async def transcribe(
        self,
        windows: Sequence[npt.NDArray[np.float32]],
        text_prefix: str,
        repetition_penalty: float,
        timeout: float,
        options: DecodeOptions | None = None,
    ) -> list[WindowResult]:
        """The wrapped backend's."""
        return await self.backend.transcribe(windows, text_prefix, repetition_penalty, timeout, options)

    async def reload(self, timeout: float) -> None:
        """The wrapped backend's."""
        await self.backend.reload(timeout)

    async def close(self) -> None:
        """The wrapped backend's."""
        await self.backend.close()


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


def request_values(text_prefix: str, repetition_penalty: float, options: DecodeOptions) -> dict[str, object]:
    """The one value per row of every per-row input the gateway sets, by tensor name.

    Inputs of :data:`whisper_build.serving.contract.INPUTS` not named here are sent with their
    table default.
    """
    values: dict[str, object] = {
        contract.TEXT_PREFIX.name: text_prefix.encode(),
        contract.REPETITION_PENALTY.name: repetition_penalty,
    }
    values.update({t.name: getattr(options, t.option) for t in contract.INPUTS if t.option is not None})
    return values


def infer_inputs(
    windows: Sequence[npt.NDArray[np.float32]],
    text_prefix: str,
    repetition_penalty: float,
    options: DecodeOptions,
) -> list[Any]:
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
    values = request_values(text_prefix, repetition_penalty, options)
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


class TritonBackend:
    """:class:`TranscriptionBackend` over Triton gRPC (model contract: docs/contracts.md §5).

    Windows beyond the model's ``max_batch_size`` are sent as several requests, in order.

    Args:
        url: Triton gRPC ``host:port``.
        model_name: Triton model name (``whisper``).
        priority: the requests' priority level (``contract.SYNC_PRIORITY`` / ``BULK_PRIORITY``); 0 = the
            model's default level (synchronous).
    """

    def __init__(self, url: str, model_name: str, priority: int = 0) -> None:
        from tritonclient.grpc.aio import InferenceServerClient

        self.url = url
        self.model_name = model_name
        self.priority = priority
        self._client = InferenceServerClient(url=url)
        self._served: ServedModel | None = None

    async def served_model(self, timeout: float) -> ServedModel:
        """See :meth:`TranscriptionBackend.served_model` (tritonclient ``get_model_config``)."""
        from tritonclient.utils import InferenceServerException

        if self._served is None:
            try:
                config = await self._client.get_model_config(self.model_name, as_json=True, client_timeout=timeout)
            except InferenceServerException as exc:
                raise _translate(exc, timeout) from exc
            self._served = ServedModel.from_triton_config(config["config"])
        return self._served

    async def transcribe(
        self,
        windows: Sequence[npt.NDArray[np.float32]],
        text_prefix: str,
        repetition_penalty: float,
        timeout: float,
        options: DecodeOptions | None = None,
    ) -> list[WindowResult]:
        """See :meth:`TranscriptionBackend.transcribe`."""
        from tritonclient.utils import InferenceServerException

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        options = options or DecodeOptions()
        try:
            limit = (await self.served_model(timeout)).max_batch_size
            texts: list[WindowResult] = []
            for i in range(0, len(windows), limit):
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise BackendTimeout(f"Triton did not finish within {timeout:g} s")
                texts += await self._infer(windows[i : i + limit], text_prefix, repetition_penalty, remaining, options)
            return texts
        except InferenceServerException as exc:
            raise _translate(exc, timeout) from exc

    async def _infer(
        self,
        windows: Sequence[npt.NDArray[np.float32]],
        text_prefix: str,
        repetition_penalty: float,
        timeout: float,
        options: DecodeOptions,
    ) -> list[WindowResult]:
        from tritonclient.grpc import InferRequestedOutput

        batch = len(windows)
        inputs = infer_inputs(windows, text_prefix, repetition_penalty, options)
        result = await self._client.infer(
            self.model_name,
            inputs,
            outputs=[InferRequestedOutput(contract.RESULT.name)],
            priority=self.priority,
            client_timeout=timeout,
        )
        out = result.as_numpy(contract.RESULT.name)
        if out is None or out.size != batch:
            raise BackendError(f"Triton returned {0 if out is None else out.size} results for {batch} windows")
        try:
            return [WindowResult.from_json(v) for v in out.reshape(-1)]
        except ResultError as exc:
            raise BackendError(f"Triton returned an unreadable {contract.RESULT.name}: {exc}") from exc

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
