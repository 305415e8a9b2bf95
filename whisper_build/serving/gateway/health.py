"""Model health as the gateway sees it: a canary inference every few seconds, client outcomes, repair.

Triton's health endpoints cannot see a dead model: with the python backend's stub process killed,
``/v2/health/live``, ``/v2/health/ready`` and the model's ready endpoint stay 200 while every
inference fails. So :class:`ModelHealth` judges the model by what it does:

* a background task sends :data:`CANARY_SECONDS` of silence through the real inference path every
  ``canary_interval_seconds`` while no client request runs (no client traffic needed), with
  ``canary_timeout_seconds``;
* client requests report their outcome too (a success refreshes health; a backend error counts as
  a failure, a timeout does not — it may be the request's own length). While they run, the canary
  pauses: it would only queue behind them, and a timed-out canary is cancelled, which Triton counts
  as a failed request in its own metrics (``nv_inference_request_failure``);
* the model is *unhealthy* — ``/ping`` 503, so the readiness probe and the load balancer take the pod
  out — after ``unhealthy_after_failures`` consecutive failures, or when nothing succeeded for
  ``stale_after_seconds`` (a hung server), or before the first success (still loading). A canary
  that only times out while client requests are running is not a failure, and staleness is not
  judged then: a saturated model is slow, not dead (its requests' own outcomes still count);
* after ``reload_after_failures`` consecutive failures ending in an error (not a timeout: reloading
  a slow but working model would be an outage) the gateway asks the model server to load the
  model again (Triton's repository API; a fresh python stub), with back-off 1 s → 60 s between
  attempts (:class:`whisper_build.serving.backoff.Backoff`). If tritonserver itself died, the
  supervisor restarts it and the model loads on its own; the reload attempts then just fail
  until it is back.

Timing with the defaults (2 s interval, 5 s timeout, 2 failures, 8 s staleness): a dead stub fails
each canary in about a second, so ``/ping`` turns 503 within ~6 s; a hung server within 8 s when
idle — with client requests in flight, once they end (their request timeout at the latest).
Metrics: ``whisper_gateway_backend_failures_total{source}`` and ``whisper_gateway_model_healthy``
(docs/contracts.md §7).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from whisper_build.serving.backoff import Backoff
from whisper_build.serving.gateway.backend import BackendError, BackendTimeout, TranscriptionBackend
from whisper_build.serving.gateway.metrics import GatewayMetrics
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import parse_prompt

__all__ = ["CANARY_SECONDS", "ModelHealth", "canary_clip"]

log = logging.getLogger("whisper.gateway.health")

SAMPLE_RATE = 16_000
"""Whisper's input rate (docs/contracts.md §5)."""
CANARY_SECONDS = 1.0
"""Length of the canary clip: enough to run the encoder and the decoder once, cheap on any GPU."""
RELOAD_TIMEOUT_SECONDS = 600.0
"""Longest wait for the model server to load the model again (large engines load in minutes)."""


def canary_clip() -> npt.NDArray[np.float32]:
    """The built-in canary: :data:`CANARY_SECONDS` of silence, 16 kHz mono float32.

    It checks that the model server executes the model end to end (a transcript comes back), not
    what it transcribes, so silence — deterministic, decoded in one step — serves.
    """
    return np.zeros(int(CANARY_SECONDS * SAMPLE_RATE), dtype=np.float32)


class ModelHealth:
    """Canary loop + outcome bookkeeping + repair; see the module docstring.

    Args:
        settings: canary interval/timeout, thresholds (``WHISPER_GATEWAY_CANARY_*`` etc.).
        metrics: the app's metrics (failures counter, healthy gauge).
        busy: True while client requests are running (admission's count).
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(
        self,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        busy: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._busy = busy
        self._clock = clock
        self.last_failure_timed_out = False
        self.consecutive_failures = 0
        self.last_success: float | None = None
        self.last_error = "no canary inference has succeeded yet (the model is loading)"
        self.reloads = 0
        self._backoff = Backoff()
        self._next_reload_at = 0.0
        self._prefix = parse_prompt("", None).to_text_prefix()
        self._clip = canary_clip()
        metrics.model_healthy.set_function(lambda: float(self.problem() is None))

    def record_success(self) -> None:
        """A canary or client inference came back."""
        self.consecutive_failures = 0
        self.last_success = self._clock()
        self._backoff.reset()

    def record_failure(self, source: str, error: Exception) -> None:
        """A canary (``source="canary"``) or client request (``"request"``) failed in the backend."""
        self.consecutive_failures += 1
        self.last_error = str(error) or type(error).__name__
        self.last_failure_timed_out = isinstance(error, TimeoutError | BackendTimeout)
        self.metrics.backend_failures.labels(source=source).inc()

    def problem(self) -> str | None:
        """Why the model cannot serve now, or ``None`` when it can (``/ping`` answers 200)."""
        settings = self.settings
        if self.last_success is None:
            return self.last_error
        if self.consecutive_failures >= settings.unhealthy_after_failures:
            return f"{self.consecutive_failures} inferences in a row failed; last error: {self.last_error}"
        age = self._clock() - self.last_success
        if age > settings.stale_after_seconds and not self._busy():
            return f"no inference succeeded for {age:.0f} s (limit {settings.stale_after_seconds:g} s)"
        return None

    async def canary(self, backend: TranscriptionBackend) -> bool:
        """One canary inference; records its outcome. True when it succeeded."""
        timeout = self.settings.canary_timeout_seconds
        try:
            async with asyncio.timeout(timeout):
                texts = await backend.transcribe([self._clip], self._prefix, 1.0, timeout)
            if len(texts) != 1:
                raise BackendError(f"canary inference returned {len(texts)} transcripts for 1 window")
        except (BackendError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError | BackendTimeout)
            if timed_out and self._busy():
                return False  # waiting behind client requests: slow, not dead
            self.record_failure("canary", exc if str(exc) else TimeoutError(f"canary took over {timeout:g} s"))
            return False
        self.record_success()
        return True

    async def repair(self, backend: TranscriptionBackend) -> None:
        """Ask the backend to load the model again when failures call for it and back-off allows."""
        now = self._clock()
        if (
            self.consecutive_failures < self.settings.reload_after_failures
            or self.last_failure_timed_out
            or now < self._next_reload_at
        ):
            return
        self.reloads += 1
        delay = self._backoff.next_delay()
        log.error(
            "model %r failed %d inferences in a row (%s); reloading it (attempt %d; next attempt no sooner than"
            " %g s after this one)",
            self.settings.model_name, self.consecutive_failures, self.last_error, self.reloads, delay,
        )  # fmt: skip
        try:
            await backend.reload(RELOAD_TIMEOUT_SECONDS)
        except (BackendError, TimeoutError) as exc:
            log.error("reloading model %r failed: %s", self.settings.model_name, exc)
        self._next_reload_at = self._clock() + delay

    async def run(self, backend: TranscriptionBackend, stop: asyncio.Event) -> None:
        """The canary loop, until ``stop`` is set: canary, repair if needed, sleep the interval."""
        was_healthy = False
        while not stop.is_set():
            if not self._busy():  # while client requests run, their outcomes are the evidence
                await self.canary(backend)
            healthy = self.problem() is None
            if healthy != was_healthy:
                log.log(logging.INFO if healthy else logging.ERROR, "model %r %s", self.settings.model_name,
                        "serves: canary inference succeeded" if healthy else f"cannot serve: {self.problem()}")  # fmt: skip
                was_healthy = healthy
            if not healthy:
                await self.repair(backend)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.canary_interval_seconds)
