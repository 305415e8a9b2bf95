"""Segments of one window's decode: parsed from timestamp tokens, trimmed, cut words dropped, words placed.

The per-window steps of the decoding layer (:mod:`whisper_build.serving.triton_model.decoding`, whose
docstring says what each reproduces of openai/whisper and why); times are seconds from the window's
start. docs/serving.md ("Decoding layer").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from whisper_build.serving.engines.base import WordTiming
from whisper_build.serving.engines.features import SAMPLE_RATE
from whisper_build.serving.results import SegmentResult, WordResult
from whisper_build.serving.silence import TIMESTAMP_FRAME, frame_dbfs

__all__ = [
    "SECONDS_PER_TIMESTAMP",
    "decoded_words",
    "drop_last_word",
    "ends_in_speech",
    "parse_segments",
    "place_words",
    "trim_leading_silence",
]

SECONDS_PER_TIMESTAMP = 0.02
"""Time step of Whisper's timestamp tokens (``<|0.00|>`` … ``<|30.00|>``), openai/whisper ``tokenizer.py``."""


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


def place_words(segments: list[SegmentResult], words: list[WordTiming]) -> list[SegmentResult]:
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


def decoded_words(
    segments: list[SegmentResult], text_tokens: Sequence[int], words: Sequence[WordTiming], offset: float = 0.0
) -> list[WordTiming]:
    """The words an engine aligned over ``text_tokens`` that the ``segments`` kept, shifted by ``offset`` s.

    The segments' tokens are a subsequence of the decode's text tokens (:func:`parse_segments` drops
    segments whose text is blank); each word keeps the count of its tokens still there, and a word
    with none left goes, so :func:`place_words` gives each segment its own words.
    """
    kept = [t for s in segments for t in s.tokens]
    present: list[bool] = []
    k = 0
    for token in text_tokens:
        hit = k < len(kept) and kept[k] == token
        present.append(hit)
        k += hit
    out: list[WordTiming] = []
    first = 0
    for word in words:
        count = sum(present[first : first + word.tokens])
        first += word.tokens
        if count:
            out.append(WordTiming(word.word, word.start + offset, word.end + offset, word.probability, count))
    return out
