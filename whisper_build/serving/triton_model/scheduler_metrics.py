"""The model scheduler's gauges and counters on Triton's metrics port (``pb_utils.MetricFamily``).

Names are :data:`whisper_build.serving.contract.SCHEDULER_METRICS`; every series carries ``model``
(the Triton model name) and, where it has one, ``level`` (``live``/``sync``/``bulk``) and ``reason``
(``queue_full``/``timeout``/``cancelled``). The scheduler's threads only change plain values here;
:meth:`SchedulerMetrics.flush`, called on the stub's event-loop thread alone, hands them to Triton: the
stub's IPC with tritonserver must not be used from several threads at once. Without custom metrics
(``metric_family`` ``None``) the values are still kept. Docs: docs/engines.md, "The model's scheduler".
"""

from __future__ import annotations

import threading
from typing import Any

from whisper_build.serving import contract
from whisper_build.serving.engines.inflight_window import PRIORITY_LEVELS

__all__ = ["LEVEL_NAMES", "REASONS", "SchedulerMetrics", "level_name"]

LEVEL_NAMES: dict[int, str] = {level: name for level, name in enumerate(PRIORITY_LEVELS, start=1)}
"""``level`` label by priority level: 1 live, 2 sync, 3 bulk (:data:`whisper_build.serving.contract.LIVE_PRIORITY` …)."""
REASONS = ("queue_full", "timeout", "cancelled")
"""``reason`` label values of :data:`~whisper_build.serving.contract.SCHEDULER_REJECTED`."""


def level_name(level: int) -> str:
    """``live``/``sync``/``bulk`` for 1/2/3 (raises KeyError otherwise)."""
    return LEVEL_NAMES[level]


class SchedulerMetrics:
    """Thread-safe values of the scheduler's series, copied into Triton custom metrics by :meth:`flush`.

    Args:
        model: the ``model`` label (the Triton model's name).
        metric_family: ``triton_python_backend_utils.MetricFamily`` (``None`` = values kept here only).
    """

    def __init__(self, model: str, metric_family: Any | None = None) -> None:
        self.values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._lock = threading.Lock()
        self._metrics: dict[tuple[str, tuple[tuple[str, str], ...]], Any] = {}
        self._flushed: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._generation = 0
        self._base: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        levels = [{"level": name} for name in LEVEL_NAMES.values()]
        series: list[tuple[str, str, list[dict[str, str]]]] = [
            (contract.SCHEDULER_QUEUED, "gauge", levels),
            (contract.SCHEDULER_ACTIVE_ROWS, "gauge", [{}]),
            (contract.SCHEDULER_FINISHED, "counter", [{}]),
            (contract.SCHEDULER_STEPS, "counter", [{}]),
            (contract.SCHEDULER_STEP_ROWS, "counter", [{}]),
            (contract.SCHEDULER_REJECTED, "counter", [{**lv, "reason": r} for lv in levels for r in REASONS]),
        ]
        self._families = []
        for name, kind, label_sets in series:
            family = None
            if metric_family is not None:
                family = metric_family(
                    name=name,
                    description=_DESCRIPTIONS[name],
                    kind=metric_family.GAUGE if kind == "gauge" else metric_family.COUNTER,
                )
                self._families.append(family)  # the family must outlive its metrics
            for labels in label_sets:
                key = (name, tuple(sorted(labels.items())))
                self.values[key] = 0.0
                if family is not None:
                    self._metrics[key] = family.Metric(labels={"model": model, **labels})

    def value(self, name: str, **labels: str) -> float:
        """The current value of one series (for tests and logs)."""
        return self.values[(name, tuple(sorted(labels.items())))]

    def _add(self, name: str, amount: float, labels: dict[str, str]) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self.values[key] += amount

    def snapshot(self) -> list[tuple[str, dict[str, str], float]]:
        """Every series' value as ``(name, labels, value)`` (the engine core ships them to the stub)."""
        with self._lock:
            return [(name, dict(labels), value) for (name, labels), value in self.values.items()]

    def load(self, series: list[Any], generation: int = 0) -> None:
        """Take the values of another process's :meth:`snapshot` (unknown series are ignored).

        ``generation`` counts the processes that sent them: a new one (an engine core started again) counts
        from zero, so its counters continue from the values reached before it (a counter never goes down).
        """
        with self._lock:
            if generation != self._generation:
                self._generation = generation
                self._base = {key: value for key, value in self.values.items() if key[0] not in _GAUGES}
            for name, labels, value in series:
                key = (name, tuple(sorted(dict(labels).items())))
                if key in self.values:
                    self.values[key] = self._base.get(key, 0.0) + float(value)

    def flush(self) -> None:
        """Copy the values changed since the last flush into the Triton metrics; ONE thread only (the stub's loop).

        Gauges are ``set``, counters ``increment``-ed by the difference.
        """
        with self._lock:
            values = dict(self.values)
        for key, metric in self._metrics.items():
            value, before = values[key], self._flushed.get(key, 0.0)
            if value == before:
                continue
            if key[0] in _GAUGES:
                metric.set(value)
            else:
                metric.increment(value - before)
            self._flushed[key] = value

    def queued(self, level: int, windows: int) -> None:
        """``windows`` more (or, negative, fewer) windows wait at ``level``."""
        self._add(contract.SCHEDULER_QUEUED, windows, {"level": level_name(level)})

    def active(self, rows: int) -> None:
        """``rows`` more (or, negative, fewer) windows are being decoded."""
        self._add(contract.SCHEDULER_ACTIVE_ROWS, rows, {})

    def step(self, rows: int, count: int = 1) -> None:
        """``count`` engine passes (static batches, or in-flight decode steps) over ``rows`` windows in all."""
        self._add(contract.SCHEDULER_STEPS, count, {})
        self._add(contract.SCHEDULER_STEP_ROWS, rows, {})

    def finished(self, windows: int) -> None:
        """``windows`` windows answered with their transcripts."""
        self._add(contract.SCHEDULER_FINISHED, windows, {})

    def rejected(self, level: int, reason: str, windows: int) -> None:
        """``windows`` windows of ``level`` refused or dropped for ``reason`` (one of :data:`REASONS`)."""
        if reason not in REASONS:
            raise ValueError(f"reason: one of {', '.join(REASONS)}, got {reason!r}")
        self._add(contract.SCHEDULER_REJECTED, windows, {"level": level_name(level), "reason": reason})


_GAUGES = (contract.SCHEDULER_QUEUED, contract.SCHEDULER_ACTIVE_ROWS)

_DESCRIPTIONS = {
    contract.SCHEDULER_QUEUED: "Windows waiting in the whisper model's scheduler, by priority level.",
    contract.SCHEDULER_ACTIVE_ROWS: "Windows being decoded now (the running batch, or the in-flight rows).",
    contract.SCHEDULER_FINISHED: "Windows answered with their transcripts.",
    contract.SCHEDULER_STEPS: "Engine passes: static batches, or in-flight decode steps.",
    contract.SCHEDULER_STEP_ROWS: "Rows summed over the engine passes.",
    contract.SCHEDULER_REJECTED: "Windows refused or dropped: queue_full, timeout, cancelled.",
}
