"""Unit tests of the Triton model's decoding layer (fallback, signals, segments, words) on a fake engine."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_engine import Decoded, ScriptedEngine

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import EngineCapabilities
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import SegmentResult
from whisper_build.serving.triton_model.decoding import (
    DecodingPolicy,
    UnsupportedOption,
    compression_ratio,
    decode_windows,
    drop_last_word,
    ends_in_speech,
    parse_segments,
)

SPEECH = np.concatenate([np.full(16000 * 9, 0.1, np.float32), np.zeros(16000, np.float32)])
"""10 s: 9 s loud enough to be decoded, then 1 s of silence (so no word is cut by the window's end)."""
LOOP = [" the"] * 60


def _decode(engine: ScriptedEngine, windows: list[np.ndarray], options: DecodeOptions | None = None):  # noqa: ANN202
    n = len(windows)
    return decode_windows(
        engine, windows, [DecodePrompt()] * n, [1.0] * n, [options or DecodeOptions()] * n, DecodingPolicy()
    )


def test_repetition_loop_is_re_decoded_at_a_higher_temperature_and_the_loop_disappears():
    marker = SPEECH.copy()
    marker[0] = 0.5  # the window that loops at t=0

    def script(window: np.ndarray, _prompt: DecodePrompt, temperature: float) -> Decoded:
        if window[0] == 0.5 and temperature == 0.0:
            return Decoded(LOOP, sum_logprob=-6.0)
        return Decoded([" Hello", " world."], sum_logprob=-0.9)

    engine = ScriptedEngine(script)
    looped, fine = _decode(engine, [marker, SPEECH])
    assert compression_ratio("".join(LOOP)) > 2.4
    assert looped.text == "Hello world." and looped.temperature == 0.2 and looped.temperatures == [0.0, 0.2]
    assert fine.temperatures == [0.0]
    # First call: both windows at t=0; the fallback re-decodes ONLY the failed window, at 0.2.
    assert [(c[0], c[4]) for c in engine.calls] == [(2, 0.0), (1, 0.2)]
    assert looped.avg_logprob == pytest.approx(-0.9 / 3)


def test_low_logprob_walks_the_whole_sequence_and_keeps_the_best_readable_attempt():
    scores = {0.0: -9.0, 0.2: -4.0, 0.4: -8.0, 0.6: -8.0, 0.8: -8.0, 1.0: -8.0}
    engine = ScriptedEngine(lambda _w, _p, t: Decoded([" mumble"], sum_logprob=scores[t]))
    [result] = _decode(engine, [SPEECH])
    assert result.temperatures == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert result.temperature == 0.2 and result.avg_logprob == pytest.approx(-2.0)


def test_request_temperature_starts_the_sequence():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded([" x"], sum_logprob=-10.0))
    [result] = _decode(engine, [SPEECH], DecodeOptions(temperature=0.6))
    assert result.temperatures == [0.6, 0.8, 1.0]


def test_fallback_off_decodes_a_failing_window_once_at_its_temperature():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded(LOOP, sum_logprob=-60.0))
    [result] = _decode(engine, [SPEECH], DecodeOptions(fallback=False))
    assert result.temperatures == [0.0] and len(engine.calls) == 1
    assert compression_ratio(result.text) > 2.4  # it failed the thresholds and was kept: no second pass


def test_silence_by_no_speech_probability_skips_fallback_and_segments():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded([" Thank", " you."], sum_logprob=-8.0, no_speech_prob=0.9))
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True))
    assert result.text == "" and result.segments == [] and result.temperatures == [0.0]
    assert result.no_speech_prob == 0.9


def test_quiet_windows_are_not_decoded():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded([" ghost"]))
    [result] = _decode(engine, [np.zeros(16000, np.float32)])
    assert engine.calls == [] and result.text == "" and result.avg_logprob is None


def test_an_engine_without_sampling_never_falls_back():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded(LOOP), capabilities=EngineCapabilities(True, False, False))
    [result] = _decode(engine, [SPEECH])
    assert result.temperatures == [0.0] and len(engine.calls) == 1


def test_unsupported_options_are_refused_before_decoding():
    engine = ScriptedEngine(lambda _w, _p, _t: Decoded([]), capabilities=EngineCapabilities(True, False, True))
    with pytest.raises(UnsupportedOption, match="word timestamps are not available with engine fake"):
        _decode(engine, [SPEECH], DecodeOptions(timestamps=True, word_timestamps=True))
    assert engine.calls == []


def _segments(engine: ScriptedEngine, pieces: list[str | float], duration: float = 10.0):  # noqa: ANN202
    tokens = [1001 + round(p / 0.02) if isinstance(p, float) else engine.token(p) for p in pieces]
    return [(s.start, s.end, s.text) for s in parse_segments(tokens, 1001, 1000, duration, engine.decode_text)]


