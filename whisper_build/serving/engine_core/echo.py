"""A benchmark double of the scheduler: no engine, every request answered ``""`` per window after a fixed delay.

It measures what the hand-over itself costs (Triton → stub → ZMQ → core → stub → Triton): with the
engine taken out, answers per second and the latency above the delay are the path's own
(``benchmarks/engine_core_echo.py``). Chosen by ``WHISPER_ENGINE_CORE_ECHO_MS``; never in a chart.
Docs: docs/engines.md, "The engine core".
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from whisper_build.serving import contract
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.batching import RequestWindows
from whisper_build.serving.triton_model.scheduler import COUNTERS, Job, QueueFull, SchedulerConfig, deliver
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics

__all__ = ["ECHO_VARIABLE", "EchoScheduler"]

ECHO_VARIABLE = "WHISPER_ENGINE_CORE_ECHO_MS"
"""Environment variable: when set, the core loads no engine and echoes after this many milliseconds."""


class EchoScheduler:
    """:class:`~whisper_build.serving.triton_model.scheduler.Scheduler` whose every job ends ``delay_s`` after submission.

    Jobs overlap (no batch, no capacity bound but the queue bound of open requests per level).
    """

    def __init__(self, delay_s: float, config: SchedulerConfig, metrics: SchedulerMetrics) -> None:
        self.delay_s, self.config, self.metrics = delay_s, config, metrics
        self._due: list[tuple[float, int, Job]] = []
        self._order = itertools.count()
        self._open = 0
        self._counters = dict.fromkeys(COUNTERS, 0.0)
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="echo-scheduler", daemon=True)
        self._thread.start()

    def submit(
        self, request: RequestWindows, level: int = contract.SYNC_PRIORITY, timeout_s: float | None = None
    ) -> Job:
        """Answer ``request`` after the delay (raises QueueFull past the level's bound of open requests)."""
        job = Job(request, level, None if timeout_s is None else time.monotonic() + timeout_s)
        with self._cond:
            if self._open >= self.config.queue_size(level):
                raise QueueFull("Exceeds maximum queue size")
            self._open += 1
            heapq.heappush(self._due, (job.enqueued + self.delay_s, next(self._order), job))
            self._cond.notify()
        return job

    def cancel(self, job: Job) -> None:
        """Cancel the job's future (it is dropped when due)."""
        job.future.cancel()

    def close(self) -> None:
        """Stop; open jobs get an error."""
        with self._cond:
            self._closed = True
            jobs, self._due = [entry[2] for entry in self._due], []
            self._cond.notify()
        for job in jobs:
            deliver(job.future, RuntimeError("the whisper model is unloading"))
        self._thread.join(timeout=5)

    def counters(self) -> dict[str, float]:
        """Each answered job counts as one pass over its windows."""
        with self._cond:
            return dict(self._counters)

    def _work(self) -> None:
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                if not self._due or self._due[0][0] > now:
                    self._cond.wait(self._due[0][0] - now if self._due else None)
                    continue
                _, _, job = heapq.heappop(self._due)
                self._open -= 1
                self._counters["steps"] += 1
                self._counters["row_steps"] += job.windows
                self.metrics.finished(job.windows)
                deliver(job.future, [WindowResult(text="") for _ in range(job.windows)])
