"""Reference measurements, side by side in ONE run (``make bench-report``).

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/benchmarks.md, "Reference run (CPU, this machine)".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.bench.audio import AudioSample, load_sample
from benchmarks.bench.report import write_all
from benchmarks.bench.runner import LevelPlan, sweep, timed_request
from benchmarks.bench.stats import LevelResult
from benchmarks.bench.targets import TargetSpec, open_target
from benchmarks.reference_machine import PeakSampler, machine_info, synth_times
from benchmarks.reference_report import render_markdown
from benchmarks.speech import long_recording, utterances
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.triton_model.repository import BatchingConfig
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton, free_ports
from whisper_build.workstation.process import GatewayProcess

CPU_THREADS = 2  # CTranslate2 intra-op threads, in Triton and in-process alike


# ------------------------------------------------------------------ measurements
IN_PROCESS_QUERY = f"engine=ctranslate2&device=cpu&cpu_threads={CPU_THREADS}"
"""The in-process target: the same engine parameters as the Triton model of this run."""


async def e2e_vs_engine(gateway_url: str, samples: Sequence[AudioSample], pairs: int) -> dict[str, object]:
    """Gateway end-to-end latency vs the same work in process, on the same file, interleaved.

    Each of ``pairs`` rounds sends one file through the gateway (``/invocations``, nothing else
    in flight) and then to :class:`~benchmarks.bench.targets.InProcessTarget`: the same engine
    AND the Triton model's decoding layer (``run_batch``: fallback, signals) on all of the file's
    windows in one call, as Triton runs a lone request; both timed by ``timed_request``, so slow
    changes in machine load hit both alike. Files round-robin; one warm-up round.
    """
    target = open_target(TargetSpec("gateway", "invocations", gateway_url), 1)
    engine = open_target(TargetSpec("in_process", "in_process", IN_PROCESS_QUERY), 1)
    gateway_s: list[float] = []
    engine_s: list[float] = []
    statuses: list[str] = []
    try:
        for i in range(pairs + 1):
            sample = samples[i % len(samples)]
            outcome = await timed_request(target, sample, 300.0)
            local = await timed_request(engine, sample, 300.0)
            if i == 0:
                continue  # warm-up
            statuses.append(f"{outcome.status}/{local.status}")
            if outcome.status == "ok" and local.status == "ok":
                gateway_s.append(outcome.latency_s)
                engine_s.append(local.latency_s)
    finally:
        await target.close()
        await engine.close()
    if not gateway_s:
        raise RuntimeError(f"no gateway request succeeded: {statuses}")
    ratios = [g / e for g, e in zip(gateway_s, engine_s, strict=True)]
    return {
        "pairs": len(gateway_s), "statuses": statuses,
        "gateway_p50_s": statistics.median(gateway_s), "engine_p50_s": statistics.median(engine_s),
        "gateway_mean_s": statistics.fmean(gateway_s), "engine_mean_s": statistics.fmean(engine_s),
        "ratio_p50": statistics.median(gateway_s) / statistics.median(engine_s),
        "ratio_median_of_pairs": statistics.median(ratios),
        "gateway_s": gateway_s, "engine_s": engine_s,
    }  # fmt: skip


GATEWAY_VARIANTS: dict[str, dict[str, str]] = {
    "json (no timestamps)": {},
    "verbose_json (segment timestamps)": {"response_format": "verbose_json"},
    "verbose_json + words": {"response_format": "verbose_json", "timestamp_granularities[]": "word"},
}
"""``/v1/audio/transcriptions`` form fields of each timestamps variant (the first is the baseline)."""


def _in_process_variants(policy: object) -> dict[str, tuple[object, object]]:
    """In-process ``(DecodeOptions, DecodingPolicy)`` of each variant (the first is the baseline).

    The fallback is FORCED with ``logprob_threshold = 0`` (every decode counts as failed, since an
    average log-prob is never > 0), so every window walks its temperature schedule: with step 1.0
    that is exactly one re-decode at t = 1.0 (sampling, ``best_of`` 5); with the default step 0.2
    all six temperatures, the worst case a window can cost.
    """
    from whisper_build.serving.contract import DecodeOptions

    plain = DecodeOptions()
    return {
        "no fallback (temperature_increment 0)": (plain, policy.model_copy(update={"temperature_increment": 0.0})),  # type: ignore[attr-defined]
        "default policy (fallback only on failure)": (plain, policy),
        "segment timestamps": (DecodeOptions(timestamps=True), policy),
        "segment + word timestamps": (DecodeOptions(timestamps=True, word_timestamps=True), policy),
        "forced fallback, 1 re-decode (t=0 → 1.0)": (plain, policy.model_copy(update={"logprob_threshold": 0.0, "temperature_increment": 1.0})),  # type: ignore[attr-defined]
        "forced fallback, all 6 temperatures": (plain, policy.model_copy(update={"logprob_threshold": 0.0})),  # type: ignore[attr-defined]
    }  # fmt: skip


async def decoding_costs(gateway_url: str, samples: Sequence[AudioSample], rounds: int) -> dict[str, object]:
    """Latency with vs without timestamps and fallback: same files, interleaved, c = 1.

    Through the gateway: the OpenAI route with ``json``, ``verbose_json`` and ``verbose_json`` +
    word timestamps. In process (same engine and decoding layer as Triton's, no server): plain,
    timestamps, words, and a forced fallback (:func:`_in_process_variants`). Each round sends
    every file once per variant, variants interleaved; one warm-up round. Figures: p50 latency
    per variant, its ratio to the variant group's baseline, and windows decoded per window.
    """
    from benchmarks.bench.targets import InProcessTarget, OpenAITarget

    spec = TargetSpec("gateway", "openai", gateway_url)
    gateways = {name: OpenAITarget(spec, 1, form) for name, form in GATEWAY_VARIANTS.items()}
    local = InProcessTarget(TargetSpec("in_process", "in_process", IN_PROCESS_QUERY))
    variants = _in_process_variants(local.policy)
    times: dict[str, list[float]] = {name: [] for name in [*gateways, *variants]}
    decodes: dict[str, list[int]] = {name: [] for name in variants}
    errors: list[str] = []
    try:
        for r in range(rounds + 1):
            for sample in samples:
                for name, target in gateways.items():
                    outcome = await timed_request(target, sample, 300.0)
                    if outcome.status != "ok":
                        errors.append(f"{name}: {outcome.status}")
                    elif r:
                        times[name].append(outcome.latency_s)
                for name, (options, policy) in variants.items():
                    start = time.perf_counter()
                    [result] = local.decode([sample.windows], options, policy)  # type: ignore[arg-type]
                    seconds = time.perf_counter() - start
                    if isinstance(result, Exception):
                        errors.append(f"{name}: {result}")
                    elif r:
                        times[name].append(seconds)
                        decodes[name].append(sum(len(w.temperatures) for w in result))
    finally:
        for target in gateways.values():
            await target.close()
        await local.close()
    windows = sum(len(s.windows) for s in samples) * rounds

    def rows(names: list[str]) -> dict[str, dict[str, float | None]]:
        base = statistics.median(times[names[0]]) if times[names[0]] else None
        out: dict[str, dict[str, float | None]] = {}
        for name in names:
            p50 = statistics.median(times[name]) if times[name] else None
            out[name] = {
                "p50_s": p50,
                "ratio": _ratio(p50, base),
                "decodes_per_window": sum(decodes[name]) / windows if name in decodes and windows else None,
            }
        return out

    return {"rounds": rounds, "files": [s.name for s in samples], "errors": errors,
            "gateway": rows(list(gateways)), "in_process": rows(list(variants))}  # fmt: skip


async def _sweep_one(
    spec: TargetSpec, samples: Sequence[AudioSample], concurrencies: Sequence[int], plan: LevelPlan, metrics_url: str
) -> list[LevelResult]:
    target = open_target(spec, max(concurrencies))
    try:
        return await sweep(
            [target], samples, concurrencies, plan, deadline_s=1800,
            metrics_urls={spec.name: metrics_url}, warmup=2,
            on_level=lambda r: print(f"  {r.target} c={r.concurrency}: {r.ok}/{r.requests} ok, "
                                     f"p50 {r.latency_p50_s or 0:.3f} s, {r.audio_s_per_s:.1f} audio s/s, "
                                     f"batch {r.avg_batch_size}, errors {r.errors}", flush=True),
        )  # fmt: skip
    finally:
        await target.close()


async def long_audio_walls(grpc_url: str, sample: AudioSample, repeats: int = 1) -> dict[str, float]:
    """Wall seconds for the recording's windows sent to Triton in one request vs one window per request.

    (a) all in one request (split only at the model's ``max_batch_size``) and (b) one window per
    request, one after another.
    """
    from whisper_build.serving.prompt import parse_prompt
    from whisper_build.serving.transcription.triton import TritonBackend

    backend = TritonBackend(grpc_url, "whisper")
    request = WindowRequest(parse_prompt(""))
    windows = list(sample.windows)
    try:
        await backend.infer(windows[:1], request, 300)  # warm-up, reads max_batch_size
        batched, sequential = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            await backend.infer(windows, request, 600)
            batched.append(time.perf_counter() - start)
            start = time.perf_counter()
            for window in windows:
                await backend.infer([window], request, 600)
            sequential.append(time.perf_counter() - start)
    finally:
        await backend.close()
    return {"windows": len(windows), "batched_s": min(batched), "sequential_s": min(sequential)}


async def one_gateway_request(gateway_url: str, sample: AudioSample, timeout: float = 900.0) -> dict[str, object]:
    """One ``/invocations`` request with ``sample``; its status and latency."""
    target = open_target(TargetSpec("gateway", "invocations", gateway_url), 1)
    try:
        outcome = await timed_request(target, sample, timeout)
    finally:
        await target.close()
    return {"status": outcome.status, "latency_s": outcome.latency_s, "rtfx": sample.duration_s / outcome.latency_s}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if not a or not b else a / b


# ------------------------------------------------------------------ report
def main(argv: Sequence[str] | None = None) -> int:
    """Run everything once; write the artefacts; print the figures.

    Starts a real tritonserver (nvidia-pytriton wheel, CPU CTranslate2 tiny.en) and the gateway as a
    subprocess on free 127.0.0.1 ports, makes speech with espeak-ng + sox, and measures:

    1. gateway end-to-end latency ÷ in-process latency (the same engine and the Triton model's
       decoding layer called directly, same files, same windows, one request at a time), and the
       cost of timestamps and of fallback (latency with vs without, same files);
    2. throughput at concurrency 16 ÷ concurrency 1 through the gateway and straight to Triton,
       with Triton's average batch size per level;
    3. a 10-minute recording: all windows in one Triton request vs the windows one after another;
    4. gateway RSS at rest and under load;
    5. ``make synth`` wall time for the default and the three-group config.

    Writes ``<out>/reference.json``, ``<out>/reference.md`` (the figures) and the sweep's
    ``<out>/sweep.{json,csv,png}``; prints the figures. Usage::

        python -m benchmarks.reference [--out docs/benchmarks] [--duration 20] [--skip-synth]
    """
    p = argparse.ArgumentParser(description="Reference measurements (see module docstring).")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per concurrency level")
    p.add_argument("--concurrency", default="1,2,4,8,16")
    p.add_argument("--long-seconds", type=float, default=600.0, help="length of the long recording (default 10 min)")
    p.add_argument("--pairs", type=int, default=8, help="gateway/engine pairs for the latency ratio")
    p.add_argument("--cost-rounds", type=int, default=3, help="rounds of the timestamps/fallback cost comparison")
    p.add_argument("--skip-synth", action="store_true")
    args = p.parse_args(argv)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    figures: dict = {
        "command": " ".join([Path(sys.argv[0]).as_posix(), *(argv if argv is not None else sys.argv[1:])]),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine_info(),
    }
    print(json.dumps(figures["machine"], indent=1), flush=True)

    with tempfile.TemporaryDirectory(prefix="whisper-bench-") as tmp:
        print("making speech (espeak-ng + sox)…", flush=True)
        files = utterances(Path(tmp) / "utterances")
        samples = [load_sample(f) for f in files]
        long_sample = load_sample(long_recording(Path(tmp) / "long_recording.wav", args.long_seconds))
        figures["audio"] = {s.name: round(s.duration_s, 2) for s in [*samples, long_sample]}

        grpc_port, http_port, metrics_port = free_ports(3)
        settings = TritonSettings(
            http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
            engine=EngineParams(engine="ctranslate2", device="cpu", cpu_threads=CPU_THREADS),
            batching=BatchingConfig(max_batch_size=32, max_queue_delay_us=20_000, max_queue_size=128),
        )  # fmt: skip
        figures["triton_settings"] = json.loads(settings.model_dump_json())
        print("starting tritonserver (CPU tiny.en) and the gateway…", flush=True)
        plan = LevelPlan(args.duration, None, 120.0)
        with LocalTriton(settings), GatewayProcess(settings.grpc_url) as gateway:
            time.sleep(2.0)
            rest = gateway.rss_bytes()
            with PeakSampler(gateway.rss_bytes) as sampler:
                gw = asyncio.run(
                    _sweep_one(
                        TargetSpec("gateway", "invocations", gateway.url),
                        samples,
                        concurrencies,
                        plan,
                        settings.metrics_url,
                    )
                )
            after = gateway.rss_bytes()
            tr = asyncio.run(
                _sweep_one(
                    TargetSpec("triton", "triton", settings.grpc_url),
                    samples,
                    concurrencies,
                    plan,
                    settings.metrics_url,
                )
            )
            print("long recording: batched vs sequential, then through the gateway…", flush=True)
            long_walls = asyncio.run(long_audio_walls(settings.grpc_url, long_sample))
            with PeakSampler(gateway.rss_bytes) as long_sampler:
                long_gateway = asyncio.run(one_gateway_request(gateway.url, long_sample))
            print("gateway vs in-process engine, interleaved…", flush=True)
            e2e = asyncio.run(e2e_vs_engine(gateway.url, samples, args.pairs))
            print("cost of timestamps and fallback, interleaved…", flush=True)
            costs = asyncio.run(decoding_costs(gateway.url, samples, args.cost_rounds))

    write_all([*gw, *tr], {"title": "gateway vs Triton, CPU tiny.en (reference run)"}, args.out, "sweep")
    figures["e2e_vs_engine"] = e2e
    figures["decoding_costs"] = costs
    high = max(concurrencies)
    figures["throughput"] = {}
    for name, levels in (("gateway", gw), ("triton", tr)):
        by_c = {r.concurrency: r for r in levels}
        figures["throughput"][name] = {
            "high": high, "c1_audio_s_per_s": by_c[1].audio_s_per_s, "high_audio_s_per_s": by_c[high].audio_s_per_s,
            "ratio": _ratio(by_c[high].audio_s_per_s, by_c[1].audio_s_per_s),
            "c1_batch": by_c[1].avg_batch_size, "high_batch": by_c[high].avg_batch_size,
        }  # fmt: skip
    figures["levels"] = [r.as_dict() for r in [*gw, *tr]]
    figures["long_audio_s"] = long_sample.duration_s
    figures["long_audio"] = {
        **long_walls,
        "ratio": long_walls["sequential_s"] / long_walls["batched_s"],
        "gateway": long_gateway,
    }
    figures["gateway_rss"] = {
        "rest": rest, "peak_load": sampler.peak, "mean_load": sampler.mean, "after": after,
        "peak_long_request": long_sampler.peak,
    }  # fmt: skip
    figures["synth"] = {"error": "skipped (--skip-synth)"} if args.skip_synth else synth_times()
    figures["load_avg_end"] = os.getloadavg()
    figures["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    (args.out / "reference.json").write_text(json.dumps(figures, indent=2, default=str))
    markdown = render_markdown(figures)
    (args.out / "reference.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