def test_timestamp_pairs_make_segments_and_a_cut_off_tail_ends_at_the_window_end():
    engine = ScriptedEngine(lambda *_: Decoded([]))
    pieces = [0.0, " One.", 2.0, 2.5, " Two.", 4.0, 4.4, " Three"]
    assert _segments(engine, pieces) == [(0.0, 2.0, "One."), (2.5, 4.0, "Two."), (4.4, 10.0, "Three")]


def test_segments_are_monotonic_clamped_and_never_empty():
    engine = ScriptedEngine(lambda *_: Decoded([]))
    pieces = [0.0, " One.", 3.0, 2.0, " ", 2.5, 1.0, " Back.", 12.0, 29.0, " Late.", 30.0]
    assert _segments(engine, pieces, duration=8.0) == [(0.0, 3.0, "One."), (3.0, 8.0, "Back."), (8.0, 8.0, "Late.")]


def test_no_timestamps_is_one_segment_over_the_window():
    engine = ScriptedEngine(lambda *_: Decoded([]))
    assert _segments(engine, [" Hi."], duration=3.2) == [(0.0, 3.2, "Hi.")]


def test_an_engine_that_aligns_while_decoding_gives_the_words_of_its_decode_and_its_tail():
    def script(window: np.ndarray, *_: object) -> Decoded:  # the decode ends at 1 s; the tail after it has " c"
        return Decoded([0.0, " a", " b", 1.0] if len(window) == len(SPEECH) else [0.0, " c", 1.0])

    class AlignsInDecode(ScriptedEngine):
        late = 0
        decoding = False

        def generate(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.decoding = True
            try:
                return super().generate(*args, **kwargs)
            finally:
                self.decoding = False

        def align(self, audio, prompts, text_tokens):  # type: ignore[no-untyped-def]
            self.late += not self.decoding  # the decoding layer's own align call, after the decode
            return super().align(audio, prompts, text_tokens)

    engine = AlignsInDecode(script, capabilities=EngineCapabilities(True, True, True, aligns_in_decode=True))
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True, word_timestamps=True))
    words = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    assert words == [(" a", 0.0, 0.4), (" b", 0.5, 0.9), (" c", 1.0, 1.4)]  # the tail's, shifted by its 1 s start
    assert len(engine.calls) == 2 and engine.late == 0


def test_words_lie_inside_their_segments_in_order():
    def script(window: np.ndarray, *_: object) -> Decoded:  # the tail after 3.6 s decodes to nothing
        return Decoded([0.0, " a", " b", 1.0, 3.0, " c", " d", 3.6] if len(window) == len(SPEECH) else [])

    engine = ScriptedEngine(script)
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True, word_timestamps=True))
    assert [s.text for s in result.segments] == ["a b", "c d"]
    words = [(w.word, w.start, w.end) for s in result.segments for w in s.words]
    assert [w for w, _, _ in words] == [" a", " b", " c", " d"]
    for segment in result.segments:
        assert all(segment.start <= w.start <= w.end <= segment.end for w in segment.words)
    starts = [s for _, s, _ in words]
    assert starts == sorted(starts)


def test_speech_after_the_last_timestamp_is_decoded_again_and_appended():
    # GIVEN a decode that closes its last segment at 4 s and ends, with 5 s of speech after it
    def script(window: np.ndarray, *_: object) -> Decoded:
        if len(window) == len(SPEECH):
            return Decoded([0.0, " One.", 2.0, 2.0, " Two.", 4.0])
        return Decoded([0.0, " Three.", 3.5])  # the tail, from 4 s

    engine = ScriptedEngine(script)
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True))
    # THEN the tail's segments follow, offset by its start; the text holds all three
    assert [(s.text, s.start, s.end) for s in result.segments] == [
        ("One.", 0.0, 2.0), ("Two.", 2.0, 4.0), ("Three.", 4.0, 7.5)
    ]  # fmt: skip
    assert result.text == "One. Two. Three." and len(engine.calls) == 2
    # AND a window whose last segment ends where the speech ends is decoded once
    # (six words: 9 s is not far longer than its text, see test_early_end.py)
    engine = ScriptedEngine(lambda *_: Decoded([0.0, " All of it, said at length.", 9.0]))
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True))
    assert result.text == "All of it, said at length." and len(engine.calls) == 1
    # AND without timestamps nothing is decoded again
    engine = ScriptedEngine(lambda *_: Decoded([" Plain."]))
    assert _decode(engine, [SPEECH])[0].text == "Plain." and len(engine.calls) == 1


def test_result_json_has_the_signals():
    engine = ScriptedEngine(lambda *_: Decoded([0.0, " Hi.", 1.0], sum_logprob=-0.5, no_speech_prob=0.1))
    [result] = _decode(engine, [SPEECH], DecodeOptions(timestamps=True))
    data = json.loads(result.to_json())
    assert data["segments"][0]["start"] == 0.0 and data["segments"][0]["end"] == 1.0
    # 3 tokens (timestamps count, as in openai/whisper) + eot
    assert data["avg_logprob"] == -0.125 and data["no_speech_prob"] == 0.1 and data["temperature"] == 0.0


