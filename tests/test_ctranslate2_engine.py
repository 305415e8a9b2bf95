"""The CTranslate2 engine on the CPU with the bundled tiny.en, called directly (no Triton)."""

from __future__ import annotations

import jiwer
import numpy as np
import pytest
import soundfile as sf
import speech_samples

from whisper_build.engines import EngineParams, load_engine
from whisper_build.prompt import DecodePrompt

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not speech_samples.speech_tools_available(), reason="needs espeak-ng and sox"),
]

SENTENCE = "We deploy the speech model on a cluster of graphics cards."


def _wer(reference: str, hypothesis: str) -> float:
    normalize = jiwer.Compose(
        [jiwer.ToLowerCase(), jiwer.RemovePunctuation(), jiwer.Strip(), jiwer.ReduceToListOfListOfWords()]
    )
    return jiwer.wer(reference, hypothesis, reference_transform=normalize, hypothesis_transform=normalize)


def test_mixed_prompts_penalties_and_silence_in_one_batch(tmp_path):
    # GIVEN one batch whose windows need different decode groups (prompt length, penalty)
    path = speech_samples.speak(SENTENCE, tmp_path / "s.wav")
    speech, rate = sf.read(path, dtype="float32")
    assert rate == 16000
    engine = load_engine(EngineParams(cpu_threads=2))
    texts = engine.transcribe_batch(
        [speech, speech, np.zeros(32000, np.float32), speech],
        [DecodePrompt(), DecodePrompt("Graphics cards and speech models."), DecodePrompt(), DecodePrompt()],
        [1.0, 1.0, 1.0, 1.3],
    )
    # THEN every speech window is transcribed in place, the prompt is not echoed, silence is ""
    assert len(texts) == 4 and texts[2] == ""
    for i in (0, 1, 3):
        assert _wer(SENTENCE, texts[i]) <= 0.3, (i, texts[i])
    assert not texts[1].lower().startswith("graphics cards and speech models")


def test_length_mismatch_is_rejected():
    engine = load_engine(EngineParams(cpu_threads=1))
    with pytest.raises(ValueError, match="same length"):
        engine.transcribe_batch([np.zeros(10, np.float32)], [], [1.0])
