"""Where the Triton ``whisper`` model spends its time: parse, engine, decoding layer, response.

``model.py`` times each request's ``parse`` (input tensors and parameters read and checked) and
``response`` (output tensors built); the scheduler times each batch's ``engine`` (inside the engine's
:meth:`~whisper_build.serving.engines.base.WhisperEngine.generate`, ``align`` and ``detect_language``,
measured by :class:`TimedEngine`) and ``decoding`` (the decoding layer around those calls: silence gate,
temperature fallback, text and segments — the batch's time minus ``engine``). They go to Triton custom
metric counters (``pb_utils.MetricFamily``, python backend ≥ 23.05) on Triton's metrics port as
``whisper_model_stage_seconds{stage=...}``: ``parse``/``response`` ÷ ``nv_inference_exec_count`` (one
execution per request, the model being decoupled) give the mean per request, ``engine``/``decoding`` ÷
``whisper_scheduler_steps_total`` the mean per batch. Triton's own work (gRPC, the stub's shared-memory
hand-off) is in its ``nv_inference_*_duration_us`` counters.
Docs: docs/contracts.md, "5. Triton model contract".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

STAGES = ("parse", "engine", "decoding", "response")
"""Stage labels of ``whisper_model_stage_seconds``, in execution order."""
METRIC = "whisper_model_stage_seconds"


class StageClock:
    """Seconds per stage of one execution (:data:`STAGES`), filled by :meth:`stage` and :class:`TimedEngine`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` body to ``name`` (one of :data:`STAGES`)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def split_engine(self, batch_stage: str = "decoding") -> None:
        """Move the engine's share out of ``batch_stage`` (which timed the whole batch, engine included)."""
        self.seconds[batch_stage] = max(0.0, self.seconds[batch_stage] - self.seconds["engine"])


class TimedEngine:
    """An engine whose ``generate``, ``align`` and ``detect_language`` calls add their wall time to ``clock``'s ``engine`` stage.

    Every other attribute is the wrapped engine's.

    Args:
        engine: a :class:`~whisper_build.serving.engines.base.WhisperEngine`.
        clock: where the time goes.
    """

    def __init__(self, engine: Any, clock: StageClock) -> None:
        self._engine = engine
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _timed(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._clock.stage("engine"):
            return method(*args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``generate``, timed."""
        return self._timed(self._engine.generate, *args, **kwargs)

    def align(self, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``align``, timed."""
        return self._timed(self._engine.align, *args, **kwargs)

    def detect_language(self, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``detect_language``, timed."""
        return self._timed(self._engine.detect_language, *args, **kwargs)


class StageCounters:
    """Triton custom metric counters ``whisper_model_stage_seconds{stage}``, or nothing where the backend has none.

    Args:
        metric_family: ``triton_python_backend_utils.MetricFamily`` (``None`` = counters off).
        counter_kind: ``MetricFamily.COUNTER``.
    """

    def __init__(self, metric_family: Any | None, counter_kind: Any = None) -> None:
        self._metrics: dict[str, Any] = {}
        self._pending: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._lock = threading.Lock()
        if metric_family is None:
            return
        self._family = metric_family(
            name=METRIC,
            description="Seconds of whisper model executions by stage: parse, engine, decoding (layer), response.",
            kind=counter_kind,
        )
        self._metrics = {name: self._family.Metric(labels={"stage": name}) for name in STAGES}

    @property
    def enabled(self) -> bool:
        """True when the counters exist."""
        return bool(self._metrics)

    def add(self, clock: StageClock) -> None:
        """Note one execution's stage seconds (any thread); :meth:`flush` adds them to the counters."""
        with self._lock:
            for name in STAGES:
                self._pending[name] += clock.seconds[name]

    def take(self) -> dict[str, float]:
        """The seconds noted since the last ``take``/``flush``, removed (the engine core ships them to the stub)."""
        with self._lock:
            pending, self._pending = self._pending, dict.fromkeys(STAGES, 0.0)
        return pending

    def note(self, seconds: dict[str, float]) -> None:
        """Note seconds per stage taken elsewhere (another process's :meth:`take`); unknown stages are ignored."""
        with self._lock:
            for name in STAGES:
                self._pending[name] += float(seconds.get(name, 0.0))

    def flush(self) -> None:
        """Add the seconds noted since the last flush to the counters (one thread at a time)."""
        pending = self.take()
        for name, metric in self._metrics.items():
            if pending[name]:
                metric.increment(pending[name])


__all__: Sequence[str] = ("METRIC", "STAGES", "StageClock", "StageCounters", "TimedEngine")
