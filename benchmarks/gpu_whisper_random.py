"""GPU throughput of a Whisper large-v3-turbo-SIZED model with RANDOM weights vs batch size.

The compute cost of large-v3-turbo's shapes on one GPU with transformers (or ``--runtime
ctranslate2``): encoder over 30 s windows plus a FIXED number of greedy tokens per window. NOT a
transcription benchmark (random weights), NOT the TensorRT-LLM engine, NOT through Triton.
RTFx = (batch × 30 s) ÷ wall time of the batch. Entry points: :func:`main` (usage, shapes and the
CTranslate2 wheel's cuBLAS note in its docstring), :func:`random_model_dir`.
Docs: docs/benchmarks.md, "GPU figures (NVIDIA H200)".
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

WINDOW_SECONDS = 30.0
"""Whisper input length (openai/whisper audio.py ``CHUNK_LENGTH``); 3000 mel frames at hop 160."""
MEL_FRAMES = 3000

# openai/whisper-large-v3-turbo config.json (Hugging Face Hub); "tiny" only exercises the code.
MODEL_SHAPES: dict[str, dict[str, int]] = {
    "large-v3-turbo": dict(
        d_model=1280, encoder_layers=32, decoder_layers=4, encoder_attention_heads=20,
        decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120,
        num_mel_bins=128, vocab_size=51866, max_source_positions=1500, max_target_positions=448,
    ),
    "tiny": dict(
        d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128,
        num_mel_bins=128, vocab_size=51866, max_source_positions=1500, max_target_positions=448,
    ),
}  # fmt: skip
# <|startoftranscript|><|en|><|transcribe|><|notimestamps|> in the multilingual v3 vocabulary.
PROMPT_IDS = (50258, 50259, 50360, 50364)
EOT_ID = 50257


def random_model_dir(tokenizer_dir: Path, out: Path, shape: str = "large-v3-turbo") -> Path:
    """A folder with a ``config.json`` of ``shape`` and a tokenizer, for the engine's random mode.

    The tokenizer (tiny.en's in the served runs, Systran faster-whisper-base's in the engine runs) only builds the prompt and turns ids into text;
    with random weights and a fixed decode length neither matters to the compute timed. The
    vocabulary is that tokenizer's (tiny.en 51864, English-only; base 51865, multilingual) instead of
    large-v3-turbo's 51866, so the engine, the rendered ``config.pbtxt`` and the prompt agree on
    whether the model is multilingual (the model's load check refuses a contradiction); 1-2 of
    51866 output-projection rows, a negligible part of the compute.
    """
    from whisper_build.serving.engines.tokens import vocabulary_size  # this script also runs without the package

    out.mkdir(parents=True, exist_ok=True)
    tokenizer = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    eot, sot = added["<|endoftext|>"], added["<|startoftranscript|>"]
    vocab_size = vocabulary_size(lambda token: added.get(token))
    config = {
        "model_type": "whisper", **MODEL_SHAPES[shape], "vocab_size": vocab_size, "decoder_start_token_id": sot,
        "eos_token_id": eot, "pad_token_id": eot, "bos_token_id": eot, "torch_dtype": "float16",
    }  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2))
    (out / "tokenizer.json").write_text(json.dumps(tokenizer))
    return out


def build_model(name: str, device: str, dtype_name: str):
    """A ``WhisperForConditionalGeneration`` of shape ``name`` with random weights, in eval mode."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        **MODEL_SHAPES[name], decoder_start_token_id=PROMPT_IDS[0], eos_token_id=EOT_ID,
        pad_token_id=EOT_ID, bos_token_id=EOT_ID, attn_implementation="sdpa",
    )  # fmt: skip
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    with torch.device(device):
        model = WhisperForConditionalGeneration(config)
    return model.to(dtype).eval()


