"""Stop a batch nobody waits for: checked before every engine call, counted on Triton's metrics port.

When a gateway request ends early — its client disconnected, or it hit the request timeout — the
gateway cancels its gRPC call, and Triton marks the request cancelled (Triton's request
cancellation, docs ``user_guide/request_cancellation.md``); the decoupled front polls the response
sender's ``is_cancelled()`` (python_backend README "Request Cancellation Handling") and cancels the
request's future in the scheduler. :class:`CancellableEngine` asks before each ``generate`` (one per temperature-fallback pass) and
each ``align`` whether *every* request of the batch is cancelled; if so it raises
:class:`BatchCancelled` instead of calling the engine, so the device stops within the pass in
progress. A batch shared with a live request runs on (its cost is bounded by that batch).

Counters (custom metrics): ``whisper_model_engine_windows_total`` (windows handed to the engine, a fallback
counting again) and ``whisper_model_cancelled_batches_total`` (batches stopped), noted on any thread and
flushed to Triton on the stub's event loop (:meth:`WorkCounters.flush`). Tests measure "the model stopped" with them.
Docs: docs/serving.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["BatchCancelled", "CancellableEngine", "WorkCounters"]

WINDOWS_METRIC = "whisper_model_engine_windows_total"
CANCELLED_METRIC = "whisper_model_cancelled_batches_total"


class BatchCancelled(RuntimeError):
    """Every request of the batch was cancelled by its client; nothing more is computed for it."""


class CancellableEngine:
    """An engine whose ``generate`` / ``align`` first check ``cancelled`` and count the windows they get.

    Every other attribute is the wrapped engine's.

    Args:
        engine: a :class:`~whisper_build.serving.engines.base.WhisperEngine` (or a wrapper of one).
        cancelled: True when nobody waits for the batch any more.
        on_windows: told the window count of each call as it starts (the counter).
    """

    def __init__(
        self, engine: Any, cancelled: Callable[[], bool], on_windows: Callable[[int], None] = lambda _: None
    ) -> None:
        self._engine = engine
        self._cancelled = cancelled
        self._on_windows = on_windows
        self.windows = 0
        """Windows handed to the engine so far."""
        self.stopped = False
        """True once a call was refused because the batch was cancelled."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _check(self, audio: Sequence[Any]) -> None:
        if self._cancelled():
            self.stopped = True
            raise BatchCancelled("cancelled by the client: every request of the batch was cancelled")
        self.windows += len(audio)
        self._on_windows(len(audio))

    def generate(self, audio: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        """The engine's ``generate`` unless the batch is cancelled (:class:`BatchCancelled`)."""
        self._check(audio)
        return self._engine.generate(audio, *args, **kwargs)

    def align(self, audio: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        """The engine's ``align`` unless the batch is cancelled (:class:`BatchCancelled`)."""
        self._check(audio)
        return self._engine.align(audio, *args, **kwargs)


class WorkCounters:
    """The two counters of the module docstring, or nothing where the backend has no custom metrics.

    Args:
        metric_family: ``triton_python_backend_utils.MetricFamily`` (``None`` = counters off).
        counter_kind: ``MetricFamily.COUNTER``.
    """

    def __init__(self, metric_family: Any | None, counter_kind: Any = None) -> None:
        self._windows: Any = None
        self._cancelled: Any = None
        self._pending = [0, 0]  # windows, cancelled executions: noted, not yet flushed
        self._lock = threading.Lock()
        if metric_family is None:
            return
        self._windows_family = metric_family(
            name=WINDOWS_METRIC, description="Windows handed to the engine (fallback re-decodes count again).",
            kind=counter_kind,
        )  # fmt: skip
        self._cancelled_family = metric_family(
            name=CANCELLED_METRIC, description="Executions stopped because every request was cancelled.",
            kind=counter_kind,
        )  # fmt: skip
        self._windows = self._windows_family.Metric(labels={})
        self._cancelled = self._cancelled_family.Metric(labels={})

    def count_windows(self, windows: int) -> None:
        """Windows handed to the engine by one call, noted as the call starts (any thread)."""
        with self._lock:
            self._pending[0] += windows

    def add(self, engine: CancellableEngine) -> None:
        """Note the execution when it was stopped (any thread)."""
        if engine.stopped:
            with self._lock:
                self._pending[1] += 1

    def take(self) -> tuple[int, int]:
        """``(windows, stopped executions)`` noted since the last ``take``/``flush``, removed."""
        with self._lock:
            (windows, cancelled), self._pending = self._pending, [0, 0]
        return windows, cancelled

    def note(self, windows: int, cancelled: int) -> None:
        """Note counts taken elsewhere (another process's :meth:`take`)."""
        with self._lock:
            self._pending[0] += int(windows)
            self._pending[1] += int(cancelled)

    def flush(self) -> None:
        """Add what was noted since the last flush to the counters (one thread at a time)."""
        windows, cancelled = self.take()
        if self._windows is not None and windows:
            self._windows.increment(windows)
        if self._cancelled is not None and cancelled:
            self._cancelled.increment(cancelled)
