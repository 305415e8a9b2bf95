"""The worker's one receiver and its drain (whisper_build.bulk.worker).

Real moto server (127.0.0.1) for ReceiveMessage; queues over lists for the receiver's and the drain's logic.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from bulk_support import until

from whisper_build.bulk.aws import JobQueue, Received, clients
from whisper_build.bulk.job import Lifeline, Outcome
from whisper_build.bulk.local import LocalAws, provision
from whisper_build.bulk.messages import JobMessage
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.worker import Worker, window_plan
from whisper_build.serving.transcription.backend import ServedModel


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


@pytest.mark.integration
def test_receive_many_takes_up_to_the_limit_in_one_call(local_aws) -> None:
    path = provision(local_aws.endpoint_url, bucket="receiver-many")
    _, sqs = clients(path.region, path.endpoint_url)
    queue = JobQueue(sqs, path.queue_url)
    sqs.purge_queue(QueueUrl=path.queue_url)  # the notification's s3:TestEvent
    for n in range(5):
        queue.send(json.dumps({"n": n}))
    first = queue.receive_many(3, 1, 30)
    rest = queue.receive_many(10, 1, 30)
    assert len(first) == 3
    assert sorted(json.loads(m.body)["n"] for m in first + rest) == [0, 1, 2, 3, 4]
    assert all(m.receive_count == 1 and m.sent_at > 0 for m in first + rest)


class ListQueue:
    """JobQueue's receiving side over a list; records each call's limit."""

    def __init__(self, count: int) -> None:
        self.waiting = [Received(f"m{n}", f"r{n}", f"id{n}", 1) for n in range(count)]
        self.limits: list[int] = []
        self.returned: list[str] = []

    def receive_many(self, limit: int, wait_seconds: int, visibility_seconds: int) -> list[Received]:
        self.limits.append(limit)
        taken, self.waiting = self.waiting[:limit], self.waiting[limit:]
        if not taken:
            time.sleep(0.05)
        return taken

    def set_visibility(self, receipt: str, seconds: int) -> None:
        self.returned.append(receipt)

    def counts(self) -> dict[str, int]:
        return {"visible": len(self.waiting), "in_flight": 0, "delayed": 0}


class HeldWorker(Worker):
    """A worker whose jobs run until ``release`` is set; records the most jobs at once."""

    def __init__(self, settings: WorkerSettings, queue: ListQueue) -> None:
        super().__init__(settings, runner=None, queue=queue)  # type: ignore[arg-type]
        self.release = asyncio.Event()
        self.most = 0
        self.done: list[str] = []

    async def handle(self, received: Received) -> Outcome | None:
        self.most = max(self.most, len(self.jobs))
        await self.release.wait()
        self.done.append(received.message_id)
        return Outcome.COMPLETED


def test_one_receiver_asks_for_the_free_slots_only() -> None:
    settings = WorkerSettings(queue_url="q", bucket="b", files_in_flight=3, receive_wait_seconds=0)
    queue = ListQueue(7)

    async def scenario() -> HeldWorker:
        worker = HeldWorker(settings, queue)
        receiver = asyncio.create_task(worker._receive())
        await until(lambda: len(worker.jobs) == 3)
        assert queue.limits == [3]  # one call filled every slot
        await asyncio.sleep(0.3)
        assert queue.limits == [3]  # all slots busy: no receive at all
        worker.release.set()
        await until(lambda: len(worker.done) == 7)
        worker.stop()
        await asyncio.wait_for(receiver, 5)
        return worker

    worker = asyncio.run(scenario())
    assert worker.most == 3
    assert all(limit <= 3 for limit in queue.limits)
    assert sorted(worker.done) == sorted(f"id{n}" for n in range(7))


def test_messages_received_after_the_drain_began_go_back_at_once() -> None:
    settings = WorkerSettings(queue_url="q", bucket="b", files_in_flight=2, receive_wait_seconds=0)
    queue = ListQueue(2)

    async def scenario() -> HeldWorker:
        worker = HeldWorker(settings, queue)
        original = queue.receive_many

        def receive_then_drain(limit: int, wait: int, visibility: int) -> list[Received]:
            taken = original(limit, wait, visibility)
            worker.draining.set()  # SIGTERM while the poll was out
            return taken

        queue.receive_many = receive_then_drain  # type: ignore[method-assign]
        await asyncio.wait_for(worker._receive(), 5)
        return worker

    worker = asyncio.run(scenario())
    assert queue.returned == ["r0", "r1"] and not worker.jobs


class PollingQueue(ListQueue):
    """A ListQueue whose receives are long polls of ``poll_seconds`` (taking the messages at the end)."""

    def __init__(self, count: int, poll_seconds: float) -> None:
        super().__init__(count)
        self.poll_seconds = poll_seconds

    def receive_many(self, limit: int, wait_seconds: int, visibility_seconds: int) -> list[Received]:
        self.limits.append(limit)
        time.sleep(self.poll_seconds)
        taken, self.waiting = self.waiting[:limit], self.waiting[limit:]
        return taken


class StuckRunner:
    """The JobRunner side of Worker.run and handle: Triton answers, every job runs until cancelled."""

    def __init__(self, settings: WorkerSettings) -> None:
        self.transcriber = SimpleNamespace(backend=self, plan=window_plan(settings))
        self.started: list[str] = []

    async def served_model(self, timeout: float) -> ServedModel:
        return ServedModel(name="whisper", max_batch_size=8)

    async def run(self, job: JobMessage, life: Lifeline) -> Outcome:
        self.started.append(life.received.message_id)
        await asyncio.Event().wait()
        raise AssertionError("not cancelled")


def drain_settings(**values: object) -> WorkerSettings:
    return WorkerSettings(queue_url="q", bucket="b", receive_wait_seconds=1, **values)  # type: ignore[arg-type]


def test_a_poll_out_when_the_drain_time_ends_still_returns_its_messages() -> None:
    settings = drain_settings(files_in_flight=2, drain_seconds=0.1)
    queue = PollingQueue(0, poll_seconds=1.0)

    async def scenario() -> int:
        worker = Worker(settings, StuckRunner(settings), queue)  # type: ignore[arg-type]
        run = asyncio.create_task(worker.run())
        await until(lambda: len(queue.limits) == 1)  # the poll is out
        queue.waiting.append(Received("m", "r-late", "id-late", 1))  # arrives during the poll
        worker.stop()
        return await asyncio.wait_for(run, 30)

    assert asyncio.run(scenario()) == 0
    assert queue.returned == ["r-late"]  # visible again at once, not after the visibility timeout


def test_a_job_busy_past_the_drain_time_is_cancelled_and_its_message_returned() -> None:
    settings = drain_settings(files_in_flight=2, drain_seconds=0.3)
    body = JobMessage(bucket="bkt", key="in/a.wav").to_body()
    queue = PollingQueue(0, poll_seconds=0.05)
    queue.waiting = [Received(body, "r-busy", "id-busy", 1)]
    runner = StuckRunner(settings)

    async def scenario() -> tuple[int, float]:
        worker = Worker(settings, runner, queue)  # type: ignore[arg-type]
        run = asyncio.create_task(worker.run())
        await until(lambda: runner.started == ["id-busy"])
        worker.stop()
        stopped = time.monotonic()
        code = await asyncio.wait_for(run, 30)
        return code, time.monotonic() - stopped

    code, drain = asyncio.run(scenario())
    assert code == 0 and drain >= settings.drain_seconds  # it waited the drain time for the job first
    assert queue.returned == ["r-busy"]


def test_a_message_that_cannot_be_returned_does_not_keep_the_others_back() -> None:
    settings = WorkerSettings(queue_url="q", bucket="b", files_in_flight=3, receive_wait_seconds=0)
    queue = ListQueue(3)
    returned, received = queue.set_visibility, queue.receive_many

    def failing_first(receipt: str, seconds: int) -> None:
        if receipt == "r0":
            raise OSError("SQS unreachable")
        returned(receipt, seconds)

    async def scenario() -> None:
        worker = HeldWorker(settings, queue)

        def receive_then_drain(limit: int, wait: int, visibility: int) -> list[Received]:
            worker.draining.set()  # SIGTERM while the poll was out
            return received(limit, wait, visibility)

        queue.receive_many = receive_then_drain  # type: ignore[method-assign]
        queue.set_visibility = failing_first  # type: ignore[method-assign]
        await asyncio.wait_for(worker._receive(), 5)

    asyncio.run(scenario())
    assert queue.returned == ["r1", "r2"]  # r0 comes back after its visibility timeout


def test_the_drain_ends_the_pause_after_a_failed_receive() -> None:
    settings = WorkerSettings(queue_url="q", bucket="b", receive_wait_seconds=20)
    queue = ListQueue(0)

    def unreachable(limit: int, wait: int, visibility: int) -> list[Received]:
        queue.limits.append(limit)
        raise OSError("SQS unreachable")

    queue.receive_many = unreachable  # type: ignore[method-assign]

    async def scenario() -> float:
        worker = HeldWorker(settings, queue)
        receiver = asyncio.create_task(worker._receive())
        await until(lambda: len(queue.limits) == 1)
        worker.stop()
        stopped = time.monotonic()
        await asyncio.wait_for(receiver, 15)  # not the 20 s pause
        return time.monotonic() - stopped

    assert asyncio.run(scenario()) < 15
