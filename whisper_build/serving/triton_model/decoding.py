"""The decoding layer of the Triton ``whisper`` model, one for every engine.

Over :meth:`whisper_build.serving.engines.base.WhisperEngine.generate` (tokens, summed log-prob,
no-speech probability per window) it does per 30 s window what openai/whisper ``transcribe()`` and
faster-whisper ``generate_with_fallback`` do: quality signals, temperature fallback, the silence
rule, segments from timestamp tokens, dropping a word cut by the window's end, word timings; speech
after a decode's last timestamp, or after the last word of a final segment far longer than its text
(:mod:`.early_end`), is decoded once more, alone (:func:`_tails`).
Entry points: :func:`decode_windows` (the rules, in its docstring), :class:`DecodingPolicy` (the
thresholds), :func:`parse_segments`. Docs: docs/serving.md, "Model repository".
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import Hypothesis, WhisperEngine, WordTiming
from whisper_build.serving.engines.features import SAMPLE_RATE, is_silent
from whisper_build.serving.engines.params import DecodingThresholds, EngineParams
from whisper_build.serving.engines.tokens import group_indices
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import SegmentResult, WindowResult
from whisper_build.serving.triton_model.early_end import close_early_ends
from whisper_build.serving.triton_model.segments import (
    SECONDS_PER_TIMESTAMP,
    decoded_words,
    drop_last_word,
    ends_in_speech,
    parse_segments,
    place_words,
    trim_leading_silence,
)

__all__ = [
    "SECONDS_PER_TIMESTAMP",
    "DecodingPolicy",
    "UnsupportedOption",
    "compression_ratio",
    "decode_windows",
    "window_texts",
    "drop_last_word",
    "ends_in_speech",
    "parse_segments",
]

_EPS = 1e-6
MIN_TAIL_SECONDS = 0.5
"""Shortest voiced audio after a window's last timestamp that is decoded again (:func:`_tails`)."""


class UnsupportedOption(ValueError):
    """The engine cannot do what a request asks (e.g. word timestamps on ``tensorrt_llm``)."""


class DecodingPolicy(DecodingThresholds):
    """What :func:`decode_windows` follows: the engine's :class:`DecodingThresholds` and the cut-word rule.

    Attributes:
        cut_speech_db: a window whose last 20 ms frame is above ``silence_dbfs`` and within this
            many dB of its loudest 20 ms frame ends mid-speech: its last word is dropped
            (:func:`ends_in_speech`); 0 turns the rule off.
    """

    cut_speech_db: float = 20.0

    @classmethod
    def from_params(cls, params: EngineParams) -> DecodingPolicy:
        """The policy the model config's engine parameters set (their thresholds, taken as they are)."""
        return cls(**params.model_dump(include=set(DecodingThresholds.model_fields)))

    def temperatures(self, start: float) -> list[float]:
        """``start, start + step, … ≤ 1.0`` (just ``[start]`` when the step is 0)."""
        if self.temperature_increment <= 0:
            return [start]
        steps = int((1.0 - start) / self.temperature_increment + _EPS)
        return [round(start + k * self.temperature_increment, 6) for k in range(steps + 1)]


def compression_ratio(text: str) -> float:
    """UTF-8 length ÷ zlib-compressed length (openai/whisper ``utils.compression_ratio``); 0 for ``""``."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


@dataclass
class _Attempt:
    hypothesis: Hypothesis
    text: str
    avg_logprob: float
    compression_ratio: float
    temperature: float


def _attempt(engine: WhisperEngine, hypothesis: Hypothesis, temperature: float) -> _Attempt:
    text = engine.decode_text(hypothesis.tokens).strip()
    return _Attempt(
        hypothesis,
        text,
        hypothesis.sum_logprob / (len(hypothesis.tokens) + 1),
        compression_ratio(text),
        temperature,
    )


def _is_silence(attempt: _Attempt, policy: DecodingPolicy) -> bool:
    no_speech = attempt.hypothesis.no_speech_prob
    if no_speech is None or no_speech <= policy.no_speech_threshold:
        return False
    return not policy.no_speech_needs_low_logprob or attempt.avg_logprob < policy.logprob_threshold


def _failed(attempt: _Attempt, policy: DecodingPolicy) -> bool:
    return (
        attempt.compression_ratio > policy.compression_ratio_threshold or attempt.avg_logprob < policy.logprob_threshold
    )


def _best(attempts: list[_Attempt], policy: DecodingPolicy) -> _Attempt:
    """The last attempt if it passed, else faster-whisper's pick among all attempts."""
    if not _failed(attempts[-1], policy):
        return attempts[-1]
    readable = [a for a in attempts if a.compression_ratio <= policy.compression_ratio_threshold]
    return max(readable or attempts, key=lambda a: a.avg_logprob)


