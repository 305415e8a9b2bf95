"""Pure batching logic of the Triton ``whisper`` model: request tensors → windows → one engine call → transcripts.

Kept free of ``triton_python_backend_utils`` so that it is unit-tested without a server;
``model_repository/whisper/1/model.py`` only moves tensors in and out. Tensor shapes follow
``docs/contracts.md`` §5 with Triton's batch dimension first (``max_batch_size > 0``):
``WAV`` float32 ``[B, T]``, ``WAV_LENS`` int32 ``[B, 1]``, ``TEXT_PREFIX`` bytes ``[B, 1]``,
``REPETITION_PENALTY`` float32 ``[B, 1]``, ``TIMESTAMPS`` / ``WORD_TIMESTAMPS`` bool ``[B, 1]``,
``TEMPERATURE`` float32 ``[B, 1]`` → ``TRANSCRIPTS`` bytes ``[B, 1]`` and ``RESULT`` bytes ``[B, 1]``
(one JSON object per window, :meth:`WindowResult.to_json`). A request may carry
``B > 1`` windows (all 30 s windows of one file, zero-padded to the longest, with ``WAV_LENS``);
the dynamic batcher may hand several such requests to one ``execute()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from whisper_build.serving import contract
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import WhisperEngine
from whisper_build.serving.engines.features import N_SAMPLES
from whisper_build.serving.prompt import DecodePrompt, english_only_refusal, parse_prompt
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.decoding import (
    DecodingPolicy,
    UnsupportedOption,
    check_supported,
    decode_windows,
)
from whisper_build.serving.triton_model.language import assign_languages

__all__ = [
    "RequestError",
    "RequestWindows",
    "parse_request",
    "results_array",
    "run_batch",
    "transcripts_array",
]


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
        options: one :class:`DecodeOptions` per window.
        rows: every optional input's per-row values by tensor name (table defaults filled in).
    """

    audio: list[np.ndarray]
    prompts: list[DecodePrompt]
    repetition_penalty: list[float]
    options: list[DecodeOptions] = field(default_factory=list)
    rows: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.options:
            self.options.extend(DecodeOptions() for _ in self.audio)


def parse_request(inputs: Mapping[str, np.ndarray | None]) -> RequestWindows:
    """Validate one request's input tensors and split them into windows.

    Args:
        inputs: the arrays of :data:`whisper_build.serving.contract.INPUTS` by tensor name (absent
            or ``None``: not sent). ``WAV`` ``[B, T]`` float32 samples, 16 kHz mono, ``T`` ≤
            480 000 (30 s); every other input is optional, ``[B, 1]``, its default the table's:
            ``WAV_LENS`` valid samples per row (default ``T``); ``TEXT_PREFIX`` UTF-8 bytes, parsed
            with :func:`whisper_build.serving.prompt.parse_prompt`; ``REPETITION_PENALTY`` each > 0;
            ``TIMESTAMPS`` / ``WORD_TIMESTAMPS`` bool (words imply timestamps); ``TEMPERATURE`` in
            ``[0, 1]``, the first temperature of the fallback sequence; ``FALLBACK`` bool (false: that one).

    Returns:
        The windows, with every per-row input's values in :attr:`RequestWindows.rows`.

    Raises:
        RequestError: missing ``WAV``, wrong shapes, lengths out of range, non-finite samples,
            bad UTF-8 or prompt, non-positive penalty, temperature outside [0, 1].
    """
    wav = inputs.get(contract.WAV.name)
    if wav is None:
        raise RequestError(f"input {contract.WAV.name} is required: float32 [batch, samples] at 16 kHz")
    if wav.ndim != 2:
        raise RequestError(f"{contract.WAV.name} must have shape [batch, samples], got {list(wav.shape)}")
    batch, samples = wav.shape
    if samples > N_SAMPLES:
        raise RequestError(
            f"{contract.WAV.name} rows have {samples} samples; at most {N_SAMPLES} (30 s at 16 kHz) per window: "
            "split longer audio into windows"
        )
    if not np.isfinite(wav).all():
        raise RequestError(f"{contract.WAV.name} contains NaN or infinite samples")
    lens = contract.WAV_LENS.name
    rows = {
        t.name: _per_row(inputs.get(t.name), t.name, batch, default=samples if t.name == lens else t.default)
        for t in contract.INPUTS
        if t.name != contract.WAV.name
    }
    for length in rows[lens]:
        if not 0 <= length <= samples:
            raise RequestError(
                f"{lens} values must be in [0, {samples}] (the {contract.WAV.name} row length), got {length}"
            )
    penalties = [float(p) for p in rows[contract.REPETITION_PENALTY.name]]
    for penalty in penalties:
        if not (np.isfinite(penalty) and penalty > 0):
            raise RequestError(
                f"{contract.REPETITION_PENALTY.name} must be a finite number > 0 (1.0 = off), got {penalty}"
            )
    options = [_options(rows, row) for row in range(batch)]
    for option in options:
        if not (np.isfinite(option.temperature) and 0.0 <= option.temperature <= 1.0):
            raise RequestError(
                f"{contract.TEMPERATURE.name} must be in [0, 1] (0 = beam search/greedy), got {option.temperature}"
            )
    return RequestWindows(
        audio=[wav[row, : int(length)] for row, length in enumerate(rows[lens])],
        prompts=[_prompt(raw, row) for row, raw in enumerate(rows[contract.TEXT_PREFIX.name])],
        repetition_penalty=penalties,
        options=options,
        rows=rows,
    )


