"""What the worker does around a job when S3 or SQS calls fail or are slow (whisper_build.bulk.worker, job, aws).

Fakes over the boto3 calls: each test makes one call fail or block at a chosen moment.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from prometheus_client import REGISTRY

from whisper_build.bulk.aws import JobStore, ObjectInfo, Received
from whisper_build.bulk.job import JobRunner
from whisper_build.bulk.messages import JobMessage
from whisper_build.bulk.outcome import Lifeline, Outcome
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.worker import Worker


def failures(reason: str) -> float:
    return REGISTRY.get_sample_value("whisper_bulk_failures_total", {"reason": reason}) or 0.0


class SlowHeartbeatQueue:
    """set_visibility over a list; a heartbeat's extension (seconds > 0) blocks until ``release`` is set."""

    def __init__(self) -> None:
        self.in_flight = threading.Event()
        self.release = threading.Event()
        self.landed: list[int] = []  # the visibility of each call, in the order the calls completed

    def set_visibility(self, receipt: str, seconds: int) -> None:
        if seconds > 0:
            self.in_flight.set()
            assert self.release.wait(10)
        self.landed.append(seconds)

    def delete(self, receipt: str) -> None:
        self.landed.append(-1)


class ReturningRunner:
    """run() waits until the heartbeat's call is out, then returns the message (a drain's checkpoint)."""

    def __init__(self, queue: SlowHeartbeatQueue) -> None:
        self.queue = queue

    async def run(self, job: JobMessage, life: Lifeline) -> Outcome:
        await asyncio.to_thread(self.queue.in_flight.wait, 10)
        threading.Timer(0.3, self.queue.release.set).start()  # the extension lands after run() returned
        return Outcome.RETURNED

    async def renew(self, life: Lifeline, seconds: float | None = None) -> None:
        return None


def test_a_heartbeat_in_flight_lands_before_the_message_goes_back() -> None:
    """Else the late extension would hide a returned message for a whole visibility timeout."""
    settings = WorkerSettings(queue_url="q", bucket="b", heartbeat_seconds=0.05, visibility_timeout_seconds=30)
    queue = SlowHeartbeatQueue()
    worker = Worker(settings, runner=ReturningRunner(queue), queue=queue)  # type: ignore[arg-type]
    body = JobMessage(bucket="jobs", key="input/a.wav").to_body()
    outcome = asyncio.run(asyncio.wait_for(worker.handle(Received(body, "r", "id", 1)), 20))
    assert outcome is Outcome.RETURNED
    assert queue.landed == [30, 0]  # the extension, then visibility 0 last: the message is visible now


class FailingStatusStore(JobStore):
    """The input exists; reading its status record fails with an S3 error (throttled)."""

    def __init__(self) -> None:
        super().__init__(s3=None, bucket="b")  # type: ignore[arg-type]

    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None:
        return ObjectInfo(size=1000, etag="e", version_id=None)

    def read_model(self, key, model):  # type: ignore[no-untyped-def]
        raise ClientError({"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}, "GetObject")


def test_an_s3_error_reading_the_job_state_is_a_storage_error_retried() -> None:
    settings = WorkerSettings(queue_url="q", bucket="b")
    runner = JobRunner(settings, FailingStatusStore(), queue=None, transcriber=None)  # type: ignore[arg-type]
    before = failures("storage_error"), failures("internal_error")
    life = Lifeline(Received("{}", "r", "id", 1))
    outcome = asyncio.run(runner.run(JobMessage(bucket="jobs", key="input/a.wav"), life))
    assert outcome is Outcome.RETRIED
    assert failures("storage_error") == before[0] + 1
    assert failures("internal_error") == before[1]


class Body:
    """A GetObject body: chunks, and whether it was closed (its connection back in the pool)."""

    def __init__(self) -> None:
        self.closed = False

    def iter_chunks(self, size: int):  # type: ignore[no-untyped-def]
        yield b"RIFF"

    def close(self) -> None:
        self.closed = True


class OneObject:
    def __init__(self) -> None:
        self.body = Body()

    def get_object(self, **kwargs):  # type: ignore[no-untyped-def]
        return {"Body": self.body}


def test_a_download_that_cannot_write_closes_the_stream(tmp_path: Path) -> None:
    s3 = OneObject()
    store = JobStore(s3, "b")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        store.download("input/a.wav", ObjectInfo(4, "e", None), tmp_path / "gone" / "a.input")
    assert s3.body.closed
