"""The pod's view of its worker processes: requests in flight and model health over all of them.

With ``WHISPER_GATEWAY_WORKERS`` > 1 each worker process judges the model on its own, and a worker
that serves nothing cannot tell "the model is busy with another worker's hour-long upload" from
"the model is dead". Every worker already writes its metrics to prometheus-client's multiprocess
directory (:func:`multiprocess_dir`), so the pod-wide figures are there:
``whisper_gateway_inflight_requests`` summed over live workers and ``whisper_gateway_model_healthy``
the minimum over live workers. :class:`PodView` reads them (at most every ``cache_seconds``), so
that a canary that waits behind any worker's requests counts as busy-not-dead, and ``/ping``
answers the same from every worker. Without multiprocess mode (one process) it is that process's own.
Docs: docs/serving.md, "Gateway worker processes (`WHISPER_GATEWAY_WORKERS`)".
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from whisper_build.contracts.gateway_metrics import HEALTHY, INFLIGHT, RELOADED

__all__ = ["PodState", "PodView", "multiprocess_dir"]


def multiprocess_dir() -> str | None:
    """``PROMETHEUS_MULTIPROC_DIR`` when prometheus-client's multiprocess mode is on, else ``None``."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


@dataclass(frozen=True)
class PodState:
    """The pod's workers together.

    ``inflight``: requests in progress in every worker; ``healthy``: lowest worker health (1.0 = all serve);
    ``reloaded_at``: unix time a worker last loaded the model again (0 = never).
    """

    inflight: float
    healthy: float
    reloaded_at: float = 0.0


class PodView:
    """Pod-wide in-flight requests and model health.

    Args:
        local: this process's own state (used when there is no multiprocess directory).
        cache_seconds: how long one reading of the directory is reused.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self, local: Callable[[], PodState], cache_seconds: float = 0.5, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._local = local
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._read_at = float("-inf")
        self._state = PodState(0.0, 1.0)

    def state(self) -> PodState:
        """The pod's state now (or as read less than ``cache_seconds`` ago)."""
        path = multiprocess_dir()
        if path is None:
            return self._local()
        now = self._clock()
        if now - self._read_at >= self._cache_seconds:
            self._state, self._read_at = _read(path, self._local()), now
        return self._state

    def busy(self) -> bool:
        """True while any worker of the pod has a request in progress."""
        return self.state().inflight > 0


def _read(path: str, fallback: PodState) -> PodState:
    from prometheus_client import multiprocess

    values: dict[str, float] = {}
    for family in multiprocess.MultiProcessCollector(None, path).collect():  # type: ignore[no-untyped-call]
        for sample in family.samples:
            if sample.name in (INFLIGHT, HEALTHY, RELOADED):
                values[sample.name] = sample.value
    return PodState(
        values.get(INFLIGHT, fallback.inflight),
        values.get(HEALTHY, fallback.healthy),
        values.get(RELOADED, fallback.reloaded_at),
    )