def _segments(
    engine: WhisperEngine, hypothesis: Hypothesis, audio: np.ndarray, policy: DecodingPolicy
) -> list[SegmentResult]:
    """The segments of one decode of ``audio`` (:func:`parse_segments`, then :func:`trim_leading_silence`)."""
    duration = len(audio) / SAMPLE_RATE
    segments = parse_segments(hypothesis.tokens, engine.timestamp_begin, engine.eot, duration, engine.decode_text)
    return trim_leading_silence(segments, audio, policy.silence_dbfs)


def _in_decode(engine: WhisperEngine) -> bool:
    """Whether ``engine.generate(words=True)`` aligns (``capabilities.aligns_in_decode``)."""
    return bool(getattr(engine.capabilities, "aligns_in_decode", False))


def _generate(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    prompts: Sequence[DecodePrompt],
    penalties: Sequence[float],
    timestamps: bool,
    temperature: float,
    words: bool,
) -> list[Hypothesis]:
    """One engine call; ``words`` asks an engine that aligns while decoding for :attr:`Hypothesis.words`."""
    extra = {"words": True} if words and _in_decode(engine) else {}
    return engine.generate(audio, prompts, penalties, timestamps=timestamps, temperature=temperature, **extra)


def _tails(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    prompts: Sequence[DecodePrompt],
    repetition_penalty: Sequence[float],
    options: Sequence[DecodeOptions],
    policy: DecodingPolicy,
    best_of: dict[int, _Attempt],
    found: dict[int, list[SegmentResult]],
    words: dict[int, list[WordTiming]],
) -> dict[int, list[SegmentResult]]:
    """Segments extended by a decode of the speech after the last timestamp, for the rows that have it.

    With timestamps, Whisper may close its last segment early and end (``<|23.00|><|endoftext|>``:
    "the rest belongs to the next window"); openai/whisper then seeks to that timestamp, but a window
    here has no next decode, so that speech was lost (a whole sentence at a window's end; measured by
    benchmarks/timestamp_mode.py). A tail of at least :data:`MIN_TAIL_SECONDS` after the last segment
    that is not silent (``silence_dbfs``) is decoded once more, alone, at the kept decode's temperature;
    its segments, offset by the tail's start, are appended unless that decode is silence or fails the
    fallback thresholds.

    Returns: the rows whose segments grew, with all their segments. ``words`` (rows aligned while
    decoding) gains the tails' words, shifted by the tail's start.
    """
    starts: dict[int, float] = {}
    tail_of: dict[int, np.ndarray] = {}
    for i, segments in found.items():
        if segments and options[i].timed:
            start = segments[-1].end
            tail = audio[i][round(start * SAMPLE_RATE) :]
            if len(tail) >= MIN_TAIL_SECONDS * SAMPLE_RATE and not is_silent(tail, policy.silence_dbfs):
                starts[i], tail_of[i] = start, tail
    rows = list(starts)
    grown: dict[int, list[SegmentResult]] = {}
    keys = [(best_of[i].temperature, i in words) for i in rows]
    for (temperature, aligned), members in group_indices(keys).items():
        idx = [rows[m] for m in members]
        tails = [tail_of[i] for i in idx]
        penalties = [repetition_penalty[i] for i in idx]
        hypotheses = _generate(engine, tails, [prompts[i] for i in idx], penalties, True, temperature, aligned)
        for i, tail, hypothesis in zip(idx, tails, hypotheses, strict=True):
            attempt = _attempt(engine, hypothesis, temperature)
            if _is_silence(attempt, policy) or _failed(attempt, policy):
                continue
            offset = starts[i]
            more = [
                replace(s, start=s.start + offset, end=s.end + offset)
                for s in _segments(engine, hypothesis, tail, policy)
            ]
            if more:
                grown[i] = found[i] + more
                if hypothesis.words is not None and i in words:
                    text = [t for t in hypothesis.tokens if t < engine.eot]
                    words[i] = words[i] + decoded_words(more, text, hypothesis.words, offset)
    return grown