def _options(rows: dict[str, list[Any]], row: int) -> DecodeOptions:
    """Row ``row``'s :class:`DecodeOptions` from the inputs that carry its fields (words imply timestamps)."""
    raw = DecodeOptions(**{t.option: rows[t.name][row] for t in contract.INPUTS if t.option is not None})
    words = bool(raw.word_timestamps)
    return DecodeOptions(bool(raw.timestamps) or words, words, float(raw.temperature), bool(raw.fallback))


def _per_row(tensor: np.ndarray | None, name: str, batch: int, default: object) -> list[Any]:
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


MULTILINGUAL_HINT = "model.name without .en in the config; on a workstation: make serve MODEL=base"
"""Where a multilingual model comes from, for the English-only refusals."""


def _check_model(engine: WhisperEngine, request: RequestWindows) -> RequestWindows | RequestError:
    """The request, or a :class:`RequestError` when it asks what this engine/model cannot do."""
    if not engine.multilingual:
        for prompt in request.prompts:
            refusal = english_only_refusal(prompt.language, prompt.task)
            if refusal is not None:
                return RequestError(f"{refusal} ({MULTILINGUAL_HINT})")
    try:
        check_supported(engine, request.options)
    except UnsupportedOption as error:
        return RequestError(str(error))
    return request


def run_batch(
    engine: WhisperEngine,
    requests: Sequence[RequestWindows | Exception],
    policy: DecodingPolicy | None = None,
) -> list[list[WindowResult] | Exception]:
    """Decode the windows of all valid requests together and split the results back.

    All windows go through ONE :func:`decode_windows` call (one engine call per fallback step),
    after one language per request is set (:func:`whisper_build.serving.triton_model.language.assign_languages`,
    one detection call for the batch).

    Args:
        engine: the loaded engine.
        requests: per request, its windows or the error found while parsing it.
        policy: fallback and silence thresholds (defaults: openai/whisper's).

    Returns:
        Per request, in order: one :class:`WindowResult` per window, or an exception — the
        parse error, a :class:`RequestError` for options the model cannot serve, or the engine's
        error (then every valid request of the batch gets it).
    """
    policy = policy or DecodingPolicy()
    checked = [r if isinstance(r, Exception) else _check_model(engine, r) for r in requests]
    valid = [r for r in checked if isinstance(r, RequestWindows)]
    try:
        languages = assign_languages(
            engine, [(r.audio, r.prompts) for r in valid], policy.silence_dbfs, policy.default_language
        )
        valid = [replace(r, prompts=prompts) for r, prompts in zip(valid, languages, strict=True)]
        windows = decode_windows(
            engine,
            [a for r in valid for a in r.audio],
            [p for r in valid for p in r.prompts],
            [x for r in valid for x in r.repetition_penalty],
            [o for r in valid for o in r.options],
            policy,
        ) if valid else []  # fmt: skip
        expected = sum(len(r.audio) for r in valid)
        if len(windows) != expected:
            raise RuntimeError(f"returned {len(windows)} results for {expected} windows")
    except Exception as error:  # noqa: BLE001 - reported per request, the model keeps serving
        failure = RuntimeError(f"whisper engine failed: {type(error).__name__}: {error}")
        return [r if isinstance(r, Exception) else failure for r in checked]
    results: list[list[WindowResult] | Exception] = []
    offset = 0
    for request in checked:
        if isinstance(request, Exception):
            results.append(request)
            continue
        results.append(windows[offset : offset + len(request.audio)])
        offset += len(request.audio)
    return results


def results_array(windows: Sequence[WindowResult]) -> np.ndarray:
    """``RESULT`` tensor: object array ``[B, 1]`` of UTF-8 JSON (:meth:`WindowResult.to_json`)."""
    out = np.empty((len(windows), 1), dtype=object)
    for row, window in enumerate(windows):
        out[row, 0] = window.to_json().encode("utf-8")
    return out


def transcripts_array(texts: Sequence[str]) -> np.ndarray:
    """``TRANSCRIPTS`` tensor: object array ``[B, 1]`` of UTF-8 bytes."""
    out = np.empty((len(texts), 1), dtype=object)
    for row, text in enumerate(texts):
        out[row, 0] = text.encode("utf-8")
    return out
