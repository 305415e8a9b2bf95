"""The decoupled front's waiting (triton_model/front.py): cancellation looks at a bounded pace, one flush per tick."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from whisper_build.serving.triton_model.cancellation import BatchCancelled
from whisper_build.serving.triton_model.front import CancelPolls, CoalescedFlush, wait_for


def test_looks_at_cancellation_over_all_waiting_requests_keep_the_pace() -> None:
    # GIVEN 50 requests waiting 0.5 s, each asking every 10 ms, at most 100 looks per second over all
    looks: list[float] = []

    async def run() -> float:
        loop = asyncio.get_running_loop()
        polls = CancelPolls(per_s=100.0)
        futures: list[Future[str]] = [Future() for _ in range(50)]

        def is_cancelled() -> bool:
            looks.append(loop.time())
            return False

        waiters = [asyncio.ensure_future(wait_for(f, is_cancelled, lambda: None, polls, 0.01)) for f in futures]
        started = loop.time()
        await asyncio.sleep(0.5)
        for i, future in enumerate(futures):
            future.set_result(str(i))
        assert await asyncio.gather(*waiters) == [str(i) for i in range(50)]
        return loop.time() - started

    took = asyncio.run(run())
    # THEN the looks stay within the pace (unpaced: ~2,500), and every request still got its answer
    assert 0 < len(looks) <= 100 * took + 2, (len(looks), took)


def test_a_cancelled_request_is_cancelled_and_its_job_too() -> None:
    cancelled: list[bool] = []

    async def run() -> None:
        await wait_for(Future(), lambda: True, lambda: cancelled.append(True), CancelPolls(), 0.01)

    with pytest.raises(BatchCancelled, match="cancelled by the client"):
        asyncio.run(run())
    assert cancelled == [True]


def test_answers_ready_in_the_same_tick_share_one_flush_each_after_it() -> None:
    order: list[str] = []

    async def run() -> None:
        flush = CoalescedFlush(lambda: order.append("flush"))

        async def answer(name: str) -> None:
            await flush()
            order.append(name)

        await asyncio.gather(answer("a"), answer("b"), answer("c"))
        await answer("d")  # a later answer gets a flush of its own

    asyncio.run(run())
    assert order == ["flush", "a", "b", "c", "flush", "d"]


def test_an_answer_is_not_held_back_by_the_other_requests_looks() -> None:
    # GIVEN 30 requests waiting, looks paced at 10 per second over all of them (3 s for one look each)
    async def run() -> float:
        loop = asyncio.get_running_loop()
        polls = CancelPolls(per_s=10.0)
        futures: list[Future[str]] = [Future() for _ in range(30)]
        waiters = [asyncio.ensure_future(wait_for(f, lambda: False, lambda: None, polls, 0.01)) for f in futures]
        await asyncio.sleep(0.2)  # every request now waits for its turn to look
        answered = loop.time()
        for i, future in enumerate(futures):
            future.set_result(str(i))
        assert await asyncio.wait_for(asyncio.gather(*waiters), 10) == [str(i) for i in range(30)]
        return loop.time() - answered

    # THEN each answer is returned when it is ready, not after the request's turn to look
    took = asyncio.run(run())
    assert took < 0.5, took
