"""The ``torch`` engine alone, sustained: ≥ 10 consecutive batches of pre-staged windows, RANDOM weights.

Large-v3-turbo shapes, seeded random weights, greedy, temperature fallback not involved (one decode
per window), fixed output length per window: the dense workload (every window 100 tokens) and the
mixed one (per-window lengths drawn from :func:`mixed_lengths`); ``--scheduler`` picks static batches,
the in-flight scheduler (:func:`sustained_inflight`) or both on the same windows. Runs against whichever
``whisper_build`` is first on ``sys.path``, so the previous engine and this one are measured in the
same device call (``benchmarks/gpu_engine_compare.sh``). Entry point: :func:`main`.
Docs: docs/benchmarks.md, "GPU, engine".
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from whisper_build.serving.engines.random_lengths import MIXED


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
        record["tokens_per_step"] = sum(map(sum, per_batch)) / sum(max(p) for p in per_batch)
    return record


def sustained_inflight(
    engine,
    slots: int,
    lengths: list[int],
    encoder_batch: int | None,
    overlap: bool = True,
    max_encoder_batch: int | None = None,
) -> dict:
    """``len(lengths)`` pre-staged windows through the in-flight scheduler at once (bulk), after a warm-up.

    The same 30 s windows and per-window lengths as :func:`sustained`; every window is queued at
    the start, so the scheduler keeps its ``slots`` rows full and admits arrivals by encoder batches.
    """
    from benchmarks.gpu_engine_random import _windows
    from whisper_build.serving.engines.torch_inflight import InflightScheduler, Window
    from whisper_build.serving.prompt import DecodePrompt

    prompt, pool = DecodePrompt("", "en", "transcribe"), _windows(slots)

    def run(counts: list[int]) -> tuple[InflightScheduler, list]:
        scheduler = InflightScheduler(engine, slots, encoder_batch, max_encoder_batch, overlap_encoder=overlap)
        futures = [
            scheduler.submit(Window(pool[k % slots], prompt, max_new=n, priority="bulk")) for k, n in enumerate(counts)
        ]
        scheduler.run_until_idle()
        return scheduler, [f.result(timeout=0) for f in futures]

    run([min(n, 16) for n in lengths[: 2 * slots]])  # warm-up: graphs, encoder batch sizes
    started = _sync_time()
    scheduler, out = run(lengths)
    wall = _sync_time() - started
    if [len(h.tokens) for h in out] != lengths:
        raise RuntimeError("a window did not decode its drawn token count")
    stats = scheduler.stats()
    return {
        "batch": slots, "windows": len(lengths), "encoder_overlap": scheduler.overlap, "wall_s": wall,
        "windows_per_s": len(lengths) / wall, "tokens_mean": statistics.fmean(lengths), "steps": stats["steps"],
        "mean_active_rows": stats["mean_active_rows"], "tokens_per_step": sum(lengths) / stats["steps"],
        "encoder_passes": stats["encoder_passes"], "mean_encoder_batch": stats["mean_encoder_batch"],
    }  # fmt: skip


def breakdown(engine, batch: int, new_tokens: int, repeats: int = 3) -> dict:
    """Stages of one batch with a device sync between them (median of ``repeats``; ms)."""
    from benchmarks.gpu_engine_random import _windows, stage_times
    from whisper_build.serving.prompt import DecodePrompt

    audio, prompts = _windows(batch), [DecodePrompt("", "en", "transcribe")] * batch
    stages = [stage_times(engine, audio, prompts, new_tokens) for _ in range(repeats + 1)][1:]
    return {k.replace("_s", "_ms"): 1000 * statistics.median(s[k] for s in stages) for k in stages[0]}


def sweep(engine, labels: list[str], batch: int, batches: int, new_tokens: int, inflight: bool, emit) -> None:
    """Each tuning (:class:`~whisper_build.serving.engines.torch_overlap.EngineTuning` label) on the same engine.

    Per tuning: dense static pipelined batches, then (``inflight``) the in-flight scheduler with the
    encoder beside the decode; a tuning that fails (e.g. no green contexts) gets an error record.
    Ends with a compact table on stdout.
    """
    from whisper_build.serving.engines.torch_overlap import EngineTuning

    dense, rows = [new_tokens] * (batch * batches), []
    for label in labels:
        try:
            engine.tune(EngineTuning.parse(label))
            static = sustained(engine, batch, batches, dense, True)
            emit({"workload": "dense", "path": "decode_windows", "tuning": label, **static})
            row = [label, f"{static['windows_per_s']:.1f}", f"{static['ms_per_batch']:.0f}"]
            if inflight:
                flight = sustained_inflight(engine, batch, dense, None, True)
                emit({"workload": "dense", "path": "inflight", "tuning": label, **flight})
                row.append(f"{flight['windows_per_s']:.1f}")
            stages = breakdown(engine, batch, new_tokens, repeats=2)
            emit({"workload": "dense", "path": "stages", "tuning": label, "batch": batch, **stages})
            rows.append([*row, *(f"{stages[k]:.0f}" for k in ("encoder_ms", "decode_ms"))])
        except Exception as exc:  # noqa: BLE001 - one failed tuning must not lose the others' figures
            emit({"workload": "dense", "tuning": label, "error": repr(exc)})
            rows.append([label, "error: " + repr(exc)[:60]])
        print("row: " + " | ".join(rows[-1]), flush=True)  # a run cut short still shows its rows
    head = ["tuning", "static w/s", "ms/batch", *(["inflight w/s"] if inflight else []), "enc ms", "dec ms"]
    print("\n" + "\n".join(" | ".join(f"{c:>12}" for c in r) for r in [head, *rows]), flush=True)


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
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
    p.add_argument(
        "--scheduler",
        choices=("static", "inflight", "both"),
        default="both",
        help="static batches (decode_windows), the in-flight scheduler, or both on the same windows",
    )
    p.add_argument("--encoder-batch", type=int, default=None, help="in-flight: fewest arrivals per encoder pass")
    p.add_argument("--max-encoder-batch", type=int, default=None, help="in-flight: most arrivals per encoder pass")
    p.add_argument(
        "--encoder-overlap", default="on,off", help="in-flight: encoder beside the decode (GPU): on, off or both"
    )
    p.add_argument(
        "--tunings",
        default="",
        help="instead of the usual records: a sweep of EngineTuning labels, e.g. base,kv,sms112+kv (dense, largest batch)",
    )
    return p


def _load_engine(args: argparse.Namespace) -> tuple[Any, bool, dict]:
    """The engine of ``args`` on random weights, whether it has ``decode_windows``, and the report's header."""
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
        "startup_s": time.perf_counter() - started, "engine_file": TorchEngine.__module__.replace(".", "/") + ".py",  # repo-relative: no machine path
        "mixed_distribution": MIXED, "records": [],
    }  # fmt: skip
    return engine, pipelined, report


