"""Temperature-fallback sampling follows ``EngineParams.sampling_seed`` (CTranslate2 on the CPU, bundled tiny.en).

CTranslate2 seeds each worker thread's generator once, at its first sample, so the engine sets
the seed when it loads: a freshly loaded engine given the same calls in the same order samples
the same (whisper_build/serving/engines/params.py, ``sampling_seed``).
"""

from __future__ import annotations

import numpy as np
import pytest
import speech_samples as samples

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines import EngineParams, WhisperEngine, load_engine
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.decoding import DecodingPolicy, decode_windows

pytestmark = pytest.mark.slow

NOISE = (np.random.default_rng(1).standard_normal(8 * 16_000) * 0.05).astype(np.float32)
"""8 s of noise: at temperature 1 every sample differs with the random stream."""
TONE = samples.tone(10.0, 16_000)
"""10 s of 440 Hz: its beam-search decode fails the thresholds, so it goes through the fallback."""


def _engine(seed: int) -> tuple[WhisperEngine, DecodingPolicy]:
    # two samples at t > 0 and a 48-token limit keep the whole fallback sequence to seconds on the CPU
    params = EngineParams(cpu_threads=2, best_of=2, max_new_tokens=48, sampling_seed=seed)
    return load_engine(params), DecodingPolicy.from_params(params)


def _noise_samples(engine: WhisperEngine) -> list[tuple[int, ...]]:
    """Two calls' samples of the noise at temperature 1."""
    return [
        tuple(engine.generate([NOISE], [DecodePrompt()], [1.0], timestamps=False, temperature=1.0)[0].tokens)
        for _ in range(2)
    ]


def _tone(engine: WhisperEngine, policy: DecodingPolicy) -> WindowResult:
    return decode_windows(engine, [TONE], [DecodePrompt()], [1.0], [DecodeOptions(timestamps=True)], policy)[0]


def test_the_same_seed_samples_the_same_and_another_seed_does_not() -> None:
    # GIVEN two engines loaded with the default seed and one with another seed, given the same calls
    first, again, other = _engine(0), _engine(0), _engine(1)
    tones = [_tone(*first), _tone(*again)]
    noise = [_noise_samples(first[0]), _noise_samples(again[0]), _noise_samples(other[0])]
    # THEN the tone, decoded through the whole fallback (its beam-search decode fails the thresholds),
    # gives the same result from both: text, the temperature that won, its signals
    assert tones[0].temperatures[-1] == 1.0, tones[0]
    assert tones[0] == tones[1]
    # ... and it is empty or a failed attempt (avg_logprob under -1), not a sample that passed
    assert tones[0].text == "" or (tones[0].avg_logprob or 0.0) < -1.0, tones[0]
    # ... the same seed samples the noise the same, call for call; a call continues the stream
    # (CTranslate2 has no per-call seed), and another seed samples otherwise
    assert noise[0] == noise[1] and noise[0][0] != noise[0][1]
    assert noise[2] != noise[0]
