"""The decoding layer of the Triton ``whisper`` model, one for every engine.

Over :meth:`whisper_build.serving.engines.base.WhisperEngine.generate` (tokens, summed log-prob,
no-speech probability per window) it does per 30 s window what openai/whisper ``transcribe()`` and
faster-whisper ``generate_with_fallback`` do: quality signals, temperature fallback, the silence
rule, segments from timestamp tokens, dropping a word cut by the window's end, word timings.
Entry points: :func:`decode_windows` (the rules, in its docstring), :class:`DecodingPolicy` (the
thresholds), :func:`parse_segments`. Docs: docs/serving.md, "Model repository".
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import EngineParams, Hypothesis, WhisperEngine, WordTiming
from whisper_build.serving.engines.features import SAMPLE_RATE, is_silent
from whisper_build.serving.engines.tokens import group_indices
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import SegmentResult, WindowResult, WordResult
from whisper_build.serving.silence import SILENCE_DBFS, TIMESTAMP_FRAME, frame_dbfs

__all__ = [
    "SECONDS_PER_TIMESTAMP",
    "DecodingPolicy",
    "UnsupportedOption",
    "compression_ratio",
    "decode_windows",
    "drop_last_word",
    "ends_in_speech",
    "parse_segments",
]

SECONDS_PER_TIMESTAMP = 0.02
"""Time step of Whisper's timestamp tokens (``<|0.00|>`` … ``<|30.00|>``), openai/whisper ``tokenizer.py``."""
_EPS = 1e-6


class UnsupportedOption(ValueError):
    """The engine cannot do what a request asks (e.g. word timestamps on ``tensorrt_llm``)."""


@dataclass(frozen=True)
class DecodingPolicy:
    """Thresholds of the fallback and silence rules (openai/whisper ``transcribe()`` defaults).

    Attributes:
        temperature_increment: fallback step; 0 = no fallback.
        compression_ratio_threshold: re-decode above this (2.4).
        logprob_threshold: re-decode below this average log-prob (-1.0).
        no_speech_threshold: silent above this no-speech probability (0.6).
        no_speech_needs_low_logprob: silent only if also below ``logprob_threshold``.
        silence_dbfs: windows quieter than this are not decoded.
        cut_speech_db: a window whose last 20 ms frame is above ``silence_dbfs`` and within this
            many dB of its loudest 20 ms frame ends mid-speech: its last word is dropped
            (:func:`ends_in_speech`); 0 turns the rule off.
        default_language: a multilingual model's language where the request names none and the
            engine cannot detect it.
    """

    temperature_increment: float = 0.2
    compression_ratio_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    no_speech_needs_low_logprob: bool = False
    silence_dbfs: float = SILENCE_DBFS
    cut_speech_db: float = 20.0
    default_language: str = "en"

    @classmethod
    def from_params(cls, params: EngineParams) -> DecodingPolicy:
        """The policy the model config's engine parameters set."""
        return cls(
            temperature_increment=params.temperature_increment,
            compression_ratio_threshold=params.compression_ratio_threshold,
            logprob_threshold=params.logprob_threshold,
            no_speech_threshold=params.no_speech_threshold,
            no_speech_needs_low_logprob=params.no_speech_needs_low_logprob,
            silence_dbfs=params.silence_dbfs,
            default_language=params.default_language,
        )

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


def parse_segments(
    tokens: Sequence[int],
    timestamp_begin: int,
    eot: int,
    duration: float,
    decode: object,
) -> list[SegmentResult]:
    """Segments of one window from its generated tokens.

    A timestamp token closes the open segment (if it has text) at its time and opens the next
    one; a pair ``<|a|><|b|>`` thus ends one segment at ``a`` and starts the next at ``b``
    (openai/whisper ``transcribe()``: consecutive timestamps). Text after the last timestamp
    (a segment cut off by the window's end or by the token limit) is closed at ``duration``.
    Without any timestamp token the window is one segment ``[0, duration]``.

    Times are clamped to ``[0, duration]`` and made monotonic (a segment never starts before the
    previous one ends, never ends before it starts); segments whose text is empty after
    stripping are dropped.

    Args:
        tokens: generated ids without the prompt and without ``<|endoftext|>``.
        timestamp_begin: id of ``<|0.00|>``.
        eot: id of ``<|endoftext|>``; other special ids (``eot`` ≤ id < ``timestamp_begin``) are ignored.
        duration: the window's audio length in seconds.
        decode: ``callable(list[int]) -> str`` turning text ids into text.
    """
    raw: list[tuple[float, float, list[int]]] = []
    start: float | None = None
    text: list[int] = []
    for token in tokens:
        if token >= timestamp_begin:
            time = (token - timestamp_begin) * SECONDS_PER_TIMESTAMP
            if text:
                raw.append((start if start is not None else 0.0, time, text))
                text = []
            start = time
        elif token < eot:
            text.append(token)
    if text:
        raw.append((start if start is not None else 0.0, duration, text))
    segments: list[SegmentResult] = []
    previous_end = 0.0
    for begin, end, ids in raw:
        content = decode(ids).strip()  # type: ignore[operator]
        if not content:
            continue
        begin = min(max(begin, previous_end), duration)
        end = min(max(end, begin), duration)
        segments.append(SegmentResult(begin, end, content, ids))
        previous_end = end
    return segments


