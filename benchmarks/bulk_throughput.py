"""Bulk jobs against the engine's floor and beside synchronous traffic: ``make bench-bulk`` (docs/benchmarks.md).

One machine, one Triton (CPU model, whisper tiny.en on CTranslate2), one corpus of short utterances.
Each of ``--pairs`` interleaved rounds measures, in this order:

1. **bulk**: every file uploaded (8 at a time) to the local job bucket (moto's S3 + SQS server, uploads reaching the
   queue through S3 events), one worker process with ``--files-in-flight`` slots; throughput = audio
   seconds ÷ (last status record's time − first upload's time);
2. **in-process best batch**: the same files, all at once, through the engine and the Triton model's
   decoding layer in this process (``benchmarks.bench.targets.InProcessTarget``, an ideal batcher with
   no queue delay, at most ``max_batch_size`` windows per call);
3. **synchronous c=16**: the same files sent 16 at a time to the gateway's ``/invocations``;
4. **latency**: p50 of ``--probes`` short synchronous requests one after another, alone, and then while
   a bulk batch of the corpus runs (priority levels: docs/bulk.md).

Reports the medians over the rounds: bulk ÷ in-process throughput (target ≥ 0.95), synchronous c=16
throughput beside it, and p50 with bulk ÷ p50 alone (target ≤ 1.5).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench.audio import AudioSample, load_sample  # noqa: E402
from benchmarks.bench.runner import timed_request  # noqa: E402
from benchmarks.bench.targets import TargetSpec, open_target  # noqa: E402
from benchmarks.reference import IN_PROCESS_QUERY, GatewayProcess, machine_info  # noqa: E402
from benchmarks.speech import require_tools, utterances  # noqa: E402
from whisper_build.bulk.cli import Target  # noqa: E402
from whisper_build.bulk.demo import local_stack  # noqa: E402
from whisper_build.bulk.records import STATUS_FILE, JobStatus  # noqa: E402

SYNC_CONCURRENCY = 16
MAX_BATCH = 16
POLL_SECONDS = 0.5


def round_statuses(target: Target, prefix: str, expected: int) -> list[JobStatus]:
    """This round's status records (under ``output/<prefix>/``); none read before ``expected`` exist."""
    keys = [k for k in target.store.keys(f"{target.output_prefix}{prefix}/") if k.endswith("/" + STATUS_FILE)]
    if len(keys) < expected:
        return []
    return [record for key in keys if (record := target.store.read_model(key, JobStatus)) is not None]


def bulk_round(target: Target, files: list[Path], prefix: str, timeout: float = 900.0) -> float:
    """Upload ``files`` under ``input/<prefix>/`` (8 at a time); seconds from the first upload to the last final status.

    The end is the newest record's ``updated_at``, so the poll's period does not change the figure; the poll
    lists this round's prefix only, every ``POLL_SECONDS``, reading the records once all exist: moto runs
    in this process, and reading every record of every round each 0.2 s took a core from Triton.
    """

    def upload(path: Path) -> None:
        target.store.s3.upload_file(str(path), target.store.bucket, f"input/{prefix}/{path.name}")

    started = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(upload, files))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        mine = round_statuses(target, prefix, len(files))
        if len(mine) == len(files) and all(r.final for r in mine):
            assert all(r.state == "completed" for r in mine), [r.error for r in mine if r.error]
            return max(r.updated_at for r in mine) - started
    raise TimeoutError(f"bulk round {prefix} did not finish in {timeout:g} s")


async def concurrent_wall(spec: TargetSpec, samples: list[AudioSample], concurrency: int) -> float:
    """Seconds to send every sample with at most ``concurrency`` in flight (all must succeed)."""
    target = open_target(spec, concurrency)
    gate = asyncio.Semaphore(concurrency)

    async def one(sample: AudioSample) -> str:
        async with gate:
            return (await timed_request(target, sample, 600.0)).status

    try:
        started = time.perf_counter()
        results = await asyncio.gather(*(one(s) for s in samples))
        wall = time.perf_counter() - started
    finally:
        await target.close()
    assert set(results) == {"ok"}, results
    return wall


