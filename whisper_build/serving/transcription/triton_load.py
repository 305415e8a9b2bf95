"""Triton's own view of the served model's load: "busy with another client's work" or "hung".

A canary waits behind whatever occupies the model's instances; with another client on the same
Triton (bulk workers, a second gateway) that can be a long batch while this pod has nothing in
flight, which the pod's own counters (:mod:`.pod_view`) cannot tell
from a hang. Triton's Prometheus metrics can (Triton docs, "Metrics"). Entry points:
:class:`SharedLoad` (the verdict), :class:`TritonMetricsReader`, :func:`parse_load`. The rules and
what was measured on Triton 2.51: docs/gateway.md, "`GET /ping` (readiness): the health rules".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from whisper_build.serving.contract import SCHEDULER_FINISHED, SCHEDULER_QUEUED
from whisper_build.serving.prometheus_text import fetch_text, require_http_url, sample_sums

__all__ = ["SharedLoad", "TritonLoad", "TritonMetricsReader", "parse_load"]


@dataclass(frozen=True)
class TritonLoad:
    """One reading of the model scheduler's metrics on Triton for the served model.

    Attributes:
        queued: windows waiting in the scheduler, summed over the levels (``contract.SCHEDULER_QUEUED``).
        finished: windows answered since the model loaded (``contract.SCHEDULER_FINISHED``).
    """

    queued: int
    finished: int


def parse_load(text: str, model: str) -> TritonLoad | None:
    """The model's :class:`TritonLoad` from Triton's Prometheus text; ``None`` when it lacks either series or is not such text."""
    values = sample_sums(text, (SCHEDULER_QUEUED, SCHEDULER_FINISHED), lambda labels: labels.get("model") == model)
    if values is None or SCHEDULER_QUEUED not in values or SCHEDULER_FINISHED not in values:
        return None
    return TritonLoad(queued=int(values[SCHEDULER_QUEUED]), finished=int(values[SCHEDULER_FINISHED]))


class TritonMetricsReader:
    """Reads :class:`TritonLoad` from Triton's metrics endpoint (``WHISPER_GATEWAY_TRITON_METRICS_URL``).

    Args:
        url: ``http://host:port/metrics`` of the Triton serving the model.
        model: the model's name (the ``model`` label).
        timeout: seconds for one read.
    """

    def __init__(self, url: str, model: str, timeout: float = 2.0) -> None:
        self.url = require_http_url(url, "WHISPER_GATEWAY_TRITON_METRICS_URL")
        self.model, self.timeout = model, timeout

    async def read(self) -> TritonLoad | None:
        """The model's load now; ``None`` when Triton's metrics cannot be read or lack the model."""
        text = await asyncio.to_thread(fetch_text, self.url, self.timeout)
        return None if text is None else parse_load(text, self.model)


class SharedLoad:
    """Whether the model is busy with other clients' work, from successive :class:`TritonLoad` readings.

    Args:
        hang_after_seconds: longest time without a finished window that still counts as busy.
        clock: monotonic seconds (tests pass a fake).

    The scheduler's ``SCHEDULER_QUEUED{model,level}`` counts windows *waiting*, not in a batch or a
    decoding row (0 while a lone bulk batch decodes, 1 while a canary waits behind it);
    ``SCHEDULER_FINISHED{model}`` grows only when a window's decode *ends* (as Triton's execution
    counter did; an in-flight scheduler ends windows one by one, not per batch). From two readings
    (:class:`TritonLoad`: the last before the canary, one after its timeout) the canary is *busy* when a
    window finished during the wait, or when windows are queued and one finished within
    ``hang_after_seconds``; *not* busy when the metrics cannot be read, when nothing finished for
    longer than ``hang_after_seconds``, or when nothing is queued and nothing finished (the canary itself
    is decoding past its timeout: from then on queued windows excuse nothing until a window finishes).
    """

    def __init__(self, hang_after_seconds: float, clock: Callable[[], float]) -> None:
        self.hang_after_seconds = hang_after_seconds
        self._clock = clock
        self._last: TritonLoad | None = None
        self._progress_at = float("-inf")
        self._canary_stuck = False
        self._busy = False
        self.queued = 0
        """Windows queued in the scheduler at the latest reading."""

    @property
    def busy(self) -> bool:
        """True while the latest timed-out canary was judged busy and a window finished within the bound."""
        return self._busy and self.progress_age() <= self.hang_after_seconds

    def progress_age(self) -> float:
        """Seconds since a reading first showed more finished windows (``inf`` before any)."""
        return self._clock() - self._progress_at

    def observe(self, load: TritonLoad | None) -> None:
        """A reading after a canary that came back or failed: not busy; note progress."""
        self._note(load)
        self._busy = False

    def canary_timed_out(self, load: TritonLoad | None) -> bool:
        """A reading after a canary timed out with the pod idle; True when the model is busy (see the module docstring)."""
        progressed = self._note(load)
        if load is None:
            self._busy = False
        elif progressed:
            self._busy = True
        elif load.queued == 0:
            self._canary_stuck, self._busy = True, False  # the canary itself executes past its timeout
        else:
            self._busy = not self._canary_stuck and self.progress_age() <= self.hang_after_seconds
        return self._busy

    def _note(self, load: TritonLoad | None) -> bool:
        """Record ``load``; True when it shows windows finished since the last reading."""
        if load is None:
            return False
        progressed = self._last is not None and load.finished > self._last.finished
        if progressed or self._last is None or load.finished < self._last.finished:  # first, or the model reloaded
            self._progress_at = self._clock()
            self._canary_stuck = False
        self._last, self.queued = load, load.queued
        return progressed
