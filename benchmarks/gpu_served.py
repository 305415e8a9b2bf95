"""GPU figures through the served path (gateway → Triton → ``torch`` engine) beside Triton, in-process and the engine alone.

One run gives the served-path report: per workload (dense, mixed) of the random-weight large-v3-turbo,
the engine alone, then closed-loop levels and open-loop rates on the same single-window requests
(``tiny.en`` with real weights on request). Run by ``benchmarks/gpu_served_run.sh`` on the GPU machine;
``--device cpu --random-shape tiny`` for a smoke run. Entry point: :func:`main` (what it starts,
measures and writes: its docstring); the report: :mod:`benchmarks.gpu_served_report`.
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.bench.audio import load_samples
from benchmarks.bench.cli import main as bench_main
from benchmarks.gpu_served_engine import (
    WORKLOADS,
    GpuSampler,
    best_engine_rate,
    drawn_tokens,
    engine_alone,
    mean_tokens,
    mixed_audio,
    prepare_stage,
    release_gpu_memory,
    shared_engine,
    versions,
    workload_params,
)
from benchmarks.gpu_served_report import plot, report, saturating_record, summary
from benchmarks.gpu_served_stack import core_query, engine_query, served_models, start_triton
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.random_lengths import MIXED
from whisper_build.serving.triton_model.decoding import DecodingPolicy, window_texts
from whisper_build.workstation.process import GatewayProcess


def check_transcripts(gateway_url: str, audio: list[Path], references: dict, params: EngineParams) -> dict:
    """Check transcripts: each file once through the gateway and through the in-process engine.

    Gateway transcripts are scored against the spoken text (WER); the in-process engine's, on the same
    windows, are compared with the ``ctranslate2`` greedy transcripts made with the files.
    """
    import httpx
    import jiwer

    def words(text: str) -> str:
        return " ".join("".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split())

    served = {}
    with httpx.Client(base_url=gateway_url, timeout=120) as client:
        for path in audio:
            body = {"audio_data": __import__("base64").b64encode(path.read_bytes()).decode(), "whisper_prompt": ""}
            served[path.name] = client.post("/invocations", json=body).json().get("transcribe_text", "")
    spoken = references["spoken"]
    wer = jiwer.wer([words(spoken[n]) for n in served], [words(t) or "<empty>" for t in served.values()])
    engine = load_engine(params)
    samples = load_samples(audio)
    in_process = {
        s.name: " ".join(window_texts(engine, list(s.windows), DecodingPolicy.from_params(params))) for s in samples
    }
    ct2 = references.get("ctranslate2_greedy", {})
    same = sum(in_process[n] == ct2.get(n) for n in in_process)
    return {
        "wer_gateway_vs_spoken": round(wer, 4),
        "in_process_equal_to_ctranslate2_greedy": f"{same}/{len(in_process)}",
        "gateway_equal_to_in_process": f"{sum(served[n] == in_process[n] for n in served)}/{len(served)}",
        "transcripts": {
            n: {"gateway": served[n], "in_process": in_process[n], "ctranslate2": ct2.get(n)} for n in served
        },
    }


def _levels(out: Path, gateway_cpu_s: float, gpu: GpuSampler) -> list[dict]:
    """The bench levels written under ``out`` (closed, open, reference), with the gateway's CPU and the GPU's SMs."""
    levels = []
    for part in (out, out / "open", out / "reference"):
        if (part / "bench.json").exists():
            levels += json.loads((part / "bench.json").read_text())["levels"]
    gateway_requests = sum(level["requests"] for level in levels if level["target"] == "gateway")
    for level in levels:
        if level["target"] == "gateway" and gateway_requests:  # the sweep's mean, warm-up and canaries included
            level["gateway_cpu_ms_per_request"] = round(1000 * gateway_cpu_s / gateway_requests, 2)
        level["gpu_sm_util_pct"] = gpu.mean_sm(level.get("started_unix"), level["wall_s"])
    return levels


def _bench_targets(
    params: EngineParams, args: argparse.Namespace, gateway_url: str, grpc_url: str
) -> tuple[dict[str, str], list[str]]:
    """Every bench target of a run by name (served, in-process, engine cores), and the closed-loop ones."""
    every = {"gateway": gateway_url, "triton": f"grpc://{grpc_url}", "in_process": engine_query(params, args.max_batch)}
    for policy in [p for p in args.core_schedulers.split(",") if p not in ("", "none")]:  # B: the core, no Triton
        every[f"engine_core_{policy}"] = core_query(params, args.max_batch, policy, args.queue_delay_us)
    closed = [t for t in args.closed_targets.split(",") if t in every] + [
        t for t in every if t.startswith("engine_core_")
    ]
    return every, closed


def run_model(
    name: str, params: EngineParams, args: argparse.Namespace, audio: list[Path], references: dict, run: dict
) -> list[dict]:
    """Start Triton + gateway for ``params``, check (real weights), sweep closed then open loop.

    ``run``: ``label`` (output folder), ``rates`` (open-loop arrivals/s, may be empty), ``scheduler``,
    ``gpu`` (a started :class:`GpuSampler`) and ``targets`` (open-loop targets). Returns the bench JSON
    levels with each level's mean GPU SM utilisation added.
    """
    out = args.out / run["label"]
    started = time.monotonic()
    triton = start_triton(
        params, args.max_batch, args.queue_delay_us, args.triton_env, args.out / f"triton_{run['label']}",
        args.instance_count, run["scheduler"],
    )  # fmt: skip
    settings = triton.settings
    gateway_env = {"WHISPER_GATEWAY_WORKERS": str(args.gateway_workers)}
    checks: dict = {}
    with triton, GatewayProcess(settings.grpc_url, capacity=args.gateway_capacity, settings=gateway_env) as gateway:
        checks["triton_ready_s"] = round(time.monotonic() - started, 1)
        if not params.random_weights_fixed_tokens:
            checks |= check_transcripts(gateway.url, audio, references, params)
            print(json.dumps({k: v for k, v in checks.items() if k != "transcripts"}), flush=True)
        common = [
            "--audio", *map(str, audio), "--quiet", "--title", f"{run['label']} on {args.device_name}",
            "--warmup", "4", "--timeout", "60", "--metrics-settle", "0.5",
        ]  # fmt: skip

        def metrics(targets: list[str]) -> list[str]:  # Triton's metrics, for the served targets that run
            return [f"--triton-metrics={t}={settings.metrics_url}" for t in targets if t in ("gateway", "triton")]

        every, closed = _bench_targets(params, args, gateway.url, settings.grpc_url)
        cpu_before = gateway.cpu_seconds()
        if args.concurrency not in ("none", ""):
            bench_main([
                *common, "--interleave", "--duration", str(args.duration), "--out", str(out),
                *[f"--target={t}={every[t]}" for t in closed],
                *metrics(["gateway", "triton"]), "--concurrency", args.concurrency,
            ])  # fmt: skip
        if run["rates"]:
            bench_main([
                *common, "--duration", str(args.open_duration), "--out", str(out / "open"),
                *[f"--target={t}={every[t]}" for t in run["targets"]], *metrics(run["targets"]), "--concurrency", "none",
                "--rates", ",".join(f"{r:.1f}" for r in run["rates"]), "--clients", str(args.clients),
                "--arrivals", args.arrivals,
            ])  # fmt: skip
        checks["gateway_cpu_s"] = round(gateway.cpu_seconds() - cpu_before, 2)
        if args.reference_concurrency not in ("none", ""):
            with GatewayProcess(settings.grpc_url, module="benchmarks.reference_gateway") as reference:
                bench_main([
                    *common, "--duration", str(args.duration), "--out", str(out / "reference"),
                    "--target", f"reference_gateway={reference.url}/invocations",
                    "--triton-metrics", f"reference_gateway={settings.metrics_url}",
                    "--concurrency", args.reference_concurrency,
                ])  # fmt: skip
    (args.out / f"checks_{run['label']}.json").write_text(json.dumps(checks, indent=2))
    return _levels(out, checks["gateway_cpu_s"], run["gpu"])


_OPTIONS = (  # flag, default (its type is the option's), help
    ("--stage", Path("/tmp/gpustage/run"), "folder with hf-tiny-en/, audio/, references.json"),
    ("--out", Path("gpu-served-out"), "output folder"),
    ("--device", "cuda", "engine device (cpu: a smoke run)"),
    ("--device-name", "NVIDIA H200", "for the plot titles"),
    ("--random-shape", "large-v3-turbo", "shapes of the random-weight model (tiny: a CPU smoke run)"),
    ("--models", "large-v3-turbo-random", "comma list of tiny.en, large-v3-turbo-random"),
    ("--workloads", "dense,mixed", "random-weight model: dense, mixed or both (tiny.en: dense)"),
    ("--concurrency", "1,64", "closed-loop levels (none = skip)"),
    ("--duration", 4.0, "seconds per closed-loop level and target"),
    ("--rate-fractions", "0.5,0.75,0.9,1.05,1.2", "open-loop rates, fractions of the workload's engine-alone best (none = skip)"),
    ("--open-duration", 4.0, "seconds of arrivals per open-loop level"),
    ("--open-targets", "gateway,triton", "targets of the open-loop levels"),
    ("--clients", 4, "open-loop sending processes per target"),
    ("--arrivals", "poisson", "open-loop arrivals: poisson (seeded) or even"),
    ("--engine-batches", 10, "engine alone: consecutive pre-staged batches per measurement"),
    ("--engine-batch-sizes", "32,64", "engine alone: static batch sizes (and the scheduler at --max-batch rows)"),
    ("--mixed-files", 96, "distinct files (windows) of the mixed workload"),
    ("--schedulers", "static", "the model's scheduler(s): the first serves every level; a second runs the mixed "
     "workload's gateway at the first's saturating rate (the in-flight ÷ static figure)"),
    ("--max-batch", 64, "Triton max_batch_size = engine max batch = scheduler rows"),
    ("--queue-delay-us", 2000, "batching delay"),
    ("--instance-count", 1, "Triton model instances"),
    ("--fixed-tokens", 100, "decode length of the random-weight model (dense)"),
    ("--gateway-workers", 4, "WHISPER_GATEWAY_WORKERS of our gateway"),
    ("--gateway-capacity", 128, "WHISPER_GATEWAY_CAPACITY (above the top concurrency)"),
    ("--closed-targets", "gateway,triton,in_process", "closed-loop targets besides the engine core"),
    ("--core-schedulers", "static,inflight", "the engine core driven without Triton, per scheduler (none: skip)"),
    ("--reference-concurrency", "none", "levels for the seeds' reference gateway design (none = skip)"),
)  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for flag, default, text in _OPTIONS:
        p.add_argument(flag, type=type(default), default=default, help=f"{text} (default {default})")
    p.add_argument("--prepare", action="store_true", help="only write --stage (here, with espeak-ng and ctranslate2)")
    p.add_argument("--plot", nargs=2, type=Path, metavar=("RESULT_JSON", "PNG"), help="only plot a result file")
    p.add_argument("--table", type=Path, metavar="RESULT_JSON", help="only print the tables and targets of a result")
    p.add_argument("--triton-env", action="append", default=[], metavar="KEY=VALUE", help="tritonserver's environment")
    return p


def _workload_runs(
    name: str,
    params: EngineParams,
    args: argparse.Namespace,
    audio: list[Path],
    gpu: GpuSampler,
    records: list[dict],
    save: Callable[[], None],
) -> None:
    """Every workload of the random-weight model: engine alone, then the served targets.

    Appends their records to ``records`` and calls ``save`` after each workload (a run cut short keeps them).
    """
    workloads = [w for w in WORKLOADS if w in args.workloads.split(",")]
    schedulers = args.schedulers.split(",")
    sizes = tuple(int(b) for b in args.engine_batch_sizes.split(","))
    for workload in workloads:
        started = time.monotonic()
        served = workload_params(params, workload, args.fixed_tokens)
        files = audio if workload == "dense" else mixed_audio(audio, args.out / "mixed-audio", args.mixed_files)
        extra: dict = {"workload": workload, "random_weights": True,
                       "scheduler": schedulers[0], "fixed_new_tokens": served.random_weights_fixed_tokens or None}  # fmt: skip
        if workload == "mixed":
            extra["drawn_tokens"] = mean_tokens(drawn_tokens(files))
        from whisper_build.serving.engines.torch_engine import TorchEngine

        engine = TorchEngine(served)
        alone = engine_alone(engine, served, workload, sizes, args.engine_batches, args.max_batch, gpu.mean_sm)
        records += [{**r, "model": name, "random_weights": True} for r in alone]
        best = best_engine_rate(alone, sizes)
        rates = (
            [] if args.rate_fractions == "none" else [round(best * float(f), 1) for f in args.rate_fractions.split(",")]
        )
        run = {"label": f"{name}_{workload}", "rates": rates, "scheduler": schedulers[0], "gpu": gpu,
               "targets": args.open_targets.split(",")}  # fmt: skip
        with shared_engine(engine, served):  # the in-process target drives this engine
            records += summary(run_model(name, served, args, files, {}, run), name, extra)
        del engine
        release_gpu_memory()
        if workload == "mixed" and len(schedulers) > 1 and rates:
            at = saturating_record([r for r in records if r.get("workload") == "mixed"], "gateway")
            if at is not None:
                other = {**run, "label": f"{name}_mixed_{schedulers[1]}", "rates": [at["rate_per_s"]],
                         "scheduler": schedulers[1], "targets": ["gateway"]}  # fmt: skip
                args_once = argparse.Namespace(**{**vars(args), "concurrency": "none"})
                records += summary(
                    run_model(name, served, args_once, files, {}, other), name, {**extra, "scheduler": schedulers[1]}
                )
        print(f"{name} {workload}: {time.monotonic() - started:.0f} s", flush=True)
        save()


def _result_header(args: argparse.Namespace, audio: list[Path], records: list[dict]) -> dict[str, object]:
    """``gpu_served.json`` before its first record: versions, batching, gateway, method, audio; ``records`` grows."""
    result: dict[str, object] = {
        "versions": versions(), "wall_s": None,
        "batching": {"triton_max_batch_size": args.max_batch, "max_queue_delay_us": args.queue_delay_us,
                     "instance_count": args.instance_count, "engine_max_batch": args.max_batch,
                     "schedulers": args.schedulers.split(","), "in_process": "no-delay batcher, same max"},
        "gateway": {"workers": args.gateway_workers, "capacity": args.gateway_capacity},
        "method": {"closed_levels_s": args.duration, "open_levels_s": args.open_duration, "clients": args.clients,
                   "arrivals": args.arrivals, "rate_fractions_of_engine_best": args.rate_fractions,
                   "engine_batches": args.engine_batches, "engine_batch_sizes": args.engine_batch_sizes,
                   "mixed_distribution": MIXED, "mixed_files": args.mixed_files,
                   "requests": "single-window (one ≤ 30 s file per request)"},
        "audio": [a.name for a in audio], "records": records,
    }  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``); run by ``benchmarks/gpu_served_run.sh`` on the H200 machine (``--device cpu``: a smoke run).

    Models: ``large-v3-turbo-random`` (large-v3-turbo's shapes, :data:`benchmarks.gpu_whisper_random.MODEL_SHAPES`,
    seeded RANDOM weights, workloads :mod:`benchmarks.gpu_served_engine`) and optionally ``tiny.en`` (real
    weights; every file once through the gateway, WER against the spoken text, in-process transcripts vs greedy
    ``ctranslate2``). Per model and workload: the engine alone (random weights), then tritonserver (pytriton
    build) and our gateway (``--gateway-workers``) start; the bench tool runs gateway, Triton-direct and in-process
    at the closed-loop ``--concurrency`` levels (interleaved), then the open-loop rates (fractions of the
    engine-alone best) from ``--clients`` processes; ``nvidia-smi dmon`` samples the GPU throughout.
    Writes ``<out>/gpu_served.json`` (one record per target × workload × level; docs/benchmarks.md) and the
    bench tool's files per run under ``<out>/<model>_<workload>/``.
    """
    args = _parser().parse_args(argv)
    if args.prepare:
        prepare_stage(args.stage)
        return 0
    if args.plot:
        plot(*args.plot)
        return 0
    if args.table:
        print(report(json.loads(args.table.read_text())))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    audio = sorted((args.stage / "audio").glob("*.wav"))
    references = json.loads((args.stage / "references.json").read_text())
    models = served_models(
        args.stage / "hf-tiny-en", args.out, args.device, args.max_batch, args.fixed_tokens, args.random_shape
    )
    records: list[dict] = []
    started = time.monotonic()
    result = _result_header(args, audio, records)

    def save() -> None:
        result["wall_s"] = round(time.monotonic() - started)
        (args.out / "gpu_served.json").write_text(json.dumps(result, indent=2))

    with GpuSampler(args.out / "dmon.txt") as gpu:
        for name in args.models.split(","):
            if name == "tiny.en":
                first = args.schedulers.split(",")[0]
                run = {"label": name, "rates": [], "scheduler": first, "gpu": gpu, "targets": []}
                records += summary(run_model(name, models[name], args, audio, references, run), name,
                                   {"workload": "dense", "random_weights": False})  # fmt: skip
                save()
            else:
                _workload_runs(name, models[name], args, audio, gpu, records, save)
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
