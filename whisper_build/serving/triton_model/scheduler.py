"""The ``whisper`` model's own scheduler: priority queues, deadlines, cancellation, static batches.

Behind the decoupled front (``1/model.py``) every request is :meth:`StaticScheduler.submit`-ted with
its level (1 live > 2 sync > 3 bulk) and deadline; a worker thread takes waiting requests in priority
order, FIFO per level, into batches of up to ``max_batch_windows`` windows (after ``max_queue_delay_s``
for the batch to fill) and decodes each with :func:`~whisper_build.serving.triton_model.batching.run_batch`.
Each level's queue is bounded (:class:`QueueFull`); a request still waiting past its deadline gets
:class:`RequestTimeout`, undecoded; a cancelled request's future is dropped from the queue, and a batch
whose requests are all cancelled stops before its next engine call (:mod:`.cancellation`). No
``pb_utils`` here. Docs: docs/engines.md, "The model's scheduler".
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from whisper_build.serving import contract
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.batching import RequestWindows, run_batch
from whisper_build.serving.triton_model.cancellation import BatchCancelled, CancellableEngine
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.scheduler_metrics import LEVEL_NAMES, SchedulerMetrics
from whisper_build.serving.triton_model.stages import StageClock, TimedEngine

__all__ = [
    "COUNTERS",
    "LEVELS",
    "Job",
    "QueueFull",
    "RequestTimeout",
    "Scheduler",
    "SchedulerConfig",
    "StaticScheduler",
    "deliver",
]

log = logging.getLogger(__name__)

LEVELS: tuple[int, ...] = tuple(LEVEL_NAMES)
"""Priority levels, first served first: :data:`~whisper_build.serving.contract.LIVE_PRIORITY`, ``SYNC``, ``BULK``."""


class QueueFull(RuntimeError):
    """The request's level already holds its most waiting requests; it was refused at once (UNAVAILABLE)."""


class RequestTimeout(TimeoutError):
    """The request waited past its deadline before a batch took it; it was not decoded (UNAVAILABLE)."""


class SchedulerConfig(BaseModel):
    """How the model's scheduler batches (from the model config's parameters: ``repository.BatchingConfig``).

    Attributes:
        mode: ``static`` (this module) or ``inflight`` (the ``torch`` engine's ``InflightScheduler``).
        max_batch_windows: most windows per batch (``EngineParams.max_engine_batch``); a larger request
            runs alone.
        max_queue_delay_s: how long the oldest waiting request may wait for its batch to fill (s).
        max_queue_size: most waiting requests of the live and of the sync level, each.
        bulk_max_queue_size: most waiting requests of the bulk level.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: str = Field("static", pattern="^(static|inflight)$")
    max_batch_windows: int = Field(16, ge=1)
    max_queue_delay_s: float = Field(0.02, ge=0.0)
    max_queue_size: int = Field(64, ge=1)
    bulk_max_queue_size: int = Field(64, ge=1)

    @classmethod
    def from_batching(cls, batching: Any, max_engine_batch: int) -> SchedulerConfig:
        """From a :class:`~whisper_build.serving.triton_model.repository.BatchingConfig` and the engine's batch."""
        return cls(
            mode=batching.scheduler,
            max_batch_windows=max_engine_batch,
            max_queue_delay_s=batching.max_queue_delay_us / 1e6,
            max_queue_size=batching.max_queue_size,
            bulk_max_queue_size=batching.bulk_max_queue_size,
        )

    def queue_size(self, level: int) -> int:
        """The bound of ``level``'s queue (requests)."""
        return self.bulk_max_queue_size if level == contract.BULK_PRIORITY else self.max_queue_size


COUNTERS = ("steps", "step_seconds", "row_steps", "encoder_passes", "encoded")
"""Cumulative counters every scheduler keeps (:meth:`Scheduler.counters`): engine passes (a static batch or an
in-flight decode step), their host wall seconds, rows summed over them, encoder passes and windows encoded."""


