"""A final segment far longer than its text ends at its last word, and the speech after it is decoded.

Fake engine, and one window of tiny.en (CTranslate2) on the committed Festival dialogues.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fake_engine import Decoded, ScriptedEngine

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.base import EngineCapabilities, WordTiming
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import SegmentResult
from whisper_build.serving.triton_model.decoding import DecodingPolicy, decode_windows
from whisper_build.serving.triton_model.early_end import is_slow

SPEECH = np.concatenate([np.full(16000 * 9, 0.1, np.float32), np.zeros(16000, np.float32)])
"""10 s: 9 s loud, then 1 s of silence (no word cut by the window's end)."""


class Aligning(ScriptedEngine):
    """The fake engine, counting the decoding layer's own :meth:`align` calls and their rows."""

    align_calls: list[int]
    decoding = False

    def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.decoding = True
        try:
            return super().generate(*args, **kwargs)
        finally:
            self.decoding = False

    def align(
        self, audio: Sequence[np.ndarray], prompts: Sequence[DecodePrompt], text_tokens: Sequence[Sequence[int]]
    ) -> list[list[WordTiming]]:
        if not self.decoding:
            self.align_calls = [*getattr(self, "align_calls", []), len(audio)]
        return super().align(audio, prompts, text_tokens)  # one word per token, 0.5 s each from 0


def _early_then_tail(window: np.ndarray, *_: object) -> Decoded:
    """The 10 s window: two words closed at 9 s (their speech is over at 0.9 s); its tail: two more words."""
    return Decoded([0.0, " a", " b", 9.0] if len(window) == len(SPEECH) else [0.0, " c", " d", 0.9])


def _decode(engine: ScriptedEngine, windows: list[np.ndarray], options: DecodeOptions):  # noqa: ANN202
    n = len(windows)
    return decode_windows(engine, windows, [DecodePrompt()] * n, [1.0] * n, [options] * n, DecodingPolicy())


def test_slow_means_2_s_left_over_after_1_4_s_per_word():
    text = "Perfect, let us meet again on Thursday to check the progress."  # 11 words: 15.4 s at most
    assert is_slow(SegmentResult(0.0, 25.8, text, [])) and not is_slow(SegmentResult(0.0, 17.3, text, []))
    assert is_slow(SegmentResult(1.0, 4.4, "Yes.", [])) and not is_slow(SegmentResult(2.0, 4.0, "Two.", []))


def test_a_final_segment_far_longer_than_its_words_ends_at_its_last_word_and_the_rest_is_decoded():
    # GIVEN a decode "<|0.00|> a b <|9.00|>" whose words the engine aligns to 0-0.4 s and 0.5-0.9 s
    engine = Aligning(_early_then_tail)
    [result] = _decode(engine, [SPEECH], DecodeOptions.transcript())
    # THEN the segment ends at 0.9 s and the speech after it is decoded as a tail, from 0.9 s
    assert [(s.text, s.start, s.end) for s in result.segments] == [("a b", 0.0, 0.9), ("c d", 0.9, 1.8)]
    assert result.text == "a b c d"
    # AND the layer aligned that one row once, then decoded the tail once
    assert engine.align_calls == [1] and [c[0] for c in engine.calls] == [1, 1]


def test_a_segment_that_fits_its_words_is_not_aligned_nor_decoded_again():
    engine = Aligning(lambda *_: Decoded([0.0, *[f" w{k}" for k in range(8)], 9.0]))  # 8 words in 9 s
    [result] = _decode(engine, [SPEECH], DecodeOptions.transcript())
    assert result.segments[0].end == 9.0 and not hasattr(engine, "align_calls") and len(engine.calls) == 1


def test_a_slow_segment_whose_words_reach_its_end_is_kept():
    class Spread(Aligning):  # the words fill the segment: 0-4 s and 4-8.5 s
        def align(self, audio, prompts, text_tokens):  # type: ignore[no-untyped-def]
            super().align(audio, prompts, text_tokens)
            return [[WordTiming(" a", 0.0, 4.0, 0.9, 1), WordTiming(" b", 4.0, 8.5, 0.9, 1)] for _ in audio]

    engine = Spread(_early_then_tail)
    [result] = _decode(engine, [SPEECH], DecodeOptions.transcript())
    # a gap under 2 s (8.5 → 9.0) is no early end: the segment stays, nothing voiced follows it
    assert [(s.text, s.end) for s in result.segments] == [("a b", 9.0)] and engine.align_calls == [1]
    assert len(engine.calls) == 1


def test_slow_rows_are_aligned_in_one_call_and_their_tails_decoded_with_the_other_tails():
    # GIVEN three windows: two early ends, one plain early timestamp ("<|0.00|> a b <|1.00|>", 8 s voiced after)
    plain = SPEECH.copy()
    plain[1] = 0.2

    def script(window: np.ndarray, *rest: object) -> Decoded:
        if len(window) == len(SPEECH) and window[1] == np.float32(0.2):
            return Decoded([0.0, " a", " b", 1.0])
        return _early_then_tail(window, *rest)

    engine = Aligning(script)
    results = _decode(engine, [SPEECH, plain, SPEECH], DecodeOptions.transcript())
    assert [r.text for r in results] == ["a b c d"] * 3
    # THEN one align call with both slow rows, and one tail call with all three tails
    assert engine.align_calls == [2] and [c[0] for c in engine.calls] == [3, 3]


def test_words_from_the_decode_are_used_without_an_align_call():
    caps = EngineCapabilities(True, True, True, aligns_in_decode=True)
    engine = Aligning(_early_then_tail, capabilities=caps)
    [result] = _decode(engine, [SPEECH], DecodeOptions.transcript(word_timestamps=True))
    assert [(s.text, s.end) for s in result.segments] == [("a b", 0.9), ("c d", 1.8)]
    words = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    assert words == [(" a", 0.0, 0.4), (" b", 0.5, 0.9), (" c", 0.9, 1.3), (" d", 1.4, 1.8)]
    assert not hasattr(engine, "align_calls")


def test_an_engine_without_alignment_keeps_the_segment_as_decoded():
    engine = Aligning(_early_then_tail, capabilities=EngineCapabilities(True, False, True))  # tensorrt_llm
    [result] = _decode(engine, [SPEECH], DecodeOptions.transcript())
    assert [(s.text, s.end) for s in result.segments] == [("a b", 9.0)] and len(engine.calls) == 1
    assert not hasattr(engine, "align_calls")


SPEAKERS = Path(__file__).parents[2] / "data" / "speakers"


@pytest.mark.slow
def test_tiny_en_decodes_the_speech_its_closing_timestamp_jumped_over():
    """The second window of benchmarks/long_form.py's Festival dialogues (28.47-54.36 s): tiny.en decodes
    "<|0.00|> Perfect, let us meet again on Thursday to check the progress. <|25.80|>" and ends; its
    words end at 4.1 s, and the 20 s of speech after them hold six more sentences."""
    first, _ = sf.read(SPEAKERS / "male_female.flac", dtype="float32")
    second, _ = sf.read(SPEAKERS / "male_male.flac", dtype="float32")
    window = np.concatenate([first, np.zeros(16000, np.float32), second])[455480:869680]
    engine = load_engine(EngineParams(engine="ctranslate2", cpu_threads=2))
    [result] = _decode(engine, [window], DecodeOptions.transcript())
    first_segment = result.segments[0]
    assert first_segment.text.startswith("Perfect") and 3.5 < first_segment.end < 5.0, result.segments
    text = result.text.lower()
    assert all(phrase in text for phrase in ("good morning", "hardware order", "next spring")), text