def main(argv: list[str] | None = None) -> int:
    """Load the engine once, print and write one JSON record per measurement (``--out``)."""
    args = _parser().parse_args(argv)
    engine, pipelined, report = _load_engine(args)

    def emit(record: dict) -> None:
        record = {"label": args.label, **record}
        report["records"].append(record)
        print(json.dumps(record), flush=True)
        args.out.write_text(json.dumps(report, indent=2))

    static, inflight = args.scheduler != "inflight", args.scheduler != "static"
    if inflight and importlib.util.find_spec("whisper_build.serving.engines.torch_inflight") is None:
        print("no in-flight scheduler in this engine: static batches only", flush=True)
        inflight = False
    batch = max(args.batch_sizes)
    if args.tunings:
        sweep(engine, args.tunings.split(","), batch, args.batches, args.new_tokens, inflight, emit)
        return 0
    dense = [args.new_tokens] * (batch * args.batches) if pipelined else None
    workloads = {"dense": dense, "mixed": mixed_lengths(batch * args.batches) if pipelined else None}
    static_rate: dict[str, float] = {}  # static windows/s at the largest batch, per workload
    for size in args.batch_sizes if static else []:
        one_by_one = sustained(engine, size, args.batches, dense, False)  # generate where no decode_windows
        emit({"workload": "dense", "path": "per_batch", **one_by_one})
        if pipelined:
            record = sustained(engine, size, args.batches, dense, True)
            emit({"workload": "dense", "path": "decode_windows", **record})
            static_rate.update({"dense": record["windows_per_s"]} if size == batch else {})
    if static and pipelined:
        record = sustained(engine, batch, args.batches, workloads["mixed"], True)
        emit({"workload": "mixed", "path": "decode_windows", **record})
        static_rate["mixed"] = record["windows_per_s"]
    overlaps = [{"on": True, "off": False}[o] for o in args.encoder_overlap.split(",")]
    for (workload, lengths), overlap in itertools.product(workloads.items() if inflight else [], overlaps):
        assert lengths is not None
        try:
            record = sustained_inflight(engine, batch, lengths, args.encoder_batch, overlap, args.max_encoder_batch)
        except Exception as exc:  # noqa: BLE001 - one failed variant must not lose the others' figures
            emit({"workload": workload, "path": "inflight", "encoder_overlap": overlap, "error": repr(exc)})
            continue
        if workload in static_rate:
            record["inflight_over_static"] = record["windows_per_s"] / static_rate[workload]
        emit({"workload": workload, "path": "inflight", **record})
    if static:
        emit({"workload": "dense", "path": "stages", "batch": batch, **breakdown(engine, batch, args.new_tokens)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