class Scheduler(Protocol):
    """What the engine core drives: static batches or in-flight batching, one protocol.

    :class:`StaticScheduler` and ``inflight_front.InflightFront`` share one :class:`Job` type and the same
    errors (:class:`QueueFull`, :class:`RequestTimeout`, ``cancellation.BatchCancelled``).
    """

    metrics: SchedulerMetrics

    def submit(self, request: RequestWindows, level: int = ..., timeout_s: float | None = None) -> Job:
        """Queue one request (raises ValueError for an unknown level, :class:`QueueFull`)."""
        ...

    def cancel(self, job: Job) -> None:
        """The client gave up: the job's windows leave the queue or the rows; its future is cancelled."""
        ...

    def close(self) -> None:
        """Stop; open requests are answered with an error."""
        ...

    def counters(self) -> dict[str, float]:
        """The cumulative :data:`COUNTERS`."""
        ...


@dataclass(eq=False)
class Job:
    """One submitted request: its windows, level, deadline (``time.monotonic()`` s) and future.

    ``future.cancel()`` (the front does it when the client cancels) drops it while it waits and
    counts towards stopping its batch while it decodes.
    """

    request: RequestWindows
    level: int
    deadline: float | None
    future: Future[list[WindowResult]] = field(default_factory=Future)
    enqueued: float = field(default_factory=time.monotonic)

    @property
    def windows(self) -> int:
        """Windows of the request."""
        return len(self.request.audio)