def ends_in_speech(audio: np.ndarray, silence_dbfs: float, cut_speech_db: float) -> bool:
    """True when ``audio`` (16 kHz) is cut while someone speaks.

    That is: its last 20 ms frame is louder than ``silence_dbfs`` and at most ``cut_speech_db``
    below its loudest 20 ms frame. A window that ends in a pause, or in a noise floor well under
    the speech (a real recording's room noise is typically 30 dB or more under speech), is not
    cut. ``cut_speech_db <= 0`` always gives False.
    """
    level = frame_dbfs(audio)
    if cut_speech_db <= 0 or level.size == 0:
        return False
    return bool(level[-1] > silence_dbfs and level[-1] >= level.max() - cut_speech_db)


def drop_last_word(segments: list[SegmentResult], decode: object) -> list[SegmentResult]:
    """``segments`` without the last word of the last segment (the segment goes if nothing is left).

    The last word starts at the last text token whose text begins with a space (Whisper's BPE
    marks word starts so), taking any punctuation after it; in a segment with no later word
    start (one word, or a script written without spaces) the last token goes.

    Args:
        segments: a window's segments, in order.
        decode: ``callable(list[int]) -> str`` turning text ids into text.
    """
    if not segments:
        return segments
    last = segments[-1]
    starts = [k for k, t in enumerate(last.tokens) if k > 0 and decode([t]).startswith(" ")]  # type: ignore[operator]
    keep = last.tokens[: starts[-1] if starts else len(last.tokens) - 1]
    text = decode(keep).strip() if keep else ""  # type: ignore[operator]
    if not text:
        return segments[:-1]
    return [*segments[:-1], SegmentResult(last.start, last.end, text, keep, last.words)]


def trim_leading_silence(segments: list[SegmentResult], audio: np.ndarray, silence_dbfs: float) -> list[SegmentResult]:
    """Move each segment's start forward past 20 ms frames quieter than ``silence_dbfs``.

    Whisper places a window's first timestamp at most 1 s in (openai/whisper
    ``max_initial_timestamp`` = 1.0, CTranslate2 ``max_initial_timestamp_index`` = 50), so a
    window that opens with 10 s of silence would start its first segment at 0 s. Starts never
    move past the segment's end or backwards.
    """
    if not segments or audio.size == 0:
        return segments
    level = frame_dbfs(audio)
    if level.size == 0:
        return segments
    voiced = level > silence_dbfs
    out = []
    for segment in segments:
        first, last = (
            int(segment.start * SAMPLE_RATE) // TIMESTAMP_FRAME,
            int(segment.end * SAMPLE_RATE) // TIMESTAMP_FRAME,
        )
        hits = np.flatnonzero(voiced[first:last])
        start = (
            segment.start
            if hits.size == 0
            else max(segment.start, (first + int(hits[0])) * TIMESTAMP_FRAME / SAMPLE_RATE)
        )
        out.append(SegmentResult(min(start, segment.end), segment.end, segment.text, segment.tokens, segment.words))
    return out


def _place_words(segments: list[SegmentResult], words: list[WordTiming]) -> list[SegmentResult]:
    """Give each segment the words of its tokens (in order), clamped inside it and monotonic."""
    placed: list[SegmentResult] = []
    queue = list(words)
    last_end = 0.0
    for segment in segments:
        budget = len(segment.tokens)
        mine: list[WordResult] = []
        while queue and budget > 0:
            word = queue.pop(0)
            budget -= max(1, word.tokens)
            start = min(max(word.start, segment.start, last_end), segment.end)
            end = min(max(word.end, start), segment.end)
            mine.append(WordResult(word.word, start, end, word.probability))
            last_end = end
        placed.append(SegmentResult(segment.start, segment.end, segment.text, segment.tokens, mine))
    return placed


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


