"""When bulk calls go to Triton (whisper_build.bulk.admission): gathered after an idle spell, two batches at most.

A recording backend stands in for Triton: it notes when each call arrived and how many windows it held,
and answers after ``answer_seconds``. Every bound below is a wait, never a speed target.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
from fake_backend import FakeBackend

from whisper_build.bulk.admission import ActiveJobs, AdmissionBackend, BulkAdmission
from whisper_build.serving.transcription.request import WindowRequest

WINDOW = np.zeros(16_000, dtype=np.float32)


async def call(backend: AdmissionBackend, windows: int) -> None:
    await backend.infer([WINDOW] * windows, WindowRequest(), 10.0)


def test_calls_after_an_idle_spell_wait_for_two_batches_and_go_together() -> None:
    inner = FakeBackend()
    gather = BulkAdmission(ActiveJobs(count=20), gather_seconds=30.0)
    backend = AdmissionBackend(inner, gather)

    async def scenario() -> float:
        await backend.served_model(1.0)  # the model's max_batch_size: 16; two batches: 32 windows
        first = asyncio.create_task(call(backend, 2))
        await asyncio.sleep(0.2)
        assert not inner.arrivals  # one job's 2 windows alone would be a batch of 2: it waits
        others = [asyncio.create_task(call(backend, 2)) for _ in range(14)]
        await asyncio.sleep(0.2)
        assert not inner.arrivals  # 30 windows, 15 of 20 jobs: still waiting
        started = time.monotonic()
        await call(backend, 2)  # the 32nd window
        await asyncio.gather(first, *others)
        return started

    started = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert len(inner.arrivals) == 16 and sum(w for _, w in inner.arrivals) == 32
    assert all(at >= started for at, _ in inner.arrivals)  # none went before the two batches were there


def test_a_call_goes_at_once_while_another_is_at_triton() -> None:
    inner = FakeBackend(answer_seconds=1.0)
    gather = BulkAdmission(ActiveJobs(count=2), gather_seconds=30.0, batch_windows=8)
    backend = AdmissionBackend(inner, gather)

    async def scenario() -> None:
        await asyncio.wait_for(asyncio.gather(call(backend, 1), call(backend, 1)), 5)  # both jobs waiting: go
        assert gather.calls_at_triton == gather.windows_at_triton == 0
        gather.active.count = 1
        first = asyncio.create_task(call(backend, 1))  # the only job: it goes at once
        await asyncio.sleep(0.2)
        assert len(inner.arrivals) == 3
        gather.active.count = 5
        alongside = asyncio.create_task(call(backend, 1))  # one is at Triton: no gathering, it goes at once
        await asyncio.sleep(0.2)
        assert len(inner.arrivals) == 4
        await asyncio.gather(first, alongside)

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert [w for _, w in inner.arrivals] == [1, 1, 1, 1]


def test_when_every_job_waits_or_the_time_is_up_they_go() -> None:
    inner = FakeBackend()
    active = ActiveJobs(count=2)
    backend = AdmissionBackend(inner, BulkAdmission(active, gather_seconds=0.5, batch_windows=16))

    async def scenario() -> None:
        await asyncio.wait_for(asyncio.gather(call(backend, 1), call(backend, 1)), 5)  # both jobs waiting
        assert len(inner.arrivals) == 2
        active.count = 3  # a third job is still downloading: the two wait for it, at most 0.5 s
        started = time.monotonic()
        await asyncio.wait_for(asyncio.gather(call(backend, 1), call(backend, 1)), 5)
        assert time.monotonic() - started >= 0.45

    asyncio.run(scenario())
    assert len(inner.arrivals) == 4


def test_a_cancelled_waiting_call_is_no_part_of_the_batch_and_zero_seconds_never_waits() -> None:
    inner = FakeBackend()
    gather = BulkAdmission(ActiveJobs(count=3), gather_seconds=30.0, batch_windows=2)  # gathers 4 windows
    backend = AdmissionBackend(inner, gather)

    async def scenario() -> None:
        leaving = asyncio.create_task(call(backend, 1))
        await asyncio.sleep(0.1)
        leaving.cancel()  # a drained job
        await asyncio.sleep(0.1)
        staying = asyncio.create_task(call(backend, 1))
        await asyncio.sleep(0.1)
        assert not inner.arrivals  # 1 window of 4 (the cancelled one does not count)
        await asyncio.wait_for(asyncio.gather(call(backend, 3), staying), 5)

    asyncio.run(scenario())
    assert sorted(w for _, w in inner.arrivals) == [1, 3]
    never = AdmissionBackend(FakeBackend(), BulkAdmission(ActiveJobs(count=9), gather_seconds=0))
    asyncio.run(asyncio.wait_for(call(never, 1), 5))


def most_at_triton(admission: BulkAdmission, calls: int, windows: int) -> tuple[int, FakeBackend]:
    """Send ``calls`` calls of ``windows`` windows at once; the most windows at Triton at any time, and the backend."""
    inner = FakeBackend(answer_seconds=0.3)
    backend = AdmissionBackend(inner, admission)
    most = 0

    async def watch() -> None:
        nonlocal most
        while True:
            most = max(most, admission.windows_at_triton)
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(asyncio.gather(*(call(backend, windows) for _ in range(calls))), 20)
        watcher.cancel()

    asyncio.run(scenario())
    return most, inner


def test_no_more_than_two_batches_of_windows_are_at_triton() -> None:
    admission = BulkAdmission(ActiveJobs(count=16), gather_seconds=0, batch_windows=8)
    most, inner = most_at_triton(admission, calls=16, windows=3)  # 48 windows
    assert len(inner.arrivals) == 16
    assert most <= 2 * 8 and most >= 15  # five calls of 3 (15) fit under 16; the rest waited for answers
    alone = AdmissionBackend(FakeBackend(), BulkAdmission(ActiveJobs(count=1), gather_seconds=0, batch_windows=2))
    asyncio.run(asyncio.wait_for(call(alone, 9), 5))  # one call larger than two batches still goes


def test_beside_a_gateway_half_a_batch_at_most_is_at_triton() -> None:
    admission = BulkAdmission(ActiveJobs(count=6), gather_seconds=0, batch_windows=16, shared=True)
    most, inner = most_at_triton(admission, calls=6, windows=3)
    assert admission.max_windows_at_triton == 8 and len(inner.arrivals) == 6
    assert most == 6  # two calls of 3; a third would pass 8
