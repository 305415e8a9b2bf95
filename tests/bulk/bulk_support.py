"""Helpers of the bulk tests: a local job path per test, worker processes, waiting on status records."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from whisper_build.bulk.cli import Target, latest_per_input, statuses
from whisper_build.bulk.demo import local_target
from whisper_build.bulk.local import JobPath, provision
from whisper_build.bulk.records import CHECKPOINT_FILE, Checkpoint, JobStatus
from whisper_build.paths import REPO_ROOT
from whisper_build.serving.audio import open_audio_file
from whisper_build.serving.contract import SCHEDULER_STEP_ROWS, DecodeOptions
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.serving.transcription.windows import Transcriber

_BUCKETS = itertools.count()


def new_job_path(endpoint_url: str, **options: int) -> tuple[JobPath, Target]:
    """A fresh bucket + queue + DLQ (unique names) on the local endpoint, and a :class:`Target` on them."""
    path = provision(endpoint_url, bucket=f"jobs-{os.getpid()}-{next(_BUCKETS)}", **options)
    return path, local_target(path)


def worker_env(path: JobPath, triton_grpc: str, scratch: Path, **settings: object) -> dict[str, str]:
    """Environment of a worker process: the job path, Triton, scratch dir and ``WHISPER_BULK_<NAME>`` overrides."""
    env = {**os.environ, **path.environment(), "PYTHONPATH": str(REPO_ROOT)}
    env |= {"WHISPER_BULK_TRITON_URL": triton_grpc, "WHISPER_BULK_SCRATCH_DIR": str(scratch)}
    env |= {"WHISPER_BULK_RECEIVE_WAIT_SECONDS": "1", "WHISPER_BULK_RETRY_BASE_SECONDS": "1"}
    env |= {f"WHISPER_BULK_{name.upper()}": str(value) for name, value in settings.items()}
    return env


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 60) -> int:
    """Signal the worker and wait for its exit status."""
    if process.poll() is None:
        process.send_signal(sig)
    return process.wait(timeout)


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait in the event loop until ``condition()`` holds (a busy machine gets ``timeout`` seconds)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def wait_until(predicate: Callable[[], object], timeout: float, what: str, poll: float = 0.5) -> object:
    """Poll ``predicate`` until it returns something truthy (returned), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def final_statuses(target: Target, expected: int) -> Callable[[], dict[str, JobStatus] | None]:
    """Predicate: every one of ``expected`` inputs has a final status (input key → status)."""

    def check() -> dict[str, JobStatus] | None:
        records = latest_per_input(statuses(target))
        return records if sum(r.final for r in records.values()) >= expected else None

    return check


def checkpoint_of(target: Target, key: str) -> Checkpoint | None:
    """The checkpoint of the (only) job of input ``key``, if written yet."""
    records = latest_per_input(statuses(target))
    if key not in records:
        return None
    status = records[key]
    prefix = f"{target.output_prefix}{key[len(target.input_prefix) :]}/{status.job_id}/"
    return target.store.read_model(prefix + CHECKPOINT_FILE, Checkpoint)


def triton_windows(metrics_url: str) -> int:  # metrics_url: http://host:port/metrics
    """Windows the ``whisper`` model has decoded (its scheduler's rows, ``contract.SCHEDULER_STEP_ROWS``)."""
    import httpx

    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith(SCHEDULER_STEP_ROWS + "{") and 'model="whisper"' in line
    )


def silent_hours_flac(speech: Path, hours: int) -> Path:
    """``hours`` of digital silence with the clip ``speech`` at the start and in the last minute; 16 kHz mono FLAC.

    Cached in the temp dir like :mod:`long_audio`; FLAC stores silence in a few hundred kB per hour,
    so the file is small to upload while its decode covers the whole duration.
    """
    import numpy as np
    import soundfile
    from long_audio import _cached, _write_flac

    clip, rate = soundfile.read(speech, dtype="float32")
    assert rate == 16_000, "the clip must be 16 kHz"
    path, ready = _cached(f"silence-{hours}h-{len(clip)}-{rate}hz.flac")
    if ready:
        return path
    minutes = hours * 60

    def blocks():  # noqa: ANN202
        for minute in range(minutes):
            block = np.zeros(rate * 60, dtype=np.float32)
            if minute in (0, minutes - 1):
                block[: len(clip)] = clip[: len(block)]
            yield block

    return _write_flac(path, rate, blocks())


def reference_segments(triton_server, path: Path) -> list[tuple[float, float, str]]:
    """The synchronous pipeline's segments of ``path`` (gateway window plan, one uninterrupted run)."""

    async def run() -> list[tuple[float, float, str]]:
        backend = TritonBackend(triton_server.settings.grpc_url, "whisper")
        transcriber = Transcriber(backend, GatewaySettings().requests.window_plan())
        try:
            with open_audio_file(path) as stream:
                result = await transcriber.transcribe(stream, WindowRequest(options=DecodeOptions(timestamps=True)))
        finally:
            await backend.close()
        return [(round(s.start, 3), round(s.end, 3), s.text) for s in result.segments]

    return asyncio.run(run())


def output_segments(target, status: JobStatus) -> list[tuple[float, float, str]]:
    """The segments of a finished job's ``verbose_json`` output."""
    body = target.store.s3.get_object(Bucket=target.store.bucket, Key=status.outputs["verbose_json"])["Body"].read()
    return [(s["start"], s["end"], s["text"]) for s in json.loads(body)["segments"]]
