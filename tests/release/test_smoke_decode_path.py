"""The engine-build smoke test decodes through the served path (``decode_windows``), not a side path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from fake_engine import Decoded, ScriptedEngine

from whisper_build.release.engine_build import smoke
from whisper_build.serving.engines import EngineParams, factory

EXPECTED = "And so my fellow Americans"


class _PlainPathWorks(ScriptedEngine):
    """An engine whose old plain-text path still answers while its served ``generate`` fails."""

    def transcribe_batch(self, audio: Sequence[np.ndarray], *_: object) -> list[str]:
        return [EXPECTED] * len(audio)


def _clip(tmp_path: Path) -> Path:
    # 9 s loud enough to be decoded, then 1 s of silence (no word cut by the window's end)
    samples = np.concatenate([np.full(16000 * 9, 0.1, np.float32), np.zeros(16000, np.float32)])
    sf.write(tmp_path / "clip.wav", samples, 16000)
    return tmp_path / "clip.wav"


def _loaded(monkeypatch: pytest.MonkeyPatch, engine: ScriptedEngine) -> list[EngineParams]:
    seen: list[EngineParams] = []
    monkeypatch.setattr(factory, "load_engine", lambda params: seen.append(params) or engine)
    return seen


def test_an_engine_failing_the_served_generate_fails_the_smoke_test(monkeypatch, tmp_path):
    # GIVEN an engine whose generate(..., scores) breaks in the runtime, as a bad TensorRT-LLM build would
    engine = _PlainPathWorks(lambda *_: Decoded([" And", " so"]), fail=RuntimeError("output_cum_log_probs missing"))
    _loaded(monkeypatch, engine)
    # WHEN the smoke test transcribes its clip THEN the failure surfaces (no plain path hides it)
    with pytest.raises(RuntimeError, match="output_cum_log_probs"):
        smoke.transcribe_clip(EngineParams(engine="tensorrt_llm", model_path=str(tmp_path)), _clip(tmp_path))
    assert engine.calls, "the smoke test must call generate"


def test_the_smoke_transcript_is_the_served_text_under_the_engine_thresholds(monkeypatch, tmp_path):
    # GIVEN an engine that decodes the clip, but with a no-speech probability of 0.7
    words = [" And", " so", " my", " fellow", " Americans"]
    engine = ScriptedEngine(lambda *_: Decoded(words, sum_logprob=-0.5, no_speech_prob=0.7))
    seen = _loaded(monkeypatch, engine)
    lenient = EngineParams(engine="tensorrt_llm", model_path=str(tmp_path), no_speech_threshold=0.8)
    # WHEN the smoke test runs with a threshold above it THEN it gets the text and judges it
    transcript = smoke.transcribe_clip(lenient, _clip(tmp_path))
    assert seen == [lenient]
    assert smoke.judge(transcript, EXPECTED).wer == 0.0
    # AND with the default threshold (0.6) the same decode is silence, as in the pod: the verdict fails
    strict = lenient.model_copy(update={"no_speech_threshold": 0.6})
    with pytest.raises(smoke.SmokeTestError):
        smoke.judge(smoke.transcribe_clip(strict, _clip(tmp_path)), EXPECTED)