def check_supported(engine: WhisperEngine, options: Sequence[DecodeOptions]) -> None:
    """Raise :class:`UnsupportedOption` when ``options`` ask what ``engine`` cannot do."""
    caps = engine.capabilities
    if any(o.word_timestamps for o in options) and not caps.word_timestamps:
        raise UnsupportedOption(
            f"word timestamps are not available with engine {engine.name}: it exposes no cross-attention "
            "alignment; ask for segment timestamps only, or serve the model with engine ctranslate2 or torch"
        )
    if any(o.timed for o in options) and not caps.timestamps:
        raise UnsupportedOption(
            f"timestamps are not available with engine {engine.name}; serve the model with engine ctranslate2"
        )
    if any(o.temperature > 0 for o in options) and not caps.sampling:
        raise UnsupportedOption(f"temperature > 0 is not available with engine {engine.name} (greedy only)")


def _attempts(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    prompts: Sequence[DecodePrompt],
    repetition_penalty: Sequence[float],
    options: Sequence[DecodeOptions],
    policy: DecodingPolicy,
) -> dict[int, list[_Attempt]]:
    """Per voiced window, its decodes in temperature order: :func:`decode_windows`' fallback (rules: there)."""
    attempts: dict[int, list[_Attempt]] = {}
    schedule = {
        i: policy.temperatures(o.temperature) if engine.capabilities.sampling and o.fallback else [o.temperature]
        for i, o in enumerate(options)
    }
    pending = [i for i, window in enumerate(audio) if not is_silent(window, policy.silence_dbfs)]
    step = 0
    while pending:
        # One engine call per (temperature, timestamps) group: normally one call per step.
        keys = [(schedule[i][step], options[i].timed, options[i].word_timestamps) for i in pending]
        for (temperature, timestamps, words), rows in group_indices(keys).items():
            idx = [pending[r] for r in rows]
            hypotheses = _generate(
                engine,
                [audio[i] for i in idx],
                [prompts[i] for i in idx],
                [repetition_penalty[i] for i in idx],
                timestamps,
                temperature,
                words,
            )
            if len(hypotheses) != len(idx):
                raise RuntimeError(f"engine returned {len(hypotheses)} hypotheses for {len(idx)} windows")
            for i, hypothesis in zip(idx, hypotheses, strict=True):
                attempts.setdefault(i, []).append(_attempt(engine, hypothesis, temperature))
        step += 1
        pending = [
            i
            for i in pending
            if step < len(schedule[i]) and not _is_silence(attempts[i][-1], policy) and _failed(attempts[i][-1], policy)
        ]
    return attempts


