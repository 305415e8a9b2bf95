"""Bounded admission control: requests AND seconds of audio in progress are both budgeted.

At most ``capacity`` requests run, and the audio they carry adds up to at most
``audio_budget_seconds``; at most ``queue_size`` requests wait for room. A request beyond the
queue is refused at once (:class:`Rejected` ``queue_full``, HTTP 429); one that waited longer than
``queue_timeout`` gives up (``queue_timeout``, 503); after :meth:`AdmissionController.start_drain`
nothing new is admitted (``draining``, 503) while admitted requests finish. Nothing waits unbounded.

Budgeting audio seconds keeps a burst of long uploads from taking every slot (and the engine)
for minutes: two one-hour files may fill a two-hour budget while short requests still get in
beside them. Whoever fits goes first, in arrival order, so a short request is not held behind a
long one; a long one waits at most ``queue_timeout``.
Docs: docs/gateway.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["AdmissionController", "RejectReason", "Rejected"]

RejectReason = Literal["queue_full", "queue_timeout", "draining"]
"""Why admission refused: no room in the queue (retry later), no room within the wait, shutting down."""


class Rejected(Exception):
    """Admission refused; ``reason`` (:data:`RejectReason`) says why, the message what to do."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(eq=False)
class _Waiter:
    cost: float
    granted: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class AdmissionController:
    """Counts running requests and their audio seconds, with a bounded wait queue (one event loop).

    Args:
        capacity: requests processed at once (≥ 1).
        queue_size: requests allowed to wait for room (≥ 0).
        queue_timeout: seconds a request may wait.
        audio_budget_seconds: seconds of audio processed at once (> 0); ``None`` = no audio budget.
            A request declaring more than the budget is charged the whole budget (it runs alone
            among audio-carrying requests) rather than never.
    """

    def __init__(
        self,
        capacity: int,
        queue_size: int,
        queue_timeout: float,
        audio_budget_seconds: float | None = None,
    ) -> None:
        if capacity < 1 or queue_size < 0 or queue_timeout <= 0:
            raise ValueError("capacity must be >= 1, queue_size >= 0, queue_timeout > 0")
        if audio_budget_seconds is not None and audio_budget_seconds <= 0:
            raise ValueError("audio_budget_seconds must be > 0 (or None for no audio budget)")
        self.capacity = capacity
        self.queue_size = queue_size
        self.queue_timeout = queue_timeout
        self.audio_budget_seconds = audio_budget_seconds
        self._running = 0
        self._audio = 0.0
        self._waiters: deque[_Waiter] = deque()
        self._draining = False

    @property
    def running(self) -> int:
        """Requests admitted and not yet finished."""
        return self._running

    @property
    def waiting(self) -> int:
        """Requests waiting for room now."""
        return len(self._waiters)

    @property
    def audio_seconds(self) -> float:
        """Seconds of audio charged to the running requests."""
        return self._audio

    @property
    def draining(self) -> bool:
        """True once :meth:`start_drain` was called."""
        return self._draining

    def start_drain(self) -> None:
        """Refuse every new request from now on; admitted ones keep running, waiting ones are refused."""
        self._draining = True
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.granted.done():
                waiter.granted.set_exception(Rejected("draining", _DRAINING))

    def _cost(self, audio_seconds: float) -> float:
        budget = self.audio_budget_seconds
        cost = max(0.0, float(audio_seconds))
        return cost if budget is None else min(cost, budget)

    def _fits(self, cost: float) -> bool:
        budget = self.audio_budget_seconds
        return self._running < self.capacity and (budget is None or self._audio + cost <= budget)

    def _take(self, cost: float) -> None:
        self._running += 1
        self._audio += cost

    def _release(self, cost: float) -> None:
        self._running -= 1
        self._audio = max(0.0, self._audio - cost)
        for waiter in list(self._waiters):  # whoever fits, in arrival order
            if not waiter.granted.done() and self._fits(waiter.cost):
                self._waiters.remove(waiter)
                self._take(waiter.cost)
                waiter.granted.set_result(None)

    def _busy_message(self, audio_seconds: float) -> str:
        budget = self.audio_budget_seconds
        audio = (
            ""
            if budget is None
            else f", {self._audio:.0f} s of audio of a {budget:.0f} s budget (this request: {audio_seconds:.0f} s)"
        )
        return f"server busy: {self._running} of {self.capacity} requests running{audio}"

    def check_open(self) -> None:
        """Raise :class:`Rejected` (``draining``) once :meth:`start_drain` was called.

        Callers that read a request's audio before :meth:`admit` check here first, then pass
        ``arrived_before_drain=True``: a request that arrived before the drain is still served when
        there is room at once, as if it had been admitted on arrival.
        """
        if self._draining:
            raise Rejected("draining", _DRAINING)

    @asynccontextmanager
    async def admit(self, audio_seconds: float = 0.0, *, arrived_before_drain: bool = False) -> AsyncIterator[None]:
        """Hold room for one request carrying ``audio_seconds`` of audio for the ``async with`` body.

        Args:
            audio_seconds: the request's audio length in seconds (its declared or worst-case length).
            arrived_before_drain: the caller passed :meth:`check_open` when the request arrived;
                while draining it is then refused only when it would have to wait.

        Raises:
            Rejected: draining, queue full, or no room within ``queue_timeout``.
        """
        cost = self._cost(audio_seconds)
        if self._draining and not (arrived_before_drain and self._fits(cost)):
            raise Rejected("draining", _DRAINING)
        if self._fits(cost):
            self._take(cost)
        else:
            if len(self._waiters) >= self.queue_size:
                raise Rejected(
                    "queue_full",
                    f"{self._busy_message(audio_seconds)} and {len(self._waiters)} waiting; retry later",
                )
            waiter = _Waiter(cost)
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(self.queue_timeout):
                    await asyncio.shield(waiter.granted)
            except BaseException as exc:  # timed out, cancelled (client gone) or drained
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                granted = waiter.granted
                if granted.done() and not granted.cancelled() and granted.exception() is None:
                    self._release(cost)  # room was granted in the same instant: give it back
                if isinstance(exc, TimeoutError):
                    raise Rejected(
                        "queue_timeout",
                        f"{self._busy_message(audio_seconds)}; no room within {self.queue_timeout:g} s; retry later",
                    ) from None
                raise
        try:
            yield
        finally:
            self._release(cost)


_DRAINING = "the server is shutting down; retry on another replica"
