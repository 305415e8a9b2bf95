"""Bulk jobs against the engine's floor and beside synchronous traffic: ``make bench-bulk`` (docs/benchmarks.md).

Entry point: :func:`main` (the details, in its docstring).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.bench.audio import AudioSample, load_sample
from benchmarks.bench.runner import timed_request
from benchmarks.bench.targets import InProcessTarget, TargetSpec, open_target
from benchmarks.reference import IN_PROCESS_QUERY
from benchmarks.reference_machine import machine_info
from benchmarks.speech import recordings, require_tools, utterances
from whisper_build.bulk.cli import Target, submit
from whisper_build.bulk.demo import (
    LocalStack,
    local_stack,
    local_target,
    start_worker,
    stop_worker,
    worker_environment,
)
from whisper_build.bulk.job import decode_options
from whisper_build.bulk.local import JobPath, provision
from whisper_build.bulk.messages import JobOptions
from whisper_build.bulk.records import STATUS_FILE, JobStatus
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.contract import DecodeOptions
from whisper_build.workstation.local_triton import free_ports
from whisper_build.workstation.process import GatewayProcess
from whisper_build.workstation.process import wait_until_ready as wait_until_ok

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import NotificationConfigurationTypeDef

SYNC_CONCURRENCY = 16
BULK_OPTIONS = decode_options(JobOptions())
"""The in-process engine decodes what bulk jobs ask for (segment timestamps), so both do the same work."""
MAX_BATCH = 16
POLL_SECONDS = 0.5
READY_SECONDS = 60.0


def round_statuses(target: Target, prefix: str) -> list[JobStatus]:
    """This round's status records (under ``output/<prefix>/``)."""
    keys = target.store.keys(f"{target.output_prefix}{prefix}/")
    statuses = [k for k in keys if k.endswith("/" + STATUS_FILE)]
    return [record for key in statuses if (record := target.store.read_model(key, JobStatus)) is not None]


def stage(target: Target, files: list[Path], prefixes: list[str]) -> None:
    """Store ``files`` under ``input/<prefix>/`` for every prefix, with the bucket's notification off, so they are an archive.

    A job archive is already in its bucket when its jobs are submitted (``make submit SRC=s3://…``, no S3
    events for objects that exist); staging it before the rounds keeps the uploads' CPU — moto runs in this
    process — out of the throughput figure, as S3 takes none of a GPU node's CPU. The notification is put back
    as it was.
    """
    s3 = target.store.s3
    answer = s3.get_bucket_notification_configuration(Bucket=target.store.bucket)
    notification: NotificationConfigurationTypeDef = {"QueueConfigurations": answer.get("QueueConfigurations", [])}
    s3.put_bucket_notification_configuration(Bucket=target.store.bucket, NotificationConfiguration={})
    try:
        uploads = [(path, f"{target.input_prefix}{prefix}/{path.name}") for prefix in prefixes for path in files]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda job: s3.upload_file(str(job[0]), target.store.bucket, job[1]), uploads))
    finally:
        s3.put_bucket_notification_configuration(Bucket=target.store.bucket, NotificationConfiguration=notification)


def bulk_round(target: Target, expected: int, prefix: str, timeout: float = 900.0) -> float:
    """Submit the staged ``input/<prefix>/`` (:func:`stage`); seconds from the first job message to the last final status.

    Jobs go in as ``make submit SRC=s3://…`` sends them (:func:`whisper_build.bulk.cli.submit`, one message per
    object). The end is the newest record's ``updated_at``, so the poll's period does not change the figure.
    The poll asks the queue every ``POLL_SECONDS`` whether any message is left (GetQueueAttributes; a job's
    message is deleted after its final status is written) and reads the records only then: moto runs in this
    process, and listing the bucket at every poll took 2–3 of the 4.4–5.6 CPU seconds moto spent in a round.
    """
    started = time.time()
    submitted = submit(target, f"s3://{target.store.bucket}/{target.input_prefix}{prefix}/", JobOptions())
    assert submitted == expected, f"{prefix}: {submitted} objects staged, {expected} expected"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        if any(target.queue.counts().values()):
            continue
        mine = round_statuses(target, prefix)
        assert not [r for r in mine if r.state == "failed"], [r.error for r in mine if r.error]
        if len(mine) == expected and all(r.final for r in mine):
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
    target: Target, expected: int, prefix: str, gateway_url: str, sample: AudioSample, probes: int
) -> tuple[float, bool]:
    """:func:`probe_p50` while a bulk round of the staged ``prefix`` runs (started first, in a thread).

    Returns the p50 and whether the bulk round was still running when the last probe ended (else the
    probes did not all meet bulk work, and the figure says less).
    """
    bulk = asyncio.create_task(asyncio.to_thread(bulk_round, target, expected, prefix))
    await asyncio.sleep(1.0)  # the worker has taken its first messages
    p50 = await probe_p50(gateway_url, sample, probes)
    overlapped = not bulk.done()
    await bulk
    return p50, overlapped