def test_a_segment_start_in_leading_silence_moves_to_the_first_voiced_frame():
    window = np.zeros(16000 * 12, np.float32)
    window[16000 * 10 : 16000 * 11] = 0.1  # 10 s of silence, 1 s of sound, 1 s of silence
    engine = ScriptedEngine(lambda *_: Decoded([0.0, " Late.", 11.5]))
    [result] = _decode(engine, [window], DecodeOptions(timestamps=True))
    assert [(s.start, s.end) for s in result.segments] == [(10.0, 11.5)]


def _cut(seconds_loud: float, tail: np.ndarray) -> np.ndarray:
    return np.concatenate([np.full(int(16000 * seconds_loud), 0.1, np.float32), tail.astype(np.float32)])


def test_ends_in_speech_tells_a_cut_from_a_pause_or_a_noise_floor():
    policy = DecodingPolicy()
    args = (policy.silence_dbfs, policy.cut_speech_db)
    assert ends_in_speech(_cut(2.0, np.zeros(0)), *args)  # cut while loud
    assert not ends_in_speech(_cut(2.0, np.zeros(1600)), *args)  # 100 ms pause at the end
    assert not ends_in_speech(_cut(2.0, np.full(1600, 0.002)), *args)  # noise floor 34 dB under
    assert ends_in_speech(_cut(2.0, np.full(1600, 0.02)), *args)  # 14 dB under: still speech
    assert not ends_in_speech(_cut(2.0, np.zeros(0)), policy.silence_dbfs, 0.0)  # rule off


def test_a_word_cut_by_the_window_end_is_dropped_never_guessed():
    """tiny.en completes a cut word with a guess ("Please turn off" cut 20 ms into "off" → "Please
    turn on."); the layer keeps only the words before it, with their punctuation gone with it."""
    engine = ScriptedEngine(lambda *_: Decoded([0.0, " Please", " turn", " on", ".", 1.0], sum_logprob=-1.0))
    [cut] = _decode(engine, [_cut(0.8, np.zeros(0))], DecodeOptions(timestamps=True))
    assert cut.text == "Please turn" and [s.text for s in cut.segments] == ["Please turn"]
    assert cut.segments[0].tokens == [engine.token(" Please"), engine.token(" turn")]
    [whole] = _decode(engine, [_cut(0.8, np.zeros(8000))], DecodeOptions(timestamps=True))
    assert whole.text == "Please turn on."
    # Without timestamps too; a one-word window that is cut becomes empty, not a guess.
    one = ScriptedEngine(lambda *_: Decoded([" Please"], sum_logprob=-0.5))
    [empty] = _decode(one, [_cut(0.5, np.zeros(0))])
    assert empty.text == "" and empty.segments == []


def test_drop_last_word_keeps_earlier_segments_and_cuts_unspaced_scripts_by_token():
    engine = ScriptedEngine(lambda *_: Decoded([]))
    a = SegmentResult(0.0, 1.0, "One.", [engine.token(" One.")])
    b = SegmentResult(1.0, 2.0, "二三", [engine.token("二"), engine.token("三")])
    assert [(s.text, s.tokens) for s in drop_last_word([a, b], engine.decode_text)] == [
        ("One.", a.tokens),
        ("二", [engine.token("二")]),
    ]
    assert drop_last_word([a], engine.decode_text) == []
    assert drop_last_word([], engine.decode_text) == []


def test_thresholds_are_declared_once_and_the_policy_takes_them_from_the_engine_params():
    from pydantic import ValidationError

    from whisper_build.serving.engines.params import DecodingThresholds, EngineParams

    shared = set(DecodingThresholds.model_fields)
    # declared in one class: the model config's parameters and the policy extend it, neither re-declares
    for cls in (EngineParams, DecodingPolicy):
        assert shared <= set(cls.model_fields) and not shared & set(cls.__annotations__), cls
    values = {
        "no_speech_threshold": 0.3, "no_speech_needs_low_logprob": True, "logprob_threshold": -0.5,
        "compression_ratio_threshold": 3.0, "temperature_increment": 0.5, "silence_dbfs": -40.0,
        "default_language": "de",
    }  # fmt: skip
    assert set(values) == shared
    policy = DecodingPolicy.from_params(EngineParams(**values))
    assert {name: getattr(policy, name) for name in shared} == values
    assert policy.cut_speech_db == DecodingPolicy().cut_speech_db
    # and the policy checks them as the parameters do
    with pytest.raises(ValidationError, match="no_speech_threshold"):
        DecodingPolicy(no_speech_threshold=2.0)
