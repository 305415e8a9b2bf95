"""Pure batching logic of the Triton ``whisper`` model: request tensors → windows → one engine
call → per-request transcripts.

Kept free of ``triton_python_backend_utils`` so that it is unit-tested without a server;
``model_repository/whisper/1/model.py`` only moves tensors in and out. Tensor shapes follow
``docs/contracts.md`` §5 with Triton's batch dimension first (``max_batch_size > 0``):
``WAV`` float32 ``[B, T]``, ``WAV_LENS`` int32 ``[B, 1]``, ``TEXT_PREFIX`` bytes ``[B, 1]``,
``REPETITION_PENALTY`` float32 ``[B, 1]`` → ``TRANSCRIPTS`` bytes ``[B, 1]``. A request may carry
``B > 1`` windows (all 30 s windows of one file, zero-padded to the longest, with ``WAV_LENS``);
the dynamic batcher may hand several such requests to one ``execute()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whisper_build.serving.engines.base import WhisperEngine
from whisper_build.serving.engines.features import N_SAMPLES
from whisper_build.serving.prompt import DecodePrompt, parse_prompt

__all__ = ["RequestError", "RequestWindows", "parse_request", "run_batch", "transcripts_array"]


class RequestError(ValueError):
    """One request's tensors are invalid; the message names the input and what to fix.
    The model answers that request with this message and serves the others.
    """


@dataclass(frozen=True)
class RequestWindows:
    """The windows of one request, ready for the engine.

    Attributes:
        audio: one 1-D float32 array per window, already cut to its ``WAV_LENS`` length.
        prompts: one decoder prompt per window.
        repetition_penalty: one value > 0 per window.
    """

    audio: list[np.ndarray]
    prompts: list[DecodePrompt]
    repetition_penalty: list[float]


def parse_request(
    wav: np.ndarray | None,
    wav_lens: np.ndarray | None = None,
    text_prefix: np.ndarray | None = None,
    repetition_penalty: np.ndarray | None = None,
) -> RequestWindows:
    """Validate one request's input tensors and split them into windows.

    Args:
        wav: ``WAV`` ``[B, T]`` float32 samples, 16 kHz mono, ``T`` ≤ 480 000 (30 s).
        wav_lens: optional ``WAV_LENS`` ``[B, 1]``: valid samples per row (the rest is padding);
            default ``T`` for every row.
        text_prefix: optional ``TEXT_PREFIX`` ``[B, 1]`` UTF-8 bytes, parsed with
            :func:`whisper_build.serving.prompt.parse_prompt`; default: no prompt.
        repetition_penalty: optional ``REPETITION_PENALTY`` ``[B, 1]``, each > 0; default 1.0.

    Raises:
        RequestError: missing ``WAV``, wrong shapes, lengths out of range, non-finite samples,
            bad UTF-8 or prompt, non-positive penalty.
    """
    if wav is None:
        raise RequestError("input WAV is required: float32 [batch, samples] at 16 kHz")
    if wav.ndim != 2:
        raise RequestError(f"WAV must have shape [batch, samples], got {list(wav.shape)}")
    batch, samples = wav.shape
    if samples > N_SAMPLES:
        raise RequestError(
            f"WAV rows have {samples} samples; at most {N_SAMPLES} (30 s at 16 kHz) per window: "
            "split longer audio into windows"
        )
    if not np.isfinite(wav).all():
        raise RequestError("WAV contains NaN or infinite samples")
    lengths = _per_row(wav_lens, "WAV_LENS", batch, default=samples)
    for length in lengths:
        if not 0 <= length <= samples:
            raise RequestError(f"WAV_LENS values must be in [0, {samples}] (the WAV row length), got {length}")
    prefixes = _per_row(text_prefix, "TEXT_PREFIX", batch, default=b"")
    penalties = [float(p) for p in _per_row(repetition_penalty, "REPETITION_PENALTY", batch, default=1.0)]
    for penalty in penalties:
        if not (np.isfinite(penalty) and penalty > 0):
            raise RequestError(f"REPETITION_PENALTY must be a finite number > 0 (1.0 = off), got {penalty}")
    return RequestWindows(
        audio=[wav[row, : int(length)] for row, length in enumerate(lengths)],
        prompts=[_prompt(raw, row) for row, raw in enumerate(prefixes)],
        repetition_penalty=penalties,
    )


def _per_row(tensor: np.ndarray | None, name: str, batch: int, default: object) -> list:
    """Values of an optional ``[B, 1]`` input, one per row."""
    if tensor is None:
        return [default] * batch
    if tensor.shape not in ((batch, 1), (batch,)):
        raise RequestError(f"{name} must have shape [{batch}, 1] (one value per WAV row), got {list(tensor.shape)}")
    return tensor.reshape(batch).tolist()


def _prompt(raw: object, row: int) -> DecodePrompt:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        return parse_prompt(text, None)
    except UnicodeDecodeError as error:
        raise RequestError(f"TEXT_PREFIX[{row}] is not valid UTF-8") from error
    except ValueError as error:
        raise RequestError(f"TEXT_PREFIX[{row}]: {error}") from error


def run_batch(engine: WhisperEngine, requests: Sequence[RequestWindows | Exception]) -> list[list[str] | Exception]:
    """Decode the windows of all valid requests in ONE engine call and split the texts back.

    Args:
        engine: the loaded engine.
        requests: per request, its windows or the error found while parsing it.

    Returns:
        Per request, in order: its transcripts (one per window), or an exception — the parse
        error, or the engine's error (then every valid request of the batch gets it).
    """
    valid = [r for r in requests if isinstance(r, RequestWindows)]
    try:
        texts = engine.transcribe_batch(
            [a for r in valid for a in r.audio],
            [p for r in valid for p in r.prompts],
            [x for r in valid for x in r.repetition_penalty],
        ) if valid else []  # fmt: skip
        expected = sum(len(r.audio) for r in valid)
        if len(texts) != expected:
            raise RuntimeError(f"returned {len(texts)} transcripts for {expected} windows")
    except Exception as error:  # noqa: BLE001 - reported per request, the model keeps serving
        failure = RuntimeError(f"whisper engine failed: {type(error).__name__}: {error}")
        return [r if isinstance(r, Exception) else failure for r in requests]
    results: list[list[str] | Exception] = []
    offset = 0
    for request in requests:
        if isinstance(request, Exception):
            results.append(request)
            continue
        results.append(texts[offset : offset + len(request.audio)])
        offset += len(request.audio)
    return results


def transcripts_array(texts: Sequence[str]) -> np.ndarray:
    """``TRANSCRIPTS`` tensor: object array ``[B, 1]`` of UTF-8 bytes."""
    out = np.empty((len(texts), 1), dtype=object)
    for row, text in enumerate(texts):
        out[row, 0] = text.encode("utf-8")
    return out
