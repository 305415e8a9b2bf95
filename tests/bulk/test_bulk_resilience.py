"""Long files never lose work: SIGTERM returns the message at once, SIGKILL resumes from the checkpoint
(no window computed twice beyond it, no segment duplicated or missing), a continuation message before
the (fake, small) visibility limit, and transient Triton failures retried into the dead-letter queue.

Real moto S3 + SQS server, real worker processes, the real Triton model on the CPU; the transient
failure uses the real worker, queue and store with a backend that fails like an unreachable Triton.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import speech_samples as samples
from bulk_support import (
    checkpoint_of,
    final_statuses,
    new_job_path,
    output_segments,
    reference_segments,
    stop,
    triton_windows,
    wait_until,
    worker_env,
)
from long_audio import sparse_speech_flac
from slow_engine import wait_until_idle

from whisper_build.bulk.demo import start_worker
from whisper_build.bulk.local import LocalAws
from whisper_build.bulk.records import JobStatus
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.worker import Worker, window_plan
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import BackendUnavailable, ServedModel
from whisper_build.serving.transcription.windows import Transcriber, WindowRequest

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

SENTENCE = "The museum opens at nine o'clock on Sundays and closes early in winter."


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> Path:
    return samples.speak(SENTENCE, tmp_path_factory.mktemp("speech") / "sentence.wav")


def queue_visible(target) -> bool:
    return target.queue.counts()["visible"] == 1


@pytest.mark.slow
def test_sigterm_returns_the_message_and_sigkill_resumes_from_the_checkpoint(
    local_aws, slow_triton_server, speech, tmp_path
) -> None:
    triton_server, control = slow_triton_server  # delay 0: its call log tells when the engine is idle
    path, target = new_job_path(local_aws.endpoint_url, visibility_timeout_seconds=30)
    audio = sparse_speech_flac(speech, minutes=8, every_minutes=1)  # 8 windows with speech, 8 of noise floor
    env = worker_env(
        path, triton_server.settings.grpc_url, tmp_path,
        window_group_size=1, checkpoint_every_groups=2, visibility_timeout_seconds=30, heartbeat_seconds=3,
    )  # fmt: skip
    key = "input/long.flac"
    target.store.s3.upload_file(str(audio), target.store.bucket, key)
    metrics = triton_server.settings.metrics_url

    # SIGTERM: the worker stops at a window-group boundary and returns the message (visibility 0)
    first = start_worker(env, tmp_path / "first.log")
    wait_until(lambda: (c := checkpoint_of(target, key)) and c.groups >= 2, 180, "a first checkpoint")
    first.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_until(lambda: queue_visible(target), 20, "the message visible again", poll=0.2)
    assert time.monotonic() - signalled < 15  # far sooner than the 30 s visibility timeout
    assert first.wait(60) == 0, (tmp_path / "first.log").read_text()[-2000:]

    # SIGKILL in the middle: nothing is returned; the message reappears after its visibility timeout
    second = start_worker(env, tmp_path / "second.log")
    wait_until(lambda: (c := checkpoint_of(target, key)) and c.groups >= 4, 180, "a later checkpoint")
    stop(second, signal.SIGKILL)
    # the killed worker's Triton call in flight finishes on the server (engine idle, nothing queued)
    wait_until_idle(control, triton_metrics=metrics)
    resume_at = checkpoint_of(target, key)
    assert resume_at is not None and 0 < resume_at.windows < 8
    windows_before = triton_windows(metrics)

    third = start_worker(env, tmp_path / "third.log")
    records = wait_until(final_statuses(target, 1), 240, "the long file completed")
    assert stop(third) == 0
    assert isinstance(records, dict)
    status = records[key]
    assert (status.state, status.windows) == ("completed", 8)
    # the successor sent exactly the windows after the checkpoint
    assert triton_windows(metrics) - windows_before == 8 - resume_at.windows
    segments = output_segments(target, status)
    assert len({start for start, _, _ in segments}) == len(segments)  # none duplicated
    assert segments == reference_segments(triton_server, audio)  # none missing: an uninterrupted run's


def test_continuation_message_before_the_visibility_limit(local_aws, triton_server, speech, tmp_path) -> None:
    path, target = new_job_path(local_aws.endpoint_url)
    audio = sparse_speech_flac(speech, minutes=3, every_minutes=1)
    # a 6-second "12-hour limit" whose 5-second margin is reached after the first window group
    env = worker_env(
        path, triton_server.settings.grpc_url, tmp_path,
        window_group_size=1, checkpoint_every_groups=100, visibility_timeout_seconds=4, heartbeat_seconds=2,
        max_total_visibility_seconds=6, continuation_margin_seconds=5,
    )  # fmt: skip
    key = "input/three-minutes.flac"
    target.store.s3.upload_file(str(audio), target.store.bucket, key)
    windows_before = triton_windows(triton_server.settings.metrics_url)
    worker = start_worker(env, tmp_path / "worker.log")
    records = wait_until(final_statuses(target, 1), 240, "the file completed")
    assert stop(worker) == 0
    assert isinstance(records, dict)
    status = records[key]
    assert status.state == "completed" and status.continuations >= 1, status
    # each continuation resumed at its checkpoint: every window computed once
    assert triton_windows(triton_server.settings.metrics_url) - windows_before == status.windows == 3
    assert target.queue.counts() == {"visible": 0, "in_flight": 0, "delayed": 0}  # originals deleted
    assert output_segments(target, status) == reference_segments(triton_server, audio)


class UnreachableTriton:
    """A backend whose model calls fail as they do while Triton restarts (UNAVAILABLE)."""

    async def served_model(self, timeout: float) -> ServedModel:
        return ServedModel(name="whisper", max_batch_size=16)

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        raise BackendUnavailable("Triton is unavailable: failed to connect to all addresses")

    async def reload(self, timeout: float) -> None:
        return None

    async def close(self) -> None:
        return None


def test_transient_failures_are_retried_then_dead_lettered(local_aws, speech, tmp_path) -> None:
    path, target = new_job_path(local_aws.endpoint_url, max_receive_count=2)
    target.store.s3.upload_file(str(speech), target.store.bucket, "input/sentence.wav")
    settings = WorkerSettings(
        queue_url=path.queue_url, bucket=path.bucket, endpoint_url=path.endpoint_url,
        scratch_dir=str(tmp_path), retry_base_seconds=0, receive_wait_seconds=1,
    )  # fmt: skip

    async def work_until_dead_lettered() -> int:
        from whisper_build.bulk.aws import JobQueue, JobStore, clients
        from whisper_build.bulk.job import JobRunner
        from whisper_build.bulk.outcome import Outcome

        s3, sqs = clients(path.region, path.endpoint_url)
        queue = JobQueue(sqs, path.queue_url)
        runner = JobRunner(
            settings, JobStore(s3, path.bucket), queue, Transcriber(UnreachableTriton(), window_plan(settings))
        )
        worker = Worker(settings, runner, queue)
        retried = 0
        for _ in range(6):  # the notification's s3:TestEvent, then the job's receives
            messages = await asyncio.to_thread(queue.receive_many, 1, 1, 30)
            if not messages:
                break
            retried += await worker.handle(messages[0]) is Outcome.RETRIED
        return retried

    assert asyncio.run(work_until_dead_lettered()) == 2  # maxReceiveCount receives, then SQS moves it
    assert target.dead_letter is not None
    assert target.dead_letter.counts()["visible"] == 1
    assert target.queue.counts() == {"visible": 0, "in_flight": 0, "delayed": 0}
    records = wait_until(lambda: {s.key: s for s in target_statuses(target)}, 10, "a status")
    assert isinstance(records, dict)
    status = records["input/sentence.wav"]
    assert (status.state, status.attempts) == ("retrying", 2)
    assert status.error is not None and status.error.reason == "backend_error" and status.error.retryable
    assert "unavailable" in status.error.message


def target_statuses(target) -> list[JobStatus]:
    from whisper_build.bulk.cli import statuses

    return statuses(target)