@contextmanager
def worker(stack: LocalStack, path: JobPath, work: Path, files_in_flight: int, yield_to: str | None) -> Iterator[None]:
    """A bulk worker process on the job path ``path``, ready (``/ready``: Triton answered) before anything is sent.

    ``yield_to`` unset: a worker of the Triton's own, as bulk pods run on the cluster (throughput rounds);
    set: a worker sharing the Triton with that gateway (latency rounds: it yields, and keeps at most half a
    batch at Triton, ``whisper_build.bulk.admission``). Each has its own queue, so each takes only its rounds.
    """
    port = free_ports(1)[0]
    env = worker_environment(path, stack.triton.settings.grpc_url, work, files_in_flight, yield_to)
    env["WHISPER_BULK_HTTP_PORT"] = str(port)
    log = work / f"worker-{path.bucket}.log"
    process = start_worker(env, log)
    try:
        wait_until_ok(f"http://127.0.0.1:{port}/ready", process, READY_SECONDS, f"the bulk worker (log: {log})")
        yield
    finally:
        stop_worker(process)


def _figures(args: argparse.Namespace, files: list[Path], audio_s: float, rounds: list[dict]) -> dict[str, object]:
    """The run's figures: every round, then the medians and ratios over them."""

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
    slots = args.files_in_flight
    with (
        local_stack(work, workers=0, files_in_flight=slots) as stack,
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
        shared_path = provision(stack.path.endpoint_url, bucket="whisper-bulk-shared")
        shared = local_target(shared_path)
        stage(stack.target, files[:2], ["warm-up"])
        stage(stack.target, files, [f"round{i}" for i in range(args.pairs)])
        stage(shared, files, [f"busy{i}" for i in range(args.pairs)])
        own_worker = worker(stack, stack.path, work, slots, None)
        shared_worker = worker(stack, shared_path, work, slots, yield_to)
        with own_worker, shared_worker:
            bulk_round(stack.target, 2, "warm-up")
            asyncio.run(concurrent_wall(engine, samples[:2], 2, BULK_OPTIONS))
            for i in range(args.pairs):
                bulk_s = bulk_round(stack.target, len(files), f"round{i}")
                engine_s = asyncio.run(concurrent_wall(engine, samples, len(samples), BULK_OPTIONS))
                sync_s = asyncio.run(concurrent_wall(gateway_spec, samples, SYNC_CONCURRENCY))
                alone = asyncio.run(probe_p50(gateway.url, probe, args.probes))
                beside, overlapped = asyncio.run(
                    latency_with_bulk(shared, len(files), f"busy{i}", gateway.url, probe, args.probes)
                )
                rounds.append(
                    {"bulk_audio_s_per_s": audio_s / bulk_s, "engine_audio_s_per_s": audio_s / engine_s,
                     "sync_c16_audio_s_per_s": audio_s / sync_s, "probe_p50_alone_s": alone, "probe_p50_with_bulk_s": beside, "bulk_ran_through_probes": overlapped}
                )  # fmt: skip
                print(json.dumps(rounds[-1]), flush=True)

    return _figures(args, files, audio_s, rounds)


def main(argv: list[str] | None = None) -> int:
    """Entry point (module docstring).

    One machine, one Triton (CPU model, whisper tiny.en on CTranslate2), one corpus: by default 24 recordings of
    19–84 s (``benchmarks.speech.recordings``: more files than the worker's slots, most longer than a window,
    as a job archive is); ``--corpus utterances``: 6–10 s files, one short window each, where every per-file
    cost shows.
    Each of ``--pairs`` interleaved rounds measures, in this order:

    1. **bulk**: every file staged beforehand in the local job bucket (moto's S3 + SQS server; :func:`stage`: an
       archive already in S3), then submitted as ``make submit SRC=s3://…`` does (one job message per object),
       one worker process with ``--files-in-flight`` slots, of the Triton's own as on the cluster (no gateway to
       yield to); throughput = audio seconds ÷ (last status record's time − the first message's time);
    2. **in-process best batch**: the same files, all at once, through the engine and the Triton model's
       decoding layer in this process (``benchmarks.bench.targets.InProcessTarget``, an ideal batcher with
       no queue delay, at most ``max_batch_size`` windows per call, the bulk jobs' options: segment timestamps);
    3. **synchronous c=16**: the same files sent 16 at a time to the gateway's ``/invocations``;
    4. **latency**: p50 of ``--probes`` short synchronous requests one after another, alone, and then while
       a bulk batch of the corpus runs on a worker sharing the Triton with the gateway (priority levels, the
       yield gate and half a batch at Triton at most: docs/bulk.md).

    Reports the medians over the rounds: bulk ÷ in-process throughput (target ≥ 0.95), synchronous c=16
    throughput beside it, and p50 with bulk ÷ p50 alone (target ≤ 1.5).
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bulk_throughput", description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--corpus",
        choices=("recordings", "utterances"),
        default="recordings",
        help="recordings: mixed 19-84 s files, a job archive's mix; utterances: 6-10 s files (one short window each)",
    )
    parser.add_argument("--files", type=int, default=24, help="files in the corpus (more than the slots: a backlog)")
    parser.add_argument(
        "--files-in-flight",
        type=int,
        default=24,
        help="the worker's slots (24: with 1-3 windows a file, two batches at Triton and the next one ready)",
    )
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
