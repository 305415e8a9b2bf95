"""Bounded admission control: at most ``capacity`` requests run, at most ``queue_size`` wait.

A request beyond both bounds is refused at once (429); one that waited longer than
``queue_timeout`` gives up (503); after :meth:`AdmissionController.start_drain` nothing new is
admitted (503) while admitted requests finish. Nothing ever waits without a bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Rejected(Exception):
    """Admission refused. ``reason`` is ``"queue_full"``, ``"queue_timeout"`` or ``"draining"``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class AdmissionController:
    """Semaphore for running requests plus a counter-bounded wait queue (single event loop).

    Args:
        capacity: requests processed at once (≥ 1).
        queue_size: requests allowed to wait for a slot (≥ 0).
        queue_timeout: seconds a request may wait for a slot.
    """

    def __init__(self, capacity: int, queue_size: int, queue_timeout: float) -> None:
        if capacity < 1 or queue_size < 0 or queue_timeout <= 0:
            raise ValueError("capacity must be >= 1, queue_size >= 0, queue_timeout > 0")
        self.capacity = capacity
        self.queue_size = queue_size
        self.queue_timeout = queue_timeout
        self._slots = asyncio.Semaphore(capacity)
        self._waiting = 0
        self._running = 0
        self._draining = False

    @property
    def running(self) -> int:
        """Requests holding a slot now."""
        return self._running

    @property
    def waiting(self) -> int:
        """Requests waiting for a slot now."""
        return self._waiting

    @property
    def draining(self) -> bool:
        """True once :meth:`start_drain` was called."""
        return self._draining

    def start_drain(self) -> None:
        """Refuse every new request from now on; admitted ones keep running."""
        self._draining = True

    @asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        """Hold a slot for the body of the ``async with``.

        Raises:
            Rejected: draining, queue full, or no slot within ``queue_timeout``.
        """
        if self._draining:
            raise Rejected("draining", "the server is shutting down; retry on another replica")
        if self._slots.locked():
            if self._waiting >= self.queue_size:
                raise Rejected(
                    "queue_full",
                    f"server busy: {self.capacity} requests running and {self._waiting} waiting; retry later",
                )
            self._waiting += 1
            try:
                await asyncio.wait_for(self._slots.acquire(), self.queue_timeout)
            except TimeoutError:
                raise Rejected(
                    "queue_timeout",
                    f"server busy: no slot freed within {self.queue_timeout:g} s; retry later",
                ) from None
            finally:
                self._waiting -= 1
            if self._draining:
                self._slots.release()
                raise Rejected("draining", "the server is shutting down; retry on another replica")
        else:
            await self._slots.acquire()
        self._running += 1
        try:
            yield
        finally:
            self._running -= 1
            self._slots.release()
