"""One request to the decoupled ``whisper`` model over its own gRPC stream (``tritonclient.grpc.aio``).

The model answers only over gRPC streaming; the ``triton_grpc_error`` header makes Triton end a failed
stream with the request's gRPC status (``UNAVAILABLE``, ``INVALID_ARG``, ``CANCELLED`` …) as a unary
call would report it (Triton docs, "GRPC Status Codes"), so tests read ``status()`` as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import numpy as np
from tritonclient.grpc import InferInput, InferResult
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.grpc.aio import InferenceServerClient

from whisper_build.serving import contract

STATUS_HEADERS = {"triton_grpc_error": "true"}


def tensors(windows: Sequence[np.ndarray], **optional: np.ndarray) -> list[InferInput]:
    """The audio [B, T] zero-padded and the lengths [B, 1] of ``windows``, plus optional inputs by tensor name."""
    batch, longest = len(windows), max(len(w) for w in windows)
    wav = np.zeros((batch, longest), dtype=np.float32)
    for i, window in enumerate(windows):
        wav[i, : len(window)] = window
    lens = np.array([[len(w)] for w in windows], dtype=np.int32)
    arrays = {contract.WAV.name: wav, contract.WAV_LENS.name: lens, **optional}
    types = {t.name: t.wire_type for t in contract.INPUTS}
    inputs = []
    for name, array in arrays.items():
        tensor = InferInput(name, list(array.shape), types[name])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


async def stream_infer(
    url: str, inputs: list[InferInput], parameters: dict[str, Any] | None = None, timeout: float = 300.0
) -> InferResult:
    """Send one request on a stream of its own and return its single response.

    Raises:
        tritonclient.utils.InferenceServerException: the request failed (``status()`` is its gRPC code).
    """
    async with InferenceServerClient(url) as client:

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "whisper", "inputs": inputs, "parameters": parameters or {}}

        try:
            async for result, error in client.stream_infer(requests(), stream_timeout=timeout, headers=STATUS_HEADERS):
                if error is not None:
                    raise error
                return result
        except grpc.RpcError as error:
            raise get_error_grpc(error) from None
    raise AssertionError("the stream closed without a response")


def texts(result: InferResult) -> list[str]:
    """``TRANSCRIPTS`` of a response, decoded."""
    return [row[0].decode() for row in result.as_numpy(contract.TRANSCRIPTS.name)]
