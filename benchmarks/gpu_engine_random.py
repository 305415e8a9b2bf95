"""The ``torch`` engine in-process on a GPU, large-v3-turbo shapes, RANDOM weights: graphs vs eager, per bucket.

The compute cost of large-v3-turbo's shapes through
:class:`whisper_build.serving.engines.torch_engine.TorchEngine` with seeded random weights and a
FIXED number of new tokens per window, in one process — no Triton, no gateway, meaningless text.
Modes ``graphs`` (CUDA graphs, compiled encoder) and ``eager`` (the fall-back). Entry point:
:func:`main` (what it records and the usage, in its docstring).
Docs: docs/benchmarks.md, "GPU, engine".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

if TYPE_CHECKING:
    from whisper_build.serving.engines.torch_graphs import StepAttention

import numpy as np

from benchmarks.gpu_whisper_random import random_model_dir
from whisper_build.serving.engines.tokens import build_prompt_ids
from whisper_build.serving.prompt import DecodePrompt

WINDOW_SECONDS = 30.0


def _windows(batch: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(480_000)).astype(np.float32) for _ in range(batch)]


def stage_times(engine, audio: list[np.ndarray], prompts: list[DecodePrompt], new_tokens: int) -> dict[str, float]:
    """One padded bucket through the engine's stages, a device sync after each (seconds)."""
    import torch

    def now() -> float:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return time.perf_counter()

    with torch.inference_mode():
        t0 = now()
        features = engine._mel.features(audio)
        tf = now()
        encoded = engine._encoder(features)
        t1 = now()
        engine._decoder.set_cross(encoded)
        t2 = now()
        ids = [
            build_prompt_ids(p, engine._specials, engine._encode, engine._tokenizer.token_to_id, "en") for p in prompts
        ]
        result = engine._decoder.decode(ids, [1.0] * len(ids), 0.0, False, new_tokens)
        t3 = now()
    if any(len([t for t in row if t != engine.eot]) != new_tokens for row in result.tokens):
        raise RuntimeError(f"a row did not decode {new_tokens} tokens")
    return {
        "features_s": tf - t0,
        "encoder_s": t1 - tf,
        "cross_kv_s": t2 - t1,
        "decode_s": t3 - t2,
        "stages_wall_s": t3 - t0,
    }


def encoder_variants(engine, batch: int, repeats: int) -> list[dict]:
    """Encoder alone at ``batch`` windows, seconds (median), per variant.

    Variants: transformers' ``WhisperEncoder``, the engine's fused encoder eager and compiled, each
    with PyTorch's default SDPA choice and with cuDNN attention first.
    """
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from whisper_build.serving.engines.torch_encoder import FusedEncoder

    features = engine._mel.features(_windows(batch, seed=1))
    hf = engine._model.model.encoder
    candidates = {
        "transformers_eager": lambda x: hf(input_features=x).last_hidden_state,
        "fused_eager": FusedEncoder(engine._model, "none"),
        "fused_compiled": engine._encoder,
    }
    backends = {"default": None, "cudnn_first": [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]}
    out = []
    with torch.inference_mode():
        for name, fn in candidates.items():
            for backend, order in backends.items():
                try:
                    times = []
                    for _ in range(repeats + 1):
                        torch.cuda.synchronize()
                        t = time.perf_counter()
                        if order is None:
                            fn(features)
                        else:
                            with sdpa_kernel(order):
                                fn(features)
                        torch.cuda.synchronize()
                        times.append(time.perf_counter() - t)
                    row = {
                        "encoder": name,
                        "attention": backend,
                        "batch": batch,
                        "encoder_s": statistics.median(times[1:]),
                    }
                except Exception as exc:  # noqa: BLE001 - a variant that cannot run is reported, not fatal
                    row = {
                        "encoder": name,
                        "attention": backend,
                        "batch": batch,
                        "error": f"{type(exc).__name__}: {exc}"[:300],
                    }
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def profile_step(engine, batch: int, steps: int = 20) -> list[dict]:
    """Where one decoder step's GPU time goes at ``batch`` rows (top 15 ops, microseconds per step).

    The step's kernels run eagerly (the same kernels the graph replays) under ``torch.profiler``.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    decoder = engine._decoder
    audio, prompt = _windows(batch), DecodePrompt("", "en", "transcribe")
    with torch.inference_mode():
        decoder.set_cross(engine._encoder(engine._mel.features(audio)))
        ids = [build_prompt_ids(prompt, engine._specials, engine._encode, engine._tokenizer.token_to_id, "en")] * batch
        decoder.decode(ids, [1.0] * batch, 0.0, False, 2)  # fills the cache and state for the steps below
        decoder._step(batch, False)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                decoder._step(batch, False)
            torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:15]
    return [{"op": e.key, "us_per_step": e.device_time_total / steps, "calls_per_step": e.count / steps} for e in rows]


def _time_batch(engine: Any, mode: str, attention: StepAttention, batch: int, args: argparse.Namespace) -> dict:
    """One batch size: warm-up, ``args.repeats`` timed ``generate`` calls and their stages; printed, returned."""
    import torch

    prompt = DecodePrompt("", "en", "transcribe")
    audio, prompts = _windows(batch), [prompt] * batch
    engine.generate(audio, prompts, [1.0] * batch, timestamps=False, temperature=0.0)  # warm-up
    walls = []
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        hyps = engine.generate(audio, prompts, [1.0] * batch, timestamps=False, temperature=0.0)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t)
    tokens = min(len(h.tokens) for h in hyps)
    stages = [stage_times(engine, audio, prompts, args.new_tokens) for _ in range(args.repeats)]
    wall = statistics.median(walls)
    record: dict[str, Any] = {
        "mode": mode, "attention": attention, "batch": batch, "wall_s": wall, "windows_per_s": batch / wall, "ms_per_window": 1000 * wall / batch,
        "rtfx": batch * WINDOW_SECONDS / wall, "tokens": tokens, "walls_s": walls,
        **{k: statistics.median(s[k] for s in stages) for k in stages[0]},
    }  # fmt: skip
    record["decode_ms_per_step"] = 1000 * record["decode_s"] / args.new_tokens
    print(
        f"{mode:6s} {attention:6s} batch {batch:3d}: wall {wall * 1000:7.1f} ms  {record['windows_per_s']:7.1f} windows/s  "
        f"encoder {record['encoder_s'] * 1000:6.1f} ms  cross {record['cross_kv_s'] * 1000:5.1f} ms  "
        f"decode {record['decode_s'] * 1000:6.1f} ms ({record['decode_ms_per_step']:.2f} ms/step)  tokens {tokens}",
        flush=True,
    )
    return record


def run_mode(mode: str, model_dir: Path, args: argparse.Namespace, attention: StepAttention) -> tuple[list[dict], dict]:
    """Load the engine in ``mode``, time every batch size; returns (records, start-up record).

    ``attention`` other than the engine's default re-captures the graphs with that step attention
    (:class:`whisper_build.serving.engines.torch_graphs.StepAttention`) before timing.
    """
    import torch

    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.engines.torch_engine import TorchEngine

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    started = time.perf_counter()
    params = EngineParams(
        engine="torch", model_path=str(model_dir), beam_size=1, device="cuda", compute_type=args.dtype,
        max_engine_batch=max(args.batch_sizes), random_weights_fixed_tokens=args.new_tokens,
        cuda_graphs=mode == "graphs", encoder_compile=args.encoder_compile if mode == "graphs" else "none",
    )  # fmt: skip
    engine = TorchEngine(params)
    if attention != engine._decoder.attention:
        engine._decoder.attention = attention
        if mode == "graphs":
            engine._decoder.capture_all()
    startup = {
        "mode": mode, "attention": attention, "startup_s": time.perf_counter() - started, "encoder_compile": params.encoder_compile,
        "static_buffers_bytes": engine._decoder.static_bytes,
        "weights_and_buffers_bytes": torch.cuda.memory_allocated() - before,
        "buckets": [{"bucket": s.bucket, "capture_s": s.capture_s, "graph_pool_bytes": s.graph_pool_bytes}
                    for s in engine._decoder.startup],
    }  # fmt: skip
    print(json.dumps(startup), flush=True)
    records = [_time_batch(engine, mode, attention, batch, args) for batch in args.batch_sizes]
    startup["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
    if mode == "graphs" and args.profile:
        startup["profile_step"] = {str(b): profile_step(engine, b) for b in (1, max(args.batch_sizes))}
        for b, rows in startup["profile_step"].items():
            print(
                f"profile batch {b}: " + "; ".join(f"{r['op'][:40]} {r['us_per_step']:.0f} us" for r in rows[:8]),
                flush=True,
            )
    if mode == "graphs" and args.encoder_variants:
        startup["encoder_variants"] = encoder_variants(engine, max(args.batch_sizes), args.repeats)
    del engine
    return records, startup


def assemble(check_path: Path, random_path: Path, out: Path) -> dict:
    """One report (``docs/benchmarks/gpu_engine_h200.json``) from this script's and ``gpu_engine_check.py``'s outputs.

    Records: one per mode × batch (mode, batch, wall_s, windows_per_s, tokens, encoder_s and the other
    stages), start-up seconds and GPU memory per mode (per bucket for ``graphs``), and the real-weight
    comparison: ``transcripts_equal`` and what was compared.
    """
    random, check = json.loads(random_path.read_text()), json.loads(check_path.read_text())
    report = {
        "meta": random["meta"],
        "records": random["records"],
        "startup": random["startup"],
        "served": [],
        "served_note": "not measured in this run",
        "transcripts_equal": check["transcripts_equal"],
        "transcripts_compared": [
            {
                "model": m["model"],
                "comparisons": m["comparisons"],
                "languages_correct": m.get("languages_correct"),
                "wer_english": m["wer_english"],
                "windows": m["windows"],
                "translate": m.get("translate"),
            }
            for m in check["models"]
        ],  # fmt: skip
        "files": {"random": random_path.name, "check": check_path.name},
    }
    out.write_text(json.dumps(report, indent=2))
    return report


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer-dir", type=Path, help="folder with a Whisper tokenizer.json (required to run)")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpu-engine-random"))
    p.add_argument("--batch-sizes", type=lambda s: [int(b) for b in s.split(",")], default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--modes", default="graphs,eager", help="comma list of MODE[:ATTENTION], e.g. graphs:sdpa")
    p.add_argument("--new-tokens", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--encoder-compile", default="default", choices=["none", "default", "max-autotune-no-cudagraphs"])
    p.add_argument("--profile", action="store_true", help="also profile one decoder step at batch 1 and the largest")
    p.add_argument("--encoder-variants", action="store_true", help="also time encoder variants at the largest batch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--assemble", type=Path, nargs=2, metavar=("CHECK_JSON", "RANDOM_JSON"),
                   help="only merge gpu_engine_check.py's and this script's JSON into --out")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Both modes, every batch size; prints one line per batch, writes ``--out``.

    - ``graphs``: ``cuda_graphs=true`` (one CUDA graph per bucket, captured at start-up) and the
      encoder compiled (``--encoder-compile``);
    - ``eager``: ``cuda_graphs=false`` and ``encoder_compile=none`` (the fall-back switch: the same
      static-cache step op by op, the encoder eager).

    Per mode × batch: wall time of one ``generate`` call (median of ``--repeats`` after one warm-up),
    windows/s, tokens, and the same call split into stages with a device sync between them
    (log-Mel + encoder, cross-attention keys/values, prompt + decode loop). Per mode: start-up time
    (load + encoder compile + every capture) and GPU memory (static buffers, each bucket's graph pool,
    peak allocated). The vocabulary is the tokenizer's (``--tokenizer-dir``; Systran faster-whisper-base's
    is multilingual, 51865 ids, one fewer than large-v3-turbo's 51866); prompts name ``en`` (4 prompt
    tokens, no language detection).

    Usage (GPU)::

        PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_engine_random --tokenizer-dir DIR --out gpu_engine_random.json
    """
    p = _parser()
    args = p.parse_args(argv)
    if args.assemble:
        check, random = args.assemble
        assemble(check, random, args.out)
        return 0
    if args.tokenizer_dir is None:
        p.error("--tokenizer-dir is required")
    import torch
    import transformers

    from whisper_build.serving.engines.torch_graphs import StepAttention

    model_dir = random_model_dir(args.tokenizer_dir, args.workdir / "large-v3-turbo")
    meta = {
        "label": "RANDOM weights, fixed output length; shapes of Whisper large-v3-turbo; torch engine in-process",
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "transformers": transformers.__version__,
        "dtype": args.dtype, "new_tokens_per_window": args.new_tokens, "repeats": args.repeats,
        "vocab_size": json.loads((model_dir / "config.json").read_text())["vocab_size"],
    }  # fmt: skip
    records, startups = [], []
    for mode in args.modes.split(","):
        mode, _, attention = mode.partition(":")
        if attention not in ("", *get_args(StepAttention)):
            p.error(f"--modes: unknown attention {attention!r}")
        rows, startup = run_mode(mode, model_dir, args, cast("StepAttention", attention or "sdpa"))  # engine default
        records += rows
        startups.append(startup)
        args.out.write_text(json.dumps({"meta": meta, "startup": startups, "records": records}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
