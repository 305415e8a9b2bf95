"""The three silence rules (``whisper_build/serving/silence.py``) keep their verdicts on a fixed corpus.

The corpus is tones, noise at levels either side of every threshold, digital silence, a 200 ms
blip in near-silence and a 10 ms click at the very end, cut into windows by the gateway's
windowing. ``EXPECTED`` was recorded with the rules as they stood before silence moved into one
module (the gateway's 25 ms frames vs ``1e-3`` RMS, the engines' whole-window level vs -55 dBFS,
the decoding rules' 20 ms frames); a change of any rule's frame, unit or threshold changes a row.
The transcripts through real Triton are checked by test_transcripts_integration.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from whisper_build.serving import silence
from whisper_build.serving.audio import is_silent, iter_windows
from whisper_build.serving.engines import features
from whisper_build.serving.results import SegmentResult
from whisper_build.serving.triton_model.decoding import DecodingPolicy, ends_in_speech, trim_leading_silence

RATE = 16000

EXPECTED = [
    # window start, end (samples); gateway drops; engine skips; ends in speech; first voiced second
    (0, 407320, False, False, False, 0.0),
    (407320, 810800, True, True, False, 0.0),
    (810800, 1272040, True, True, False, 0.0),
    (1272040, 1714880, False, True, False, 0.0),
    (1714880, 2121720, False, True, False, 0.0),
    (2121720, 2552240, False, False, True, 8.38),
    (2552240, 3030440, False, True, False, 0.0),
    (3030440, 3465920, False, False, False, 23.58),
    (3465920, 3944120, False, False, True, 13.58),
    (3944120, 4131360, False, False, True, 0.0),
]


def corpus() -> np.ndarray:
    """258 s of test signal, the same on every run (seeded noise)."""
    rng = np.random.default_rng(21)

    def tone(seconds: float, amplitude: float) -> np.ndarray:
        return (amplitude * np.sin(2 * np.pi * 440.0 * np.arange(int(seconds * RATE)) / RATE)).astype(np.float32)

    def noise(seconds: float, dbfs: float) -> np.ndarray:
        return (rng.standard_normal(int(seconds * RATE)) * 10 ** (dbfs / 20)).astype(np.float32)

    def zeros(seconds: float) -> np.ndarray:
        return np.zeros(int(seconds * RATE), np.float32)

    parts = [
        tone(20, 0.3), zeros(1), noise(30, -80), noise(30, -62), noise(30, -58), noise(30, -56),
        noise(30, -53), zeros(30), noise(12, -61), tone(0.2, 0.05), noise(17, -61), tone(25, 0.02),
        noise(3, -70), tone(0.01, 0.5),
    ]  # fmt: skip
    return np.concatenate(parts)


def test_each_rule_keeps_its_verdict_on_the_corpus() -> None:
    x = corpus()
    policy = DecodingPolicy()
    rows = []
    for window, samples in iter_windows([x[i : i + 40000] for i in range(0, len(x), 40000)], 30.0, 5.0):
        [segment] = trim_leading_silence(
            [SegmentResult(0.0, len(samples) / RATE, "x", [])], samples, policy.silence_dbfs
        )
        rows.append((
            window.start, window.end,
            is_silent(samples),
            features.is_silent(samples, policy.silence_dbfs),
            ends_in_speech(samples, policy.silence_dbfs, policy.cut_speech_db),
            segment.start,
        ))  # fmt: skip
    assert rows == EXPECTED


def test_the_thresholds_are_the_modules_and_keep_their_values() -> None:
    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.gateway.settings import GatewaySettings

    assert silence.GATEWAY_SILENCE_RMS == 1e-3 and silence.level_dbfs(silence.GATEWAY_SILENCE_RMS) == pytest.approx(-60)
    assert GatewaySettings().requests.silence_rms == silence.GATEWAY_SILENCE_RMS
    assert EngineParams().silence_dbfs == DecodingPolicy().silence_dbfs == silence.SILENCE_DBFS == -55.0
    assert (silence.CUT_FRAME, silence.CUT_HOP, silence.TIMESTAMP_FRAME) == (400, 160, 320)  # 25 ms, 10 ms, 20 ms
