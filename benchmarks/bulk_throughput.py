"""Bulk jobs against the engine's floor and beside synchronous traffic: ``make bench-bulk`` (docs/benchmarks.md).

One machine, one Triton (CPU model, whisper tiny.en on CTranslate2), one corpus: by default 24 recordings of
19–84 s (``benchmarks.speech.recordings``: more files than the worker's slots, most longer than a window,
as a job archive is); ``--corpus utterances``: 6–10 s files, one short window each, where every per-file
cost shows.
Each of ``--pairs`` interleaved rounds measures, in this order:

1. **bulk**: every file uploaded (8 at a time) to the local job bucket (moto's S3 + SQS server, uploads reaching the
   queue through S3 events), one worker process with ``--files-in-flight`` slots; throughput = audio
   seconds ÷ (last status record's time − first upload's time);
2. **in-process best batch**: the same files, all at once, through the engine and the Triton model's
   decoding layer in this process (``benchmarks.bench.targets.InProcessTarget``, an ideal batcher with
   no queue delay, at most ``max_batch_size`` windows per call, the bulk jobs' options: segment timestamps);
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
from benchmarks.bench.targets import InProcessTarget, TargetSpec, open_target  # noqa: E402
from benchmarks.reference import IN_PROCESS_QUERY, GatewayProcess, machine_info  # noqa: E402
from benchmarks.speech import recordings, require_tools, utterances  # noqa: E402
from whisper_build.bulk.cli import Target  # noqa: E402
from whisper_build.bulk.demo import local_stack  # noqa: E402
from whisper_build.bulk.job import decode_options  # noqa: E402
from whisper_build.bulk.messages import JobOptions  # noqa: E402
from whisper_build.bulk.records import OUTPUT_FILES, STATUS_FILE, JobStatus  # noqa: E402
from whisper_build.serving.contract import DecodeOptions  # noqa: E402
from whisper_build.workstation.local_triton import free_ports  # noqa: E402

SYNC_CONCURRENCY = 16
BULK_OPTIONS = decode_options(JobOptions())
"""The in-process engine decodes what bulk jobs ask for (segment timestamps), so both do the same work."""
MAX_BATCH = 16
POLL_SECONDS = 0.5
FAILURE_CHECK_SECONDS = 10.0


def round_statuses(target: Target, prefix: str, expected: int, read_anyway: bool = False) -> list[JobStatus]:
    """This round's status records (under ``output/<prefix>/``) once ``expected`` jobs have their outputs.

    One ListObjectsV2 per call: the records are read only when every job has written its transcript
    (or with ``read_anyway``, to see failures, which write none); moto runs in this process, and
    reading every record at every poll took CPU from Triton.
    """
    keys = target.store.keys(f"{target.output_prefix}{prefix}/")
    done = sum(k.endswith("/" + OUTPUT_FILES["txt"]) for k in keys)
    if done < expected and not read_anyway:
        return []
    statuses = [k for k in keys if k.endswith("/" + STATUS_FILE)]
    return [record for key in statuses if (record := target.store.read_model(key, JobStatus)) is not None]


def bulk_round(target: Target, files: list[Path], prefix: str, timeout: float = 900.0) -> float:
    """Upload ``files`` under ``input/<prefix>/`` (8 at a time); seconds from the first upload to the last final status.

    The end is the newest record's ``updated_at``, so the poll's period does not change the figure; the poll
    lists this round's prefix every ``POLL_SECONDS`` (:func:`round_statuses`), and reads the records every
    ``FAILURE_CHECK_SECONDS`` in case a job failed.
    """

    def upload(path: Path) -> None:
        target.store.s3.upload_file(str(path), target.store.bucket, f"input/{prefix}/{path.name}")

    started = time.time()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(upload, files))
    deadline = time.monotonic() + timeout
    next_check = time.monotonic() + FAILURE_CHECK_SECONDS
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        check = time.monotonic() >= next_check
        next_check += FAILURE_CHECK_SECONDS if check else 0
        mine = round_statuses(target, prefix, len(files), read_anyway=check)
        assert not [r for r in mine if r.state == "failed"], [r.error for r in mine if r.error]
        if len(mine) == len(files) and all(r.final for r in mine):
            return max(r.updated_at for r in mine) - started
    raise TimeoutError(f"bulk round {prefix} did not finish in {timeout:g} s")


async def concurrent_wall(
    spec: TargetSpec, samples: list[AudioSample], concurrency: int, options: DecodeOptions | None = None
) -> float:
    """Seconds to send every sample with at most ``concurrency`` in flight (all must succeed).

    ``options``: the in-process target's per-window options (default: what ``/invocations`` sends).
    """
    target = open_target(spec, concurrency)
    if options is not None:
        assert isinstance(target, InProcessTarget)
        target.options = options
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
) -> tuple[float, bool]:
    """:func:`probe_p50` while a bulk round of ``files`` runs (started first, in a thread).

    Returns the p50 and whether the bulk round was still running when the last probe ended (else the
    probes did not all meet bulk work, and the figure says less).
    """
    bulk = asyncio.create_task(asyncio.to_thread(bulk_round, target, files, prefix))
    await asyncio.sleep(1.0)  # the worker has taken its first messages
    p50 = await probe_p50(gateway_url, sample, probes)
    overlapped = not bulk.done()
    await bulk
    return p50, overlapped


def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    """Every round; the figures as a JSON-ready dict."""
    make = recordings if args.corpus == "recordings" else utterances
    files = make(work / "corpus", count=args.files)
    samples = [load_sample(path) for path in files]
    audio_s = sum(s.duration_s for s in samples)
    probe = min(samples, key=lambda s: s.duration_s)
    engine = TargetSpec("engine", "in_process", f"{IN_PROCESS_QUERY}&max_batch={MAX_BATCH}")
    rounds: list[dict[str, float | bool]] = []
    gateway_metrics = free_ports(1)[0]  # the worker yields to this gateway's requests (bulk.yielding)
    yield_to = f"http://127.0.0.1:{gateway_metrics}/metrics" if args.yield_gate else None
    with (
        local_stack(work, workers=1, files_in_flight=args.files_in_flight, yield_to=yield_to) as stack,
        GatewayProcess(
            stack.triton.settings.grpc_url,
            settings={
                "WHISPER_GATEWAY_METRICS_PORT": str(gateway_metrics),
                # the canary waiting behind bulk batches is busy, not dead (docs/gateway.md, GET /ping)
                "WHISPER_GATEWAY_TRITON_METRICS_URL": stack.triton.settings.metrics_url,
            },
        ) as gateway,
    ):
        gateway_spec = TargetSpec("gateway", "invocations", gateway.url)
        bulk_round(stack.target, files[:2], "warm-up")
        asyncio.run(concurrent_wall(engine, samples[:2], 2, BULK_OPTIONS))
        for i in range(args.pairs):
            bulk_s = bulk_round(stack.target, files, f"round{i}")
            engine_s = asyncio.run(concurrent_wall(engine, samples, len(samples), BULK_OPTIONS))
            sync_s = asyncio.run(concurrent_wall(gateway_spec, samples, SYNC_CONCURRENCY))
            alone = asyncio.run(probe_p50(gateway.url, probe, args.probes))
            beside, overlapped = asyncio.run(
                latency_with_bulk(stack.target, files, f"busy{i}", gateway.url, probe, args.probes)
            )
            rounds.append(
                {"bulk_audio_s_per_s": audio_s / bulk_s, "engine_audio_s_per_s": audio_s / engine_s,
                 "sync_c16_audio_s_per_s": audio_s / sync_s, "probe_p50_alone_s": alone, "probe_p50_with_bulk_s": beside, "bulk_ran_through_probes": overlapped}
            )  # fmt: skip
            print(json.dumps(rounds[-1]), flush=True)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    return {
        "machine": machine_info(),
        "corpus": args.corpus, "yield_gate": args.yield_gate, "files": len(files), "audio_seconds": audio_s, "files_in_flight": args.files_in_flight, "pairs": args.pairs,
        "rounds": rounds,
        "bulk_over_engine": statistics.median(r["bulk_audio_s_per_s"] / r["engine_audio_s_per_s"] for r in rounds),
        "sync_c16_over_engine": statistics.median(r["sync_c16_audio_s_per_s"] / r["engine_audio_s_per_s"] for r in rounds),
        "p50_with_bulk_over_alone": median("probe_p50_with_bulk_s") / median("probe_p50_alone_s"),
        "medians": {key: median(key) for key in rounds[0] if key != "bulk_ran_through_probes"},
        "bulk_ran_through_probes": all(r["bulk_ran_through_probes"] for r in rounds),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point (module docstring)."""
    parser = argparse.ArgumentParser(prog="python benchmarks/bulk_throughput.py", description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--corpus",
        choices=("recordings", "utterances"),
        default="recordings",
        help="recordings: mixed 19-84 s files, a job archive's mix; utterances: 6-10 s files (one short window each)",
    )
    parser.add_argument("--files", type=int, default=24, help="files in the corpus (more than the slots: a backlog)")
    parser.add_argument("--files-in-flight", type=int, default=16, help="the worker's slots")
    parser.add_argument(
        "--no-yield-gate", dest="yield_gate", action="store_false", help="bulk does not wait for the gateway's requests"
    )
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