class StaticScheduler:
    """Static batches in priority order on a worker thread; see the module docstring.

    Args:
        engine: the loaded engine (its calls happen on the worker thread only).
        policy: fallback and silence thresholds.
        config: batching and queue bounds.
        metrics: the gauges (:class:`SchedulerMetrics`).
        on_batch: told each finished batch's stage clock and :class:`CancellableEngine` (stage and work
            counters); default: nothing.
    """

    def __init__(
        self,
        engine: Any,
        policy: DecodingPolicy,
        config: SchedulerConfig,
        metrics: SchedulerMetrics,
        on_batch: Callable[[StageClock, CancellableEngine], None] = lambda _c, _e: None,
        on_windows: Callable[[int], None] = lambda _: None,
    ) -> None:
        self._engine, self._policy, self.config, self.metrics = engine, policy, config, metrics
        self._on_batch, self._on_windows = on_batch, on_windows
        self._queues: dict[int, deque[Job]] = {level: deque() for level in LEVELS}
        self._counters = dict.fromkeys(COUNTERS, 0.0)
        self._cond = threading.Condition()
        self._closed = False
        self._threads = [
            threading.Thread(target=self._work, name="whisper-scheduler", daemon=True),
            threading.Thread(target=self._reap, name="whisper-scheduler-deadlines", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def submit(
        self, request: RequestWindows, level: int = contract.SYNC_PRIORITY, timeout_s: float | None = None
    ) -> Job:
        """Queue one request; its :attr:`Job.future` gets one :class:`WindowResult` per window.

        Args:
            request: the parsed windows.
            level: 1 live, 2 sync, 3 bulk.
            timeout_s: seconds from now by which a batch must take it (``None`` = no deadline).

        Raises:
            ValueError: unknown level.
            QueueFull: the level's queue is full (Triton's wording: "Exceeds maximum queue size").
        """
        if level not in self._queues:
            raise ValueError(f"priority level: one of {', '.join(map(str, LEVELS))}, got {level}")
        job = Job(request, level, None if timeout_s is None else time.monotonic() + timeout_s)
        with self._cond:
            if self._closed:
                raise RuntimeError("the whisper model's scheduler is closed (the model is unloading)")
            queue = self._queues[level]
            if len(queue) >= self.config.queue_size(level):
                self.metrics.rejected(level, "queue_full", job.windows)
                raise QueueFull("Exceeds maximum queue size")
            queue.append(job)
            self.metrics.queued(level, job.windows)
            self._cond.notify_all()
        return job

    def cancel(self, job: Job) -> None:
        """The client gave up: drop ``job`` if it waits (its future is cancelled either way)."""
        if not job.future.cancel():
            return
        with self._cond:
            if job in self._queues[job.level]:
                self._queues[job.level].remove(job)
                self.metrics.queued(job.level, -job.windows)
                self.metrics.rejected(job.level, "cancelled", job.windows)

    def close(self) -> None:
        """Stop the threads after the running batch; waiting requests get an error."""
        with self._cond:
            self._closed = True
            waiting = [job for queue in self._queues.values() for job in queue]
            for queue in self._queues.values():
                queue.clear()
            self._cond.notify_all()
        for job in waiting:
            self.metrics.queued(job.level, -job.windows)
            deliver(job.future, RuntimeError("the whisper model is unloading"))
        for thread in self._threads:
            thread.join(timeout=30)

    def counters(self) -> dict[str, float]:
        """The cumulative :data:`COUNTERS` (a static batch is one pass that encodes all its windows)."""
        with self._cond:
            return dict(self._counters)

    # --- worker ------------------------------------------------------------------------------

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            try:
                self._run(batch)
            except Exception as error:  # noqa: BLE001 - a bug answers its batch; the scheduler keeps serving
                log.exception("whisper scheduler: batch of %d requests failed", len(batch))
                for job in batch:
                    deliver(job.future, RuntimeError(f"whisper model failed: {type(error).__name__}: {error}"))

    def _next_batch(self) -> list[Job] | None:
        """Wait for work and the batching delay; take a batch in priority order (``None``: closed)."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                self._expire_locked(time.monotonic())
                heads = [queue[0] for queue in self._queues.values() if queue]
                if not heads:
                    self._cond.wait()
                    continue
                waiting = sum(job.windows for queue in self._queues.values() for job in queue)
                ready_at = min(job.enqueued for job in heads) + self.config.max_queue_delay_s
                now = time.monotonic()
                if waiting >= self.config.max_batch_windows or now >= ready_at:
                    return self._take_locked()
                self._cond.wait(ready_at - now)

    def _take_locked(self) -> list[Job]:
        batch: list[Job] = []
        windows = 0
        for level in LEVELS:
            queue = self._queues[level]
            while queue and (not batch or windows + queue[0].windows <= self.config.max_batch_windows):
                job = queue.popleft()
                self.metrics.queued(level, -job.windows)
                batch.append(job)
                windows += job.windows
            if queue:
                break  # FIFO: a request that does not fit waits at the head; no lower level overtakes it
        return batch

    def _run(self, batch: list[Job]) -> None:
        rows = sum(job.windows for job in batch)
        self.metrics.active(rows)
        try:
            clock = StageClock()
            engine = CancellableEngine(
                TimedEngine(self._engine, clock),
                lambda: all(job.future.cancelled() for job in batch),
                self._on_windows,
            )
            with clock.stage("decoding"):
                results = run_batch(engine, [job.request for job in batch], self._policy)
            clock.split_engine("decoding")
            self._on_batch(clock, engine)
            self.metrics.step(rows)
            with self._cond:
                for name, amount in (("steps", 1), ("row_steps", rows), ("encoder_passes", 1), ("encoded", rows),
                                     ("step_seconds", clock.seconds["engine"] + clock.seconds["decoding"])):  # fmt: skip
                    self._counters[name] += amount
        finally:
            self.metrics.active(-rows)
        for job, result in zip(batch, results, strict=True):
            if engine.stopped or job.future.cancelled():
                self.metrics.rejected(job.level, "cancelled", job.windows)
                deliver(job.future, BatchCancelled("cancelled by the client"))
            elif isinstance(result, Exception):
                deliver(job.future, result)
            else:
                self.metrics.finished(job.windows)
                deliver(job.future, result)

    # --- deadlines -----------------------------------------------------------------------------

    def _reap(self) -> None:
        """Answer waiting requests at their deadline even while the worker decodes."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                self._expire_locked(now)
                deadlines = [job.deadline for q in self._queues.values() for job in q if job.deadline is not None]
                self._cond.wait(max(0.0, min(deadlines) - now) + 0.001 if deadlines else None)

    def _expire_locked(self, now: float) -> None:
        for level, queue in self._queues.items():
            for job in [j for j in queue if (j.deadline is not None and j.deadline <= now) or j.future.cancelled()]:
                queue.remove(job)
                self.metrics.queued(level, -job.windows)
                if job.future.cancelled():
                    self.metrics.rejected(level, "cancelled", job.windows)
                    continue
                self.metrics.rejected(level, "timeout", job.windows)
                deliver(job.future, RequestTimeout("Request timeout expired"))


def deliver(future: Future[Any], result: Any) -> None:
    """Set ``future``'s result or exception unless it was cancelled meanwhile."""
    try:
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass
