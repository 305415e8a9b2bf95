"""The ``torch`` engine alone, sustained: ≥ 10 consecutive batches of pre-staged windows, RANDOM weights.

Large-v3-turbo shapes, seeded random weights, greedy, temperature fallback not involved (one decode
per window), fixed output length per window: the dense workload (every window 100 tokens) and the
mixed one (per-window lengths drawn from :func:`mixed_lengths`). Runs against whichever
``whisper_build`` is first on ``sys.path``, so the previous engine and this one are measured in the
same device call (``benchmarks/gpu_engine_compare.sh``). Entry point: :func:`main`.
Docs: docs/benchmarks.md, "GPU, engine".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

MIXED = {"low": 10, "high": 140, "beta_a": 2.0, "beta_b": 3.2}
"""Mixed workload: ``low + round((high - low) · Beta(a, b))`` tokens; mean ``10 + 130 · 2 / 5.2 ≈ 60``."""


def mixed_lengths(n: int, seed: int = 0) -> list[int]:
    """``n`` seeded per-window decode lengths of the mixed workload (:data:`MIXED`), each in [10, 140]."""
    rng = np.random.default_rng(seed)
    draws = rng.beta(MIXED["beta_a"], MIXED["beta_b"], size=n)
    return [int(MIXED["low"] + round((MIXED["high"] - MIXED["low"]) * d)) for d in draws]


def _sync_time() -> float:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter()


def sustained(engine, batch: int, batches: int, lengths: list[int] | None, pipelined: bool) -> dict:
    """``batches`` consecutive batches of ``batch`` pre-staged windows after two warm-up batches.

    ``pipelined``: one ``decode_windows`` stream (the next batch's encoder overlaps this decode);
    else one call per batch (``generate``, or a one-batch ``decode_windows`` when ``lengths`` is
    given). ``lengths``: per-window token counts, ``None`` = the engine's fixed count.
    """
    from benchmarks.gpu_engine_random import _windows
    from whisper_build.serving.prompt import DecodePrompt

    prompt, pool = DecodePrompt("", "en", "transcribe"), _windows(batch)
    per_batch = [lengths[k * batch : (k + 1) * batch] for k in range(batches)] if lengths else None

    def run(count: int, limits: list[list[int]] | None) -> list[list]:
        if pipelined:
            return list(engine.decode_windows([pool] * count, prompt, new_tokens=limits))
        if limits is not None:  # one stream per batch: nothing overlaps across batches
            return [
                h for k in range(count) for h in engine.decode_windows([pool], prompt, new_tokens=limits[k : k + 1])
            ]
        return [engine.generate(pool, [prompt] * batch, [1.0] * batch, timestamps=False, temperature=0.0)
                for _ in range(count)]  # fmt: skip

    run(2, per_batch[:2] if per_batch else None)
    started = _sync_time()
    out = run(batches, per_batch)
    wall = _sync_time() - started
    decoded = [len(h.tokens) for part in out for h in part]
    expected = lengths[: batch * batches] if lengths else None
    if expected is not None and decoded != expected:
        raise RuntimeError("a window did not decode its drawn token count")
    record = {
        "batch": batch, "batches": batches, "pipelined": pipelined, "wall_s": wall,
        "windows_per_s": batch * batches / wall, "ms_per_batch": 1000 * wall / batches,
        "tokens_min": min(decoded), "tokens_max": max(decoded), "tokens_mean": statistics.fmean(decoded),
    }  # fmt: skip
    if per_batch:  # a static batch decodes until its longest row: the share of its steps that carry a token
        record["useful_step_share"] = sum(map(sum, per_batch)) / sum(batch * max(p) for p in per_batch)
    return record


def breakdown(engine, batch: int, new_tokens: int, repeats: int = 3) -> dict:
    """Stages of one batch with a device sync between them (median of ``repeats``; ms)."""
    from benchmarks.gpu_engine_random import _windows, stage_times
    from whisper_build.serving.prompt import DecodePrompt

    audio, prompts = _windows(batch), [DecodePrompt("", "en", "transcribe")] * batch
    stages = [stage_times(engine, audio, prompts, new_tokens) for _ in range(repeats + 1)][1:]
    return {k.replace("_s", "_ms"): 1000 * statistics.median(s[k] for s in stages) for k in stages[0]}


def main(argv: list[str] | None = None) -> int:
    """Load the engine once, print and write one JSON record per measurement (``--out``)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokenizer-dir", type=Path, required=True)
    p.add_argument("--label", required=True, help="which code this is, e.g. before / after")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpu-engine-sustained"))
    p.add_argument("--batch-sizes", type=lambda s: [int(b) for b in s.split(",")], default=[32, 64])
    p.add_argument("--batches", type=int, default=12)
    p.add_argument("--new-tokens", type=int, default=100)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shape", default="large-v3-turbo", help="tiny: a CPU smoke run of this script")
    p.add_argument("--device", default="cuda")
    args = p.parse_args(argv)
    import torch
    import transformers

    from benchmarks.gpu_whisper_random import random_model_dir
    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.engines.torch_engine import TorchEngine

    pipelined = hasattr(TorchEngine, "decode_windows")
    capacity = int(MIXED["high"]) if pipelined else args.new_tokens  # per-window counts need room for the longest
    started = time.perf_counter()
    engine = TorchEngine(EngineParams(
        engine="torch", model_path=str(random_model_dir(args.tokenizer_dir, args.workdir / args.shape, args.shape)),
        beam_size=1, device=args.device, compute_type="float16" if args.device == "cuda" else "float32", max_engine_batch=max(args.batch_sizes),
        random_weights_fixed_tokens=capacity,
    ))  # fmt: skip
    report: dict = {
        "label": args.label, "random_weights": True, "shapes": args.shape, "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu", "torch": torch.__version__, "transformers": transformers.__version__,
        "startup_s": time.perf_counter() - started, "engine_file": sys.modules[TorchEngine.__module__].__file__, "mixed_distribution": MIXED, "records": [],
    }  # fmt: skip

    def emit(record: dict) -> None:
        record = {"label": args.label, **record}
        report["records"].append(record)
        print(json.dumps(record), flush=True)
        args.out.write_text(json.dumps(report, indent=2))

    dense = [args.new_tokens] * (max(args.batch_sizes) * args.batches) if pipelined else None
    for batch in args.batch_sizes:
        one_by_one = sustained(engine, batch, args.batches, dense, False)  # generate where no decode_windows
        emit({"workload": "dense", "path": "per_batch", **one_by_one})
        if pipelined:
            emit({"workload": "dense", "path": "decode_windows", **sustained(engine, batch, args.batches, dense, True)})
    batch = max(args.batch_sizes)
    if pipelined:
        lengths = mixed_lengths(batch * args.batches)
        emit({"workload": "mixed", "path": "decode_windows", **sustained(engine, batch, args.batches, lengths, True)})
    emit({"workload": "dense", "path": "stages", "batch": batch, **breakdown(engine, batch, args.new_tokens)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