def decode_windows(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    prompts: Sequence[DecodePrompt],
    repetition_penalty: Sequence[float],
    options: Sequence[DecodeOptions],
    policy: DecodingPolicy,
) -> list[WindowResult]:
    """Decode every window with fallback, signals, segments and words.

    Args:
        engine: the loaded engine.
        audio: 1-D float32 windows, 16 kHz, ≤ 30 s.
        prompts: one prompt per window.
        repetition_penalty: one value > 0 per window.
        options: one :class:`DecodeOptions` per window.
        policy: thresholds.

    Returns:
        One :class:`WindowResult` per window, in order.

    Raises:
        UnsupportedOption: an option the engine cannot do (checked before any decoding).
        ValueError: the sequences differ in length.

    Rules: ``avg_logprob = sum_logprob / (len(tokens) + 1)``, ``compression_ratio`` = UTF-8 bytes ÷ zlib-compressed
    bytes. A decode with ``compression_ratio > 2.4`` or ``avg_logprob < -1.0`` is re-decoded at the next temperature
    (``t, t + 0.2, … ≤ 1.0``; not with ``options[i].fallback`` off); only the failed windows, all in one engine call
    per temperature, sampling with the engine's ``sampling_seed``. A window that never passes keeps the attempt with the best ``avg_logprob`` among those
    under the compression threshold, else the best overall (faster-whisper's choice; openai/whisper keeps the last).
    ``no_speech_prob > no_speech_threshold`` (and, with ``no_speech_needs_low_logprob``, ``avg_logprob <
    logprob_threshold``) makes the window silent: no segments, no fallback; windows below ``silence_dbfs`` are not
    decoded. Segments (:func:`parse_segments`) have window-relative times, clamped to the window's audio, monotonic,
    never with empty text; a start in leading silence moves to the first voiced 20 ms frame
    (:func:`trim_leading_silence`). A final segment far longer than its text ends at its last word
    (:func:`.early_end.close_early_ends`); speech after the last segment is decoded again (:func:`_tails`). When the
    audio still carries speech in its last 20 ms (:func:`ends_in_speech`), the window's last word is dropped
    (:func:`drop_last_word`): Whisper completes a cut word with a guess (tiny.en: "Please turn off …" cut 20 ms into
    "off" decodes as "Please turn on."). Word timings come from the decode itself where the engine aligns while
    decoding (``generate(words=True)``: ``torch``), else from :meth:`WhisperEngine.align`; either way placed in their
    segments. Not reproduced on purpose: ``condition_on_previous_text`` (windows decode independently, so all windows
    of all requests decode in ONE batch) and seek-based re-decoding (the gateway cuts windows at silences, so a
    segment without a closing timestamp is closed at the window's end).
    """
    if not len(audio) == len(prompts) == len(repetition_penalty) == len(options):
        raise ValueError("audio, prompts, repetition_penalty and options must have the same length")
    check_supported(engine, options)
    attempts = _attempts(engine, audio, prompts, repetition_penalty, options, policy)
    results: list[WindowResult | None] = [None] * len(audio)
    word_rows: list[int] = []
    best_of = {i: _best(tried, policy) for i, tried in attempts.items()}
    found = {
        i: [] if _is_silence(best, policy) else _segments(engine, best.hypothesis, audio[i], policy)
        for i, best in best_of.items()
    }
    aligned = {
        i: decoded_words(found[i], [t for t in best.hypothesis.tokens if t < engine.eot], best.hypothesis.words)
        for i, best in best_of.items()
        if options[i].word_timestamps and best.hypothesis.words is not None
    }
    found |= close_early_ends(engine, audio, prompts, options, found, aligned)
    found |= _tails(engine, audio, prompts, repetition_penalty, options, policy, best_of, found, aligned)
    for i in range(len(audio)):
        tried = attempts.get(i)
        if not tried:
            results[i] = WindowResult("", [], None, None, None, options[i].temperature, [])
            continue
        best = best_of[i]
        segments = found[i]
        if ends_in_speech(audio[i], policy.silence_dbfs, policy.cut_speech_db):
            segments = drop_last_word(segments, engine.decode_text)
        text = " ".join(s.text for s in segments)
        results[i] = WindowResult(
            text,
            segments,
            best.avg_logprob,
            compression_ratio(text) if text else best.compression_ratio,
            best.hypothesis.no_speech_prob,
            best.temperature,
            [a.temperature for a in tried],
            best.hypothesis.language or (None if engine.multilingual else "en"),
        )
        if options[i].word_timestamps and segments:
            word_rows.append(i)
    late = [i for i in word_rows if i not in aligned]  # engines that align after the decode
    if late:
        late_words = engine.align(
            [audio[i] for i in late],
            [prompts[i] for i in late],
            [[t for s in results[i].segments for t in s.tokens] for i in late],  # type: ignore[union-attr]
        )
        aligned |= dict(zip(late, late_words, strict=True))
    for i in word_rows:
        result = results[i]
        assert result is not None
        results[i] = replace(result, segments=place_words(result.segments, aligned[i]))
    return [r for r in results if r is not None]


def window_texts(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    policy: DecodingPolicy,
    prompts: Sequence[DecodePrompt] | None = None,
) -> list[str]:
    """The text of each window, decoded as the served model decodes a plain request.

    :func:`decode_windows` with default :class:`DecodeOptions`, repetition penalty 1.0 and (by
    default) empty prompts: what the benchmarks and the engine-build smoke test check, so an engine
    that fails the served path (scores, no-speech probability, fallback) fails them too.

    Args:
        engine: the loaded engine.
        audio: 1-D float32 windows, 16 kHz, ≤ 30 s.
        policy: thresholds (:meth:`DecodingPolicy.from_params` of the engine's parameters).
        prompts: one prompt per window; ``None``: :class:`DecodePrompt` defaults.

    Returns:
        One text per window, in order; ``""`` for a silent window.
    """
    prompts = list(prompts) if prompts is not None else [DecodePrompt()] * len(audio)
    n = len(audio)
    return [r.text for r in decode_windows(engine, audio, prompts, [1.0] * n, [DecodeOptions()] * n, policy)]