def time_batch(model, batch: int, new_tokens: int, device: str, repeats: int) -> dict[str, float]:
    """Median wall times (s) of the encoder alone and of encoder + ``new_tokens`` greedy steps."""
    import torch
    from transformers.generation.utils import GenerationMixin

    dtype = next(model.parameters()).dtype
    features = torch.randn(batch, model.config.num_mel_bins, MEL_FRAMES, device=device, dtype=dtype)
    prompt = torch.tensor([PROMPT_IDS] * batch, device=device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def encode() -> None:
        model.model.encoder(features)

    def generate() -> int:
        # GenerationMixin.generate, not Whisper's long-form wrapper: random weights have no
        # alignment heads or language table, and the prompt is given explicitly.
        out = GenerationMixin.generate(
            model, input_features=features, decoder_input_ids=prompt,
            decoder_attention_mask=torch.ones_like(prompt), do_sample=False, num_beams=1,
            min_new_tokens=new_tokens, max_new_tokens=new_tokens, use_cache=True,
        )  # fmt: skip
        return out.shape[1] - prompt.shape[1]

    timings: dict[str, list[float]] = {"encoder_s": [], "total_s": []}
    generated = 0
    with torch.inference_mode():
        encode()
        generated = generate()  # warm-up (kernels, allocator)
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            encode()
            sync()
            timings["encoder_s"].append(time.perf_counter() - start)
            start = time.perf_counter()
            generated = generate()
            sync()
            timings["total_s"].append(time.perf_counter() - start)
    if generated != new_tokens:
        raise RuntimeError(f"generated {generated} tokens, expected {new_tokens}")
    return {k: statistics.median(v) for k, v in timings.items()}


def whisper_v3_vocabulary(size: int) -> list[str]:
    """Token strings with Whisper v3's special tokens at their ids; ordinary tokens get placeholder names.

    Ids (openai/whisper tokenizer.py): ``<|endoftext|>`` 50257, ``<|startoftranscript|>`` 50258,
    100 languages from 50259, ``<|translate|>`` … ``<|notimestamps|>`` 50359–50364, then 1501
    timestamps ``<|0.00|>`` … ``<|30.00|>``. CTranslate2 finds the special tokens by name, so a
    converted random model needs this vocabulary.
    """
    specials = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", *(f"<|l{i}|>" for i in range(1, 100)),
                "<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>",
                "<|notimestamps|>", *(f"<|{i * 0.02:.2f}|>" for i in range(1501))]  # fmt: skip
    vocabulary = [f"t{i}" for i in range(EOT_ID)] + specials
    if len(vocabulary) != size:
        raise ValueError(f"vocabulary has {len(vocabulary)} tokens, the model {size}")
    return vocabulary


def convert_to_ctranslate2(model, workdir: Path, device: str, compute_type: str):
    """Save the random HF model, convert it with CTranslate2's converter, load it on ``device``."""
    import ctranslate2
    from ctranslate2.converters import TransformersConverter

    model.save_pretrained(workdir / "hf")
    TransformersConverter(str(workdir / "hf")).convert(str(workdir / "ct2"), quantization=compute_type, force=True)
    vocabulary = whisper_v3_vocabulary(model.config.vocab_size)
    (workdir / "ct2" / "vocabulary.json").write_text(json.dumps(vocabulary))
    return ctranslate2.models.Whisper(str(workdir / "ct2"), device=device, compute_type=compute_type)


def time_batch_ct2(model, batch: int, new_tokens: int, n_mels: int, repeats: int) -> dict[str, float]:
    """Median wall times (s) of ``encode`` alone and of ``encode`` + greedy ``generate``.

    ``generate`` produces ``new_tokens`` tokens (end-of-text suppressed); ``generated_tokens`` = shortest
    output.
    """
    import ctranslate2
    import numpy as np

    features = ctranslate2.StorageView.from_array(
        np.random.default_rng(0).standard_normal((batch, n_mels, MEL_FRAMES), dtype=np.float32)
    )
    prompts = [list(PROMPT_IDS)] * batch

    # CTranslate2's Whisper decodes at most max_length / 2 new tokens (src/models/whisper.cc:
    # ``decoding_options.max_length = options.max_length / 2``, mirroring openai/whisper's
    # ``sample_len = n_text_ctx // 2``), so ask for twice the tokens wanted.
    max_length = 2 * new_tokens

    def run() -> int:
        encoded = model.encode(features, to_cpu=False)
        results = model.generate(
            encoded, prompts, beam_size=1, max_length=max_length,
            suppress_tokens=[-1, EOT_ID], suppress_blank=False,
        )  # fmt: skip
        return min(len(r.sequences_ids[0]) for r in results)

    timings: dict[str, list[float]] = {"encoder_s": [], "total_s": []}
    generated = run()  # warm-up
    for _ in range(repeats):
        start = time.perf_counter()
        model.encode(features, to_cpu=True)
        timings["encoder_s"].append(time.perf_counter() - start)
        start = time.perf_counter()
        generated = run()
        timings["total_s"].append(time.perf_counter() - start)
    out = {k: statistics.median(v) for k, v in timings.items()}
    out["generated_tokens"] = generated
    return out


def summarize_batch(batch: int, new_tokens: int, timing: dict[str, float]) -> dict[str, float]:
    """RTFx, windows/s and tokens/s for one batch size from its median timings.

    ``timing`` may carry ``generated_tokens``, the shortest output of the batch; else ``new_tokens`` is
    used.
    """
    audio_s = batch * WINDOW_SECONDS
    total = timing["total_s"]
    tokens = int(timing.get("generated_tokens", new_tokens))
    return {
        "batch": batch,
        "generated_tokens": tokens,
        "encoder_s": timing["encoder_s"],
        "total_s": total,
        "rtfx": audio_s / total,
        "windows_per_s": batch / total,
        "audio_s_per_s": audio_s / total,
        "tokens_per_s": batch * tokens / total,
    }


def plot_results(paths: list[Path], out: Path) -> Path:
    """Plot RTFx and windows/s vs batch size, one line per results JSON (``--out`` files of this script).

    Uses matplotlib's Agg backend; runs without a GPU.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (rtfx_ax, lat_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path in paths:
        data = json.loads(path.read_text())
        meta, rows = data["meta"], data["results"]
        label = f"{meta.get('runtime', 'transformers')} {meta['dtype']} ({meta['gpu']})"
        xs = [r["batch"] for r in rows]
        rtfx_ax.plot(xs, [r["rtfx"] for r in rows], "o-", label=label)
        lat_ax.plot(xs, [r["total_s"] for r in rows], "o-", label=label)
    for ax, ylabel in ((rtfx_ax, "RTFx (audio s / wall s)"), (lat_ax, "wall time per batch (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size (30 s windows, 100 tokens each)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Whisper large-v3-turbo SHAPES, RANDOM weights — compute cost only, not transcription")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _build(args: argparse.Namespace) -> tuple[Any, int, dict, float]:
    """The random-weight model of ``args`` (converted for ctranslate2), its mel bins, the run's metadata, its start."""
    import torch
    import transformers

    started = time.perf_counter()
    model = build_model(args.model, "cpu" if args.runtime == "ctranslate2" else args.device, args.dtype)
    params = sum(t.numel() for t in model.parameters())
    n_mels = model.config.num_mel_bins
    if args.runtime == "ctranslate2":
        import ctranslate2

        model = convert_to_ctranslate2(model, args.workdir, args.device, args.dtype)
    meta = {
        "label": "RANDOM weights, fixed output length; shapes of Whisper " + args.model,
        "model": args.model, "runtime": args.runtime, "parameters": params, "device": args.device, "dtype": args.dtype,
        "new_tokens_per_window": args.new_tokens, "repeats": args.repeats,
        "gpu": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "ctranslate2": ctranslate2.__version__ if args.runtime == "ctranslate2" else None,
        "python": platform.python_version(), "build_s": time.perf_counter() - started,
    }  # fmt: skip
    return model, n_mels, meta, started


def _time_batches(model: Any, args: argparse.Namespace, n_mels: int, started: float) -> list[dict]:
    """One summary row per batch size of ``args`` (printed as it is made), until the budget or an OOM."""
    import torch

    rows = []
    for batch in (int(b) for b in args.batch_sizes.split(",")):
        if time.perf_counter() - started > args.budget_s:
            print(f"budget reached, skipping batch {batch}", flush=True)
            break
        try:
            if args.runtime == "ctranslate2":
                timing = time_batch_ct2(model, batch, args.new_tokens, n_mels, args.repeats)
            else:
                timing = time_batch(model, batch, args.new_tokens, args.device, args.repeats)
            row = summarize_batch(batch, args.new_tokens, timing)
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            print(f"batch {batch}: stopped by {type(exc).__name__}: {exc}", flush=True)
            break
        rows.append(row)
        print(
            f"batch {batch:3d}: encoder {row['encoder_s'] * 1000:8.1f} ms  total {row['total_s'] * 1000:8.1f} ms  "
            f"tokens {row['generated_tokens']}  RTFx {row['rtfx']:8.1f}  windows/s {row['windows_per_s']:7.2f}  tokens/s {row['tokens_per_s']:8.0f}",
            flush=True,
        )
    return rows


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(MODEL_SHAPES), default="large-v3-turbo")
    p.add_argument("--runtime", choices=["transformers", "ctranslate2"], default="transformers")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/whisper-random"), help="ctranslate2: conversion folder")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    p.add_argument("--new-tokens", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=300.0, help="skip remaining batch sizes after this")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--plot", type=Path, nargs="+", metavar="PNG JSON", help="only plot: PNG path, then result JSONs")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the sweep, print one line per batch size, write ``--out`` JSON (or only plot).

    What this measures, honestly labelled: the compute cost of Whisper large-v3-turbo's shapes on
    one GPU with Hugging Face transformers (eager PyTorch, SDPA attention, fp16) — encoder over
    30 s windows plus a FIXED number of greedily decoded tokens per window (``min_new_tokens =
    max_new_tokens``, so random weights cannot stop early at end-of-text). It is NOT a transcription
    benchmark (the weights are random, the text meaningless), NOT the TensorRT-LLM engine, and NOT
    through Triton. ``--runtime ctranslate2`` converts the same random model with CTranslate2's own
    converter and times ``ctranslate2.models.Whisper`` ``encode`` + greedy ``generate`` (what
    ``whisper_build.serving.engines.ctranslate2_engine`` calls), with end-of-text suppressed. Real speech yields ~2-3 tokens/s of audio (≈ 60-90 tokens per
    30 s window), so 100 tokens per window is a slightly pessimistic decode load.

    Shapes: openai/whisper-large-v3-turbo ``config.json`` on the Hugging Face Hub (d_model 1280,
    32 encoder layers, 4 decoder layers, 20 heads, FFN 5120, 128 mel bins, vocabulary 51866,
    1500 encoder positions = 30 s, 448 decoder positions).

    RTFx = (batch × 30 s of audio) ÷ wall time of the batch; throughput = windows per second.

    Usage::

        PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_whisper_random --out results.json
        PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_whisper_random --runtime ctranslate2 --out ct2.json
        python3 -m benchmarks.gpu_whisper_random --model tiny --device cpu --batch-sizes 1,2 --new-tokens 4

    The PyPI ``ctranslate2`` 4.8.5 wheel dlopens ``libcublas.so.12`` (CUDA 12); on a CUDA 13-only
    machine it fails with "Library libcublas.so.12 is not found or cannot be loaded" unless a
    CUDA 12 cuBLAS is on ``LD_LIBRARY_PATH``.
    """
    p = _parser()
    args = p.parse_args(argv)
    if args.plot:
        if len(args.plot) < 2:
            p.error("--plot needs the PNG path and at least one results JSON")
        print(plot_results(args.plot[1:], args.plot[0]))
        return 0
    model, n_mels, meta, started = _build(args)
    print(json.dumps(meta), flush=True)
    rows = _time_batches(model, args, n_mels, started)
    if args.device.startswith("cuda") and args.runtime == "transformers":
        import torch

        meta["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "results": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
