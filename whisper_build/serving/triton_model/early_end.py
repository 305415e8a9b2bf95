"""Final segments that end early: a closing timestamp that jumps over speech, found by word timings.

tiny.en may end a window's decode with one segment far longer than its text (``<|0.00|> Perfect, let us
meet again on Thursday to check the progress. <|25.80|>``: 11 words, 25.8 s, their speech over by 4.1 s;
benchmarks/long_form.py), so the tail rule (``decoding._tails``) sees no speech after 25.8 s. A final
segment that outlasts its words (:func:`is_slow`) is checked against their timings; when its last word
ends :data:`EARLY_END_GAP` s or more before the segment does, the segment ends with that word, as
openai/whisper ``timing.py`` ``add_word_timestamps`` ends a segment at its last word, and the tail rule
then decodes the rest, as openai/whisper ``transcribe()`` resumes at the last word's end. Docs:
docs/serving.md, "Long recordings".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import WhisperEngine, WordTiming
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import SegmentResult
from whisper_build.serving.triton_model.segments import place_words

__all__ = ["EARLY_END_GAP", "MAX_SECONDS_PER_WORD", "close_early_ends", "is_slow"]

MAX_SECONDS_PER_WORD = 1.4
"""Seconds each word of a segment may take before the rest counts as unexplained (:func:`is_slow`):
openai/whisper ``timing.py`` caps a word at a sentence boundary at twice the median word duration, the
median capped at 0.7 s (speech runs at about 0.4 s per word; on benchmarks/long_form.py's recordings every
other segment stays 2.4 s or more under the :data:`EARLY_END_GAP` this leaves)."""

EARLY_END_GAP = 2.0
"""Seconds from the last word's end to the segment's end that make an early end: openai/whisper
``word_anomaly_score`` counts a word longer than 2.0 s as anomalous."""


def is_slow(segment: SegmentResult) -> bool:
    """Whether ``segment`` outlasts its words (:data:`MAX_SECONDS_PER_WORD` each) by :data:`EARLY_END_GAP` s or more."""
    words = max(1, len(segment.text.split()))
    return segment.end - segment.start - MAX_SECONDS_PER_WORD * words >= EARLY_END_GAP


def _last_word_end(segments: list[SegmentResult], words: list[WordTiming]) -> float | None:
    """End of the last word placed in the last segment (:func:`place_words`); ``None`` when it has none."""
    placed = place_words(segments, words)[-1].words
    return placed[-1].end if placed else None


def close_early_ends(
    engine: WhisperEngine,
    audio: Sequence[np.ndarray],
    prompts: Sequence[DecodePrompt],
    options: Sequence[DecodeOptions],
    found: dict[int, list[SegmentResult]],
    aligned: dict[int, list[WordTiming]],
) -> dict[int, list[SegmentResult]]:
    """The rows whose final segment ended early, with that segment ending at its last word.

    Args:
        engine: the loaded engine; an engine without alignment (``capabilities.word_timestamps``
            false: ``tensorrt_llm``) is left as it is, except for rows that carry words.
        audio: the windows (1-D float32, 16 kHz), as decoded.
        prompts: their prompts.
        options: their options; only rows with timestamps are checked.
        found: per decoded row, its segments (window-relative seconds).
        aligned: words of rows aligned while decoding (:attr:`Hypothesis.words`), used as they are.

    Returns: per corrected row, all its segments, the last one ending at its last word's end.
    Rows with a slow final segment and no words are aligned with ONE :meth:`WhisperEngine.align`
    call over their segments' text tokens.
    """
    slow = [i for i, segments in found.items() if segments and options[i].timed and is_slow(segments[-1])]
    words = {i: aligned[i] for i in slow if i in aligned}
    late = [i for i in slow if i not in aligned] if engine.capabilities.word_timestamps else []
    if late:
        tokens = [[t for s in found[i] for t in s.tokens] for i in late]
        timings = engine.align([audio[i] for i in late], [prompts[i] for i in late], tokens)
        words |= dict(zip(late, timings, strict=True))
    closed: dict[int, list[SegmentResult]] = {}
    for i, row_words in words.items():
        last = found[i][-1]
        end = _last_word_end(found[i], row_words)
        if end is not None and last.start < end <= last.end - EARLY_END_GAP:
            closed[i] = [*found[i][:-1], replace(last, end=end)]
    return closed
