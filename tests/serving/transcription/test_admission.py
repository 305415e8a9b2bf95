"""AdmissionController: requests and seconds of audio in progress are both bounded."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import pytest

from whisper_build.serving.transcription.admission import AdmissionController, Rejected


async def _hold(controller: AdmissionController, seconds: float, started: asyncio.Event, release: asyncio.Event):
    async with controller.admit(seconds):
        started.set()
        await release.wait()


def test_audio_budget_queues_long_uploads_while_short_ones_run_beside_them() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=8, queue_size=4, queue_timeout=10, audio_budget_seconds=7300)
        release = [asyncio.Event() for _ in range(3)]
        started = [asyncio.Event() for _ in range(3)]
        tasks = [asyncio.create_task(_hold(adm, 3600, started[i], release[i])) for i in range(3)]
        await asyncio.wait_for(asyncio.gather(started[0].wait(), started[1].wait()), 5)
        await asyncio.sleep(0.05)
        assert not started[2].is_set() and adm.waiting == 1 and adm.audio_seconds == 7200
        async with adm.admit(60):  # a short request fits beside them, ahead of the waiting long one
            assert adm.running == 3
        release[0].set()
        await asyncio.wait_for(started[2].wait(), 5)  # the freed hour goes to the waiting upload
        assert adm.running == 2 and adm.audio_seconds == 7200 and adm.waiting == 0
        for event in release:
            event.set()
        await asyncio.gather(*tasks)
        assert adm.running == 0 and adm.audio_seconds == 0

    asyncio.run(scenario())


def test_full_queue_is_429_and_a_long_wait_503_naming_the_budget() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=8, queue_size=1, queue_timeout=0.2, audio_budget_seconds=3600)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(adm.admit(3600))
            waiter = asyncio.create_task(stack.enter_async_context(adm.admit(3600)))
            await asyncio.sleep(0.05)
            with pytest.raises(Rejected) as full:
                await stack.enter_async_context(adm.admit(1800))
            assert full.value.reason == "queue_full"
            assert "3600 s of audio of a 3600 s budget (this request: 1800 s)" in str(full.value)
            with pytest.raises(Rejected) as late:
                await waiter
            assert late.value.reason == "queue_timeout" and "no room within 0.2 s" in str(late.value)
        assert adm.running == 0 and adm.audio_seconds == 0 and adm.waiting == 0

    asyncio.run(scenario())


def test_request_longer_than_the_budget_runs_alone_instead_of_never() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=4, queue_size=0, queue_timeout=1, audio_budget_seconds=100)
        async with adm.admit(10_000):
            assert adm.audio_seconds == 100
            with pytest.raises(Rejected):
                async with adm.admit(1):
                    pass
            async with adm.admit(0):  # requests without audio still get a slot
                pass

    asyncio.run(scenario())


def test_capacity_alone_still_bounds_requests_without_an_audio_budget() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=1, queue_size=0, queue_timeout=1)
        async with adm.admit(1e9):
            with pytest.raises(Rejected, match="1 of 1 requests running and 0 waiting"):
                async with adm.admit():
                    pass

    asyncio.run(scenario())


def test_drain_refuses_waiters_and_a_cancelled_waiter_leaks_nothing() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=1, queue_size=2, queue_timeout=10, audio_budget_seconds=60)
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(adm.admit(60))
            cancelled = asyncio.create_task(stack.enter_async_context(adm.admit(30)))
            drained = asyncio.create_task(stack.enter_async_context(adm.admit(30)))
            await asyncio.sleep(0.05)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert adm.waiting == 1
            adm.start_drain()
            with pytest.raises(Rejected) as info:
                await drained
            assert info.value.reason == "draining"
        assert adm.running == 0 and adm.audio_seconds == 0 and adm.waiting == 0

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "kwargs",
    [
        {"capacity": 0, "queue_size": 0, "queue_timeout": 1},
        {"capacity": 1, "queue_size": 0, "queue_timeout": 1, "audio_budget_seconds": 0},
    ],
)
def test_invalid_limits_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        AdmissionController(**kwargs)


def test_a_request_that_arrived_before_the_drain_is_served_if_there_is_room_at_once() -> None:
    async def scenario() -> None:
        adm = AdmissionController(capacity=1, queue_size=1, queue_timeout=10, audio_budget_seconds=100)
        adm.check_open()  # arrived while open, then read its audio
        adm.start_drain()
        with pytest.raises(Rejected, match="shutting down"):
            adm.check_open()
        with pytest.raises(Rejected):
            async with adm.admit(10):  # arrived after: refused
                pass
        async with adm.admit(10, arrived_before_drain=True):
            with pytest.raises(Rejected) as info:  # would have to wait: refused, not queued
                async with adm.admit(10, arrived_before_drain=True):
                    pass
            assert info.value.reason == "draining"

    asyncio.run(scenario())
