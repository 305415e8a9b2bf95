"""The worker's one receiver and the yield gate (whisper_build.bulk.worker, whisper_build.bulk.yielding).

Real moto server (127.0.0.1) for ReceiveMessage; a real prometheus-client HTTP endpoint for the gauge.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from whisper_build.bulk.aws import JobQueue, Received, clients
from whisper_build.bulk.job import Outcome
from whisper_build.bulk.local import LocalAws, provision
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.worker import Worker
from whisper_build.bulk.yielding import GATEWAY_INFLIGHT, YieldGate, YieldingBackend, read_gauge
from whisper_build.workstation.local_triton import free_ports


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
        await asyncio.sleep(0.3)
        assert len(worker.jobs) == 3 and queue.limits[0] == 3  # one call filled every slot
        calls = len(queue.limits)
        await asyncio.sleep(0.3)
        assert len(queue.limits) == calls  # all slots busy: no receive at all
        worker.release.set()
        while len(worker.done) < 7:
            await asyncio.sleep(0.05)
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


@pytest.fixture
def gateway_gauge() -> Iterator[tuple[Gauge, str]]:
    registry = CollectorRegistry()
    gauge = Gauge(GATEWAY_INFLIGHT, "in flight", registry=registry)
    port = free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield gauge, f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    thread.join(5)


@pytest.mark.integration
def test_read_gauge_sums_the_samples_and_is_none_when_unreachable(gateway_gauge) -> None:
    gauge, url = gateway_gauge
    gauge.set(3)
    assert read_gauge(url, GATEWAY_INFLIGHT, 5.0) == 3
    assert read_gauge(f"http://127.0.0.1:{free_ports(1)[0]}/metrics", GATEWAY_INFLIGHT, 1.0) is None


class RecordingBackend:
    """The backend side of YieldingBackend: records when each call arrived."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def transcribe(self, windows, text_prefix, repetition_penalty, timeout, options=None):  # noqa: ANN001, ANN201
        self.calls.append(time.monotonic())
        return []

    async def close(self) -> None:
        return None


@pytest.mark.integration
def test_bulk_calls_wait_while_the_gateway_has_requests_then_for_the_hold(gateway_gauge) -> None:
    gauge, url = gateway_gauge

    async def scenario() -> tuple[float, float, float]:
        gate = YieldGate(url, hold_seconds=0.5, poll_seconds=0.05, max_wait_seconds=60)
        backend = RecordingBackend()
        yielding = YieldingBackend(backend, gate)  # type: ignore[arg-type]
        gauge.set(1)
        gate.start()
        while gate.is_open:  # the first reading
            await asyncio.sleep(0.02)
        call = asyncio.create_task(yielding.transcribe([], "", 1.0, 10.0))
        await asyncio.sleep(1.0)
        assert not backend.calls  # held while the gateway has a request
        dropped = time.monotonic()
        gauge.set(0)
        await asyncio.wait_for(call, 10)
        await yielding.close()
        return dropped, backend.calls[0], gate.hold_seconds

    dropped, called, hold = asyncio.run(scenario())
    assert called - dropped >= hold - 0.06  # the hold after the last request (one poll of slack)


@pytest.mark.integration
def test_the_gate_lets_one_call_through_after_the_longest_wait_and_opens_without_a_gateway(gateway_gauge) -> None:
    gauge, url = gateway_gauge

    async def scenario() -> tuple[float, float]:
        gauge.set(2)
        busy = YieldGate(url, hold_seconds=0.1, poll_seconds=0.05, max_wait_seconds=0.5)
        busy.start()
        while busy.is_open:
            await asyncio.sleep(0.02)
        waited = await busy.wait()
        await busy.close()
        away = YieldGate(f"http://127.0.0.1:{free_ports(1)[0]}/metrics", poll_seconds=0.05)
        away.start()
        await asyncio.sleep(0.3)
        nothing = await away.wait()
        await away.close()
        return waited, nothing

    waited, nothing = asyncio.run(scenario())
    assert 0.5 <= waited < 5.0
    assert nothing == 0.0
