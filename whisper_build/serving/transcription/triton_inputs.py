"""The Triton model's input tensors: a window batch and its request, a file for the ``speaker`` model.

:func:`infer_inputs` turns a window batch and its
:class:`~whisper_build.serving.transcription.request.WindowRequest` into the ``whisper`` model's
``InferInput`` s (:func:`pack_batch`, :func:`request_values`); :func:`speaker_inputs` does the same for
the ``speaker`` model; :func:`scheduler_parameters` are the request parameters the model's scheduler
reads. Sent by :mod:`~whisper_build.serving.transcription.triton`. Docs: docs/contracts.md §5.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving import contract
from whisper_build.serving.diarization.speakers import SpeakerOptions
from whisper_build.serving.transcription.request import WindowRequest

__all__ = ["infer_inputs", "pack_batch", "request_values", "scheduler_parameters", "speaker_inputs"]


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


def scheduler_parameters(priority: int, timeout: float) -> dict[str, int]:
    """The request parameters the model's scheduler reads (docs/contracts.md §5).

    ``contract.PRIORITY_PARAMETER``: ``priority`` (``1..PRIORITY_LEVELS``; 0 = the default level,
    ``contract.SYNC_PRIORITY``); ``contract.TIMEOUT_PARAMETER``: ``timeout`` (seconds) in whole
    milliseconds, at least 1.
    """
    return {
        contract.PRIORITY_PARAMETER: priority or contract.SYNC_PRIORITY,
        contract.TIMEOUT_PARAMETER: max(1, int(timeout * 1000)),
    }
