"""The engine core's own gauges on Triton's metrics port: up, restarts, step ms, rows per step, encoder batch.

Names: :data:`whisper_build.serving.contract.ENGINE_CORE_METRICS`. The core ships its cumulative
scheduler counters (``scheduler.COUNTERS``) every 0.1 s; :meth:`CoreGauges.update` turns them into
rates over the last :data:`WINDOW_S`, :meth:`CoreGauges.flush` hands them to Triton. Without custom
metrics (``metric_family`` ``None``) the values are still kept (``values``). Docs: docs/engines.md,
"The engine core".
"""

from __future__ import annotations

import threading
import time
from typing import Any

from whisper_build.serving import contract

__all__ = ["WINDOW_S", "CoreGauges"]

WINDOW_S = 1.0
"""Seconds of counters the per-step gauges average over."""

UP, RESTARTS, STEP_MS, ROWS_PER_STEP, ENCODER_BATCH = contract.ENGINE_CORE_METRICS
_DESCRIPTIONS = {
    UP: "1 while the engine-core process serves, 0 while it is being restarted.",
    RESTARTS: "Engine-core processes started after one died.",
    STEP_MS: "Host milliseconds per engine pass (a static batch or an in-flight decode step), last second.",
    ROWS_PER_STEP: "Rows per engine pass, last second.",
    ENCODER_BATCH: "Windows per encoder pass, last second.",
}


class CoreGauges:
    """The values of :data:`~whisper_build.serving.contract.ENGINE_CORE_METRICS`, thread-safe.

    Args:
        model: the ``model`` label.
        metric_family: ``triton_python_backend_utils.MetricFamily`` (``None`` = values kept here only).
    """

    def __init__(self, model: str, metric_family: Any | None = None) -> None:
        self.values: dict[str, float] = dict.fromkeys(contract.ENGINE_CORE_METRICS, 0.0)
        self._lock = threading.Lock()
        self._history: list[tuple[float, dict[str, float]]] = []
        self._flushed_restarts = 0.0
        self._flushed: dict[str, float] = {}
        self._metrics: dict[str, Any] = {}
        self._families: list[Any] = []
        if metric_family is None:
            return
        for name in contract.ENGINE_CORE_METRICS:
            kind = metric_family.COUNTER if name == RESTARTS else metric_family.GAUGE
            family = metric_family(name=name, description=_DESCRIPTIONS[name], kind=kind)
            self._families.append(family)  # the family must outlive its metrics
            self._metrics[name] = family.Metric(labels={"model": model})

    def update(self, counters: dict[str, float], now: float | None = None) -> None:
        """Take one cumulative counter reading (the receiver thread)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if self._history and counters.get("steps", 0.0) < self._history[-1][1].get("steps", 0.0):
                self._history.clear()  # a new core counts from zero
            self._history.append((now, dict(counters)))
            while len(self._history) > 2 and self._history[1][0] <= now - WINDOW_S:
                self._history.pop(0)
            (_, old), (_, new) = self._history[0], self._history[-1]
            steps = new.get("steps", 0.0) - old.get("steps", 0.0)
            passes = new.get("encoder_passes", 0.0) - old.get("encoder_passes", 0.0)
            if steps > 0:
                self.values[STEP_MS] = 1000.0 * (new.get("step_seconds", 0.0) - old.get("step_seconds", 0.0)) / steps
                self.values[ROWS_PER_STEP] = (new.get("row_steps", 0.0) - old.get("row_steps", 0.0)) / steps
            if passes > 0:
                self.values[ENCODER_BATCH] = (new.get("encoded", 0.0) - old.get("encoded", 0.0)) / passes

    def flush(self, up: bool, restarts: int) -> None:
        """Set the gauges in Triton: ``up`` and the client's ``restarts`` so far (one thread at a time: the sender)."""
        with self._lock:
            self.values[UP] = 1.0 if up else 0.0
            self.values[RESTARTS] = float(restarts)
            values = dict(self.values)
        for name, metric in self._metrics.items():
            if name == RESTARTS:
                if values[name] > self._flushed_restarts:
                    metric.increment(values[name] - self._flushed_restarts)
                    self._flushed_restarts = values[name]
            elif values[name] != self._flushed.get(name):
                metric.set(values[name])
                self._flushed[name] = values[name]
