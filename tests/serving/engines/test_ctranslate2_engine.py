"""The CTranslate2 engine on the CPU with the bundled tiny.en, through the decoding layer (no Triton)."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import speech_samples

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.decoding import DecodingPolicy, decode_windows, window_texts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not speech_samples.speech_tools_available(), reason="needs espeak-ng and sox"),
]

SENTENCE = "We deploy the speech model on a cluster of graphics cards."


_wer = speech_samples.wer


def test_mixed_prompts_penalties_and_silence_in_one_batch(tmp_path):
    # GIVEN one batch whose windows need different decode groups (prompt length, penalty)
    path = speech_samples.speak(SENTENCE, tmp_path / "s.wav")
    speech, rate = sf.read(path, dtype="float32")
    assert rate == 16000
    engine = load_engine(EngineParams(cpu_threads=2))
    results = decode_windows(
        engine,
        [speech, speech, np.zeros(32000, np.float32), speech],
        [DecodePrompt(), DecodePrompt("Graphics cards and speech models."), DecodePrompt(), DecodePrompt()],
        [1.0, 1.0, 1.0, 1.3],
        [DecodeOptions()] * 4,
        DecodingPolicy(),
    )
    texts = [r.text for r in results]
    # THEN every speech window is transcribed in place, the prompt is not echoed, silence is ""
    assert len(texts) == 4 and texts[2] == ""
    for i in (0, 1, 3):
        assert _wer(SENTENCE, texts[i]) <= 0.3, (i, texts[i])
    assert not texts[1].lower().startswith("graphics cards and speech models")


def test_a_forced_prefix_is_continued_not_repeated(tmp_path):
    # GIVEN a clip whose first words are forced as the decoder prefix (openai/whisper DecodingOptions.prefix)
    path = speech_samples.speak(SENTENCE, tmp_path / "s.wav")
    speech, _ = sf.read(path, dtype="float32")
    engine = load_engine(EngineParams(cpu_threads=2))
    prompts = [DecodePrompt(), DecodePrompt(prefix="We deploy the speech model")]
    plain, continued = window_texts(engine, [speech, speech], DecodingPolicy(), prompts)
    # THEN the decode returns only the continuation: the rest of the sentence, without the prefix
    assert _wer(SENTENCE, plain) <= 0.2, plain
    assert _wer("on a cluster of graphics cards.", continued) <= 0.2, continued
    assert not continued.lower().startswith("we deploy"), continued


def test_length_mismatch_is_rejected():
    engine = load_engine(EngineParams(cpu_threads=1))
    with pytest.raises(ValueError, match="same length"):
        decode_windows(engine, [np.zeros(10, np.float32)], [], [1.0], [DecodeOptions()], DecodingPolicy())


DENSE_TEXT = (
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty the quick brown fox jumps over the lazy dog while a small bird sings "
    "in the tall green tree by the river we deploy speech models on clusters of graphics cards and measure "
    "latency throughput and word error rate every day please call Stella and ask her to bring these things "
    "with her from the store six spoons of fresh snow peas five thick slabs of blue cheese"
)


def test_dense_window_is_not_cut_short(tmp_path):
    # GIVEN one window of fast, dense speech (88 words in about 22 s: well over 114 tokens)
    path = speech_samples.speak(DENSE_TEXT, tmp_path / "dense.wav", words_per_minute=210)
    speech, _ = sf.read(path, dtype="float32")
    assert len(speech) <= 30 * 16000
    # WHEN it is decoded with the default 224 new tokens per window
    params = EngineParams(beam_size=1, cpu_threads=2)
    text = window_texts(load_engine(params), [speech], DecodingPolicy.from_params(params))[0]
    # THEN the transcript reaches the end of the speech (CTranslate2 decodes at most max_length / 2
    # new tokens: with max_length = prompt + 224 it stopped after about 46 of the 88 words)
    assert "cheese" in text.lower(), text