def check_supported(engine: WhisperEngine, options: Sequence[DecodeOptions]) -> None:
    """Raise :class:`UnsupportedOption` when ``options`` ask what ``engine`` cannot do."""
    caps = engine.capabilities
    if any(o.word_timestamps for o in options) and not caps.word_timestamps:
        raise UnsupportedOption(
            f"word timestamps are not available with engine {engine.name}: it exposes no cross-attention "
            "alignment; ask for segment timestamps only, or serve the model with engine ctranslate2"
        )
    if any(o.timestamps or o.word_timestamps for o in options) and not caps.timestamps:
        raise UnsupportedOption(
            f"timestamps are not available with engine {engine.name}; serve the model with engine ctranslate2"
        )
    if any(o.temperature > 0 for o in options) and not caps.sampling:
        raise UnsupportedOption(f"temperature > 0 is not available with engine {engine.name} (greedy only)")


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

    Rules: ``avg_logprob = sum_logprob / (len(tokens) + 1)``, ``compression_ratio`` = UTF-8 bytes ÷
    zlib-compressed bytes. A decode with ``compression_ratio > 2.4`` or ``avg_logprob < -1.0`` is
    re-decoded at the next temperature (``t, t + 0.2, … ≤ 1.0``); only the failed windows, all in one
    engine call per temperature, sampling with the engine's ``sampling_seed``. A window that never
    passes keeps the attempt with the best ``avg_logprob`` among those under the compression
    threshold, else the best overall (faster-whisper's choice; openai/whisper keeps the last).
    ``no_speech_prob > no_speech_threshold`` (and, with ``no_speech_needs_low_logprob``,
    ``avg_logprob < logprob_threshold``) makes the window silent: no segments, no fallback; windows
    below ``silence_dbfs`` are not decoded. Segments (:func:`parse_segments`) have window-relative
    times, clamped to the window's audio, monotonic, never with empty text; a start in leading silence
    moves to the first voiced 20 ms frame (:func:`trim_leading_silence`). When the audio still carries
    speech in its last 20 ms (:func:`ends_in_speech`), the window's last word is dropped
    (:func:`drop_last_word`): Whisper completes a cut word with a guess (tiny.en: "Please turn off …"
    cut 20 ms into "off" decodes as "Please turn on."). Word timings come from
    :meth:`WhisperEngine.align`, placed in their segments. Not reproduced on purpose:
    ``condition_on_previous_text`` (windows decode independently, so all windows of all requests
    decode in ONE batch) and seek-based re-decoding (the gateway cuts windows at silences, so a
    segment without a closing timestamp is closed at the window's end).
    """
    if not len(audio) == len(prompts) == len(repetition_penalty) == len(options):
        raise ValueError("audio, prompts, repetition_penalty and options must have the same length")
    check_supported(engine, options)
    attempts: dict[int, list[_Attempt]] = {}
    schedule = {
        i: policy.temperatures(o.temperature) if engine.capabilities.sampling else [o.temperature]
        for i, o in enumerate(options)
    }
    pending = [i for i, window in enumerate(audio) if not is_silent(window, policy.silence_dbfs)]
    step = 0
    while pending:
        # One engine call per (temperature, timestamps) group: normally one call per step.
        keys = [(schedule[i][step], options[i].timestamps or options[i].word_timestamps) for i in pending]
        for (temperature, timestamps), rows in group_indices(keys).items():
            idx = [pending[r] for r in rows]
            hypotheses = engine.generate(
                [audio[i] for i in idx],
                [prompts[i] for i in idx],
                [repetition_penalty[i] for i in idx],
                timestamps=timestamps,
                temperature=temperature,
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
    results: list[WindowResult | None] = [None] * len(audio)
    word_rows: list[int] = []
    for i in range(len(audio)):
        tried = attempts.get(i)
        if not tried:
            results[i] = WindowResult("", [], None, None, None, options[i].temperature, [])
            continue
        best = _best(tried, policy)
        duration = len(audio[i]) / SAMPLE_RATE
        silent = _is_silence(best, policy)
        segments = (
            []
            if silent
            else trim_leading_silence(
                parse_segments(
                    best.hypothesis.tokens, engine.timestamp_begin, engine.eot, duration, engine.decode_text
                ),
                audio[i],
                policy.silence_dbfs,
            )
        )
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
    if word_rows:
        words = engine.align(
            [audio[i] for i in word_rows],
            [prompts[i] for i in word_rows],
            [[t for s in results[i].segments for t in s.tokens] for i in word_rows],  # type: ignore[union-attr]
        )
        for i, window_words in zip(word_rows, words, strict=True):
            result = results[i]
            assert result is not None
            results[i] = WindowResult(
                result.text,
                _place_words(result.segments, window_words),
                result.avg_logprob,
                result.compression_ratio,
                result.no_speech_prob,
                result.temperature,
                result.temperatures,
                result.language,
            )
    return [r for r in results if r is not None]
