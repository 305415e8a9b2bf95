"""What a live session needs from its host (the gateway): small Protocols, and the default implementations.

:class:`SessionLimiter` bounds open sessions (the gateway gives each worker process its share of the
pod's bound); :class:`HealthRecorder` is told of model calls that succeed or fail (the gateway's model
health); :class:`LiveMetrics` holds the Prometheus series named in :mod:`whisper_build.contracts.live_metrics`.
Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from whisper_build.contracts import live_metrics as names

__all__ = ["HealthRecorder", "LiveMetrics", "SessionLimiter", "SessionSlots"]

_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30)
_SESSION_BUCKETS = (1, 10, 60, 300, 900, 1800, 3600)


class SessionLimiter(Protocol):
    """Open-session slots of one process."""

    def try_acquire(self) -> bool:
        """Take a slot; ``False`` when none is free."""
        ...

    def release(self) -> None:
        """Give a slot back."""
        ...


class HealthRecorder(Protocol):
    """The host's model-health record (the gateway's ``ModelHealth``)."""

    def record_success(self) -> None:
        """A model call came back."""
        ...

    def record_failure(self, source: str, error: Exception) -> None:
        """A model call failed (``source`` = ``"request"``)."""
        ...


class SessionSlots:
    """A :class:`SessionLimiter` of ``limit`` slots (one event loop; no locking needed)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def try_acquire(self) -> bool:
        """See :class:`SessionLimiter`."""
        if self.used >= self.limit:
            return False
        self.used += 1
        return True

    def release(self) -> None:
        """See :class:`SessionLimiter`."""
        self.used = max(0, self.used - 1)


class LiveMetrics:
    """The live series on ``registry`` (the gateway's, so one scrape and multiprocess mode cover them)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.active = Gauge(names.SESSIONS_ACTIVE, "Open Realtime transcription sessions.", registry=registry,
                            multiprocess_mode="livesum")  # fmt: skip
        self.refused = Counter(names.SESSIONS_REFUSED, "Sessions refused.", ["reason"], registry=registry)
        self.duration = Histogram(names.SESSION_DURATION, "Session wall time, seconds.", buckets=_SESSION_BUCKETS,
                                  registry=registry)  # fmt: skip
        self.first_delta = Histogram(names.FIRST_DELTA, "Speech start to first delta, seconds.",
                                     buckets=_LATENCY_BUCKETS, registry=registry)  # fmt: skip
        self.finalisation = Histogram(names.FINALISATION, "Turn end to completed, seconds.",
                                      buckets=_LATENCY_BUCKETS, registry=registry)  # fmt: skip
        self.updates = Counter(names.UPDATES, "Turn updates decoded.", registry=registry)
        self.dropped = Counter(names.UPDATES_DROPPED, "Updates dropped as stale.", registry=registry)
        self.windows = Counter(names.UPDATE_WINDOWS, "Windows sent for updates and finals.", registry=registry)
        self.failed = Counter(names.TURNS_FAILED, "Turns ended as failed (nothing confirmed).", registry=registry)
        self.final_retries = Counter(names.FINAL_RETRIES, "Final decodes retried after their deadline.",
                                     registry=registry)  # fmt: skip