async def probe_p50(gateway_url: str, sample: AudioSample, probes: int) -> float:
    """p50 latency of ``probes`` sequential ``/invocations`` requests of ``sample``."""
    target = open_target(TargetSpec("gateway", "invocations", gateway_url), 1)
    try:
        latencies = [(await timed_request(target, sample, 300.0)).latency_s for _ in range(probes)]
    finally:
        await target.close()
    return statistics.median(latencies)


async def latency_with_bulk(
    target: Target, files: list[Path], prefix: str, gateway_url: str, sample: AudioSample, probes: int
) -> float:
    """:func:`probe_p50` while a bulk round of ``files`` runs (started first, in a thread)."""
    bulk = asyncio.create_task(asyncio.to_thread(bulk_round, target, files, prefix))
    await asyncio.sleep(1.0)  # the worker has taken its first messages
    p50 = await probe_p50(gateway_url, sample, probes)
    await bulk
    return p50


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """Every round; the figures as a JSON-ready dict."""
    files = utterances(work / "corpus", count=args.files)
    samples = [load_sample(path) for path in files]
    audio_s = sum(s.duration_s for s in samples)
    probe = min(samples, key=lambda s: s.duration_s)
    engine = TargetSpec("engine", "in_process", f"{IN_PROCESS_QUERY}&max_batch={MAX_BATCH}")
    rounds: list[dict[str, float]] = []
    with (
        local_stack(work, workers=1, files_in_flight=args.files_in_flight) as stack,
        GatewayProcess(stack.triton.settings.grpc_url) as gateway,
    ):
        gateway_spec = TargetSpec("gateway", "invocations", gateway.url)
        bulk_round(stack.target, files[:2], "warm-up")
        asyncio.run(concurrent_wall(engine, samples[:2], 2))
        for i in range(args.pairs):
            bulk_s = bulk_round(stack.target, files, f"round{i}")
            engine_s = asyncio.run(concurrent_wall(engine, samples, len(samples)))
            sync_s = asyncio.run(concurrent_wall(gateway_spec, samples, SYNC_CONCURRENCY))
            alone = asyncio.run(probe_p50(gateway.url, probe, args.probes))
            beside = asyncio.run(latency_with_bulk(stack.target, files, f"busy{i}", gateway.url, probe, args.probes))
            rounds.append(
                {"bulk_audio_s_per_s": audio_s / bulk_s, "engine_audio_s_per_s": audio_s / engine_s,
                 "sync_c16_audio_s_per_s": audio_s / sync_s, "probe_p50_alone_s": alone, "probe_p50_with_bulk_s": beside}
            )  # fmt: skip
            print(json.dumps(rounds[-1]), flush=True)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    return {
        "machine": machine_info(),
        "files": len(files), "audio_seconds": audio_s, "files_in_flight": args.files_in_flight, "pairs": args.pairs,
        "rounds": rounds,
        "bulk_over_engine": statistics.median(r["bulk_audio_s_per_s"] / r["engine_audio_s_per_s"] for r in rounds),
        "sync_c16_over_engine": statistics.median(r["sync_c16_audio_s_per_s"] / r["engine_audio_s_per_s"] for r in rounds),
        "p50_with_bulk_over_alone": median("probe_p50_with_bulk_s") / median("probe_p50_alone_s"),
        "medians": {key: median(key) for key in rounds[0]},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point (module docstring)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/bulk_throughput.py", description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--files", type=int, default=16, help="utterances in the corpus (6-10 s each)")
    parser.add_argument("--files-in-flight", type=int, default=16, help="the worker's slots")
    parser.add_argument("--probes", type=int, default=6, help="short synchronous requests per latency figure")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "benchmarks" / "bulk.json")
    args = parser.parse_args(argv)
    require_tools()
    with tempfile.TemporaryDirectory(prefix="whisper-bench-bulk-") as tmp:
        figures = run(args, Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    print(
        f"bulk ÷ in-process best batch: {figures['bulk_over_engine']:.3f} (target ≥ 0.95); "
        f"synchronous c=16 ÷ in-process: {figures['sync_c16_over_engine']:.3f}; "
        f"p50 with bulk ÷ alone: {figures['p50_with_bulk_over_alone']:.3f} (target ≤ 1.5); {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
