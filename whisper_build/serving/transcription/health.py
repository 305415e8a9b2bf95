"""Model health as a serving worker sees it: a canary inference every few seconds, client outcomes, repair.

Triton's health endpoints stay 200 when the python stub is dead, so :class:`ModelHealth` judges the
model by what it does: canaries of :data:`CANARY_SECONDS` of silence, client outcomes, the pod-wide
view (:class:`~.pod_view.PodView`) and Triton's own metrics (:class:`~.triton_load.SharedLoad`); it
reloads a failed model with back-off. Entry points: :class:`ModelHealth` (the gateway's ``/ping``
answers :meth:`ModelHealth.pod_problem`), :class:`HealthSettings`.
The rules, as one state table: docs/gateway.md, "`GET /ping` (readiness): the health rules".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from whisper_build.serving.backoff import Backoff
from whisper_build.serving.prompt import parse_prompt
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendTimeout,
    CoreRestarting,
    ModelRestarting,
    TranscriptionBackend,
    WindowRequest,
)
from whisper_build.serving.transcription.metrics import TranscriptionMetrics
from whisper_build.serving.transcription.recovery import RELOAD_TIMEOUT_SECONDS
from whisper_build.serving.transcription.triton_load import SharedLoad, TritonLoad

__all__ = ["CANARY_SECONDS", "CANARY_STREAM_GRACE_S", "HealthSettings", "ModelHealth", "canary_clip"]

log = logging.getLogger("whisper.gateway.health")  # the name operators' log filters know

SAMPLE_RATE = 16_000
"""Whisper's input rate (docs/contracts.md §5)."""
CANARY_SECONDS = 1.0
"""Length of the canary clip: enough to run the encoder and the decoder once, cheap on any GPU."""
VERDICT_GRACE_S = 3.0
"""Seconds past a canary's timeout for its verdict (reading Triton's load: 2 s at most); staleness waits that long."""
CANARY_STREAM_GRACE_S = 1.0
"""Seconds a canary's stream outlives its timer: at the timeout the canary still waits at Triton, where the
model scheduler counts it as queued when the load is read (a busy model, not a stuck canary)."""


def canary_clip() -> npt.NDArray[np.float32]:
    """The built-in canary: :data:`CANARY_SECONDS` of silence, 16 kHz mono float32.

    It checks that the model server executes the model end to end (a transcript comes back), not
    what it transcribes, so silence — deterministic, decoded in one step — serves.
    """
    return np.zeros(int(CANARY_SECONDS * SAMPLE_RATE), dtype=np.float32)


class HealthSettings(Protocol):
    """The health rules' bounds (the gateway's ``WHISPER_GATEWAY_*`` settings of the same names)."""

    @property
    def canary_interval_seconds(self) -> float:
        """Pause between canaries."""

    @property
    def canary_timeout_seconds(self) -> float:
        """Longest canary with the pod idle and Triton not busy with other clients."""

    @property
    def hang_after_seconds(self) -> float:
        """Longest canary, and staleness, while other clients keep Triton busy."""

    @property
    def stale_after_seconds(self) -> float:
        """No success for this long with the pod idle: cannot serve."""

    @property
    def unhealthy_after_failures(self) -> int:
        """Failures in a row that mean: cannot serve."""

    @property
    def reload_after_failures(self) -> int:
        """Failures in a row after which the model is loaded again."""


class ModelHealth:
    """Canary loop + outcome bookkeeping + repair; see the module docstring.

    Args:
        settings: canary interval/timeout, thresholds (:class:`HealthSettings`).
        metrics: the worker's metrics (failures counter, healthy gauge).
        model_name: the served model's name (for the log).
        request_timeout_seconds: longest canary while the pod has requests in flight, seconds.
        busy: True while client requests are running — in the whole pod
            (:class:`~.pod_view.PodView`), not only this worker.
        clock: monotonic seconds (tests pass a fake).
        pod_healthy: the lowest model health over the pod's workers (1.0 = every worker serves).
        triton_load: reads Triton's metrics for the model
            (:meth:`~.triton_load.TritonMetricsReader.read`); ``None``: a canary that times out
            with the pod idle is always a failure.
    """

    def __init__(
        self,
        settings: HealthSettings,
        metrics: TranscriptionMetrics,
        *,
        model_name: str,
        request_timeout_seconds: float,
        busy: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
        pod_healthy: Callable[[], float] = lambda: 1.0,
        triton_load: Callable[[], Awaitable[TritonLoad | None]] | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.model_name = model_name
        self.request_timeout_seconds = request_timeout_seconds
        self._busy = busy
        self._clock = clock
        self.last_failure_timed_out = False
        self.last_failure_restarting = False
        self.last_failure_core = False
        self.consecutive_failures = 0
        self.last_success: float | None = None
        self.last_error = "no canary inference has succeeded yet (the model is loading)"
        self.speaker_failure: str | None = None
        """Why the speaker model refuses every request (it was marked failed); ``None`` while it may serve."""
        self.reloads = 0
        self._backoff = Backoff()
        self._next_reload_at = 0.0
        self._request = WindowRequest(parse_prompt("", None))
        self._clip = canary_clip()
        self._pod_healthy = pod_healthy
        self._triton_load = triton_load
        self.shared = SharedLoad(settings.hang_after_seconds, clock)
        self._was_shared_busy = False
        self._canary_verdict_by = float("-inf")
        """Clock time by which the canary in flight is judged (its timeout, then Triton's load read); -inf: none."""
        self.publish()

    def publish(self) -> None:
        """Write this worker's health to ``whisper_gateway_model_healthy`` (a set value: multiprocess mode reads files)."""
        self.metrics.model_health(self.problem() is None, self.shared.busy)

    def record_success(self) -> None:
        """A canary or client inference came back."""
        self.consecutive_failures = 0
        self.last_success = self._clock()
        self._backoff.reset()
        self.publish()

    def record_failure(self, source: str, error: Exception) -> None:
        """A canary (``source="canary"``) or client request (``"request"``) failed in the backend."""
        self.consecutive_failures += 1
        self.last_error = str(error) or type(error).__name__
        self.last_failure_timed_out = isinstance(error, TimeoutError | BackendTimeout)
        self.last_failure_restarting = isinstance(error, ModelRestarting)
        self.last_failure_core = isinstance(error, CoreRestarting)
        self.metrics.backend_failed(source)
        self.publish()

    def problem(self) -> str | None:
        """Why the model cannot serve now, or ``None`` when it can (``/ping`` answers 200)."""
        settings = self.settings
        if self.last_success is None:
            if self.consecutive_failures == 0 and self._busy():
                # a worker that started while the pod's other requests hold the model: its first canary
                # waits behind them; busy, not loading (a dead model fails that canary at once)
                return None
            return self.last_error
        if self.last_failure_restarting and self.consecutive_failures:  # unambiguous: no second failure needed
            return f"the model's runtime died and is being loaded again; last error: {self.last_error}"
        if self.last_failure_core and self.consecutive_failures:  # the model restarts its core
            return f"the model's engine core died and is being started again; last error: {self.last_error}"
        if self.consecutive_failures >= settings.unhealthy_after_failures:
            return f"{self.consecutive_failures} inferences in a row failed; last error: {self.last_error}"
        now = self._clock()
        age, judging = now - self.last_success, now < self._canary_verdict_by  # judging: a canary in flight decides
        if age > settings.stale_after_seconds and not judging and not self._busy() and not self.shared.busy:
            return f"no inference succeeded for {age:.0f} s (limit {settings.stale_after_seconds:g} s)"
        return None

    def pod_problem(self) -> str | None:
        """Why the pod cannot serve: this worker's :meth:`problem`, or another worker's; ``None`` when all serve."""
        own = self.problem()
        if own is not None:
            return own
        if self._pod_healthy() < 1.0:
            return "another gateway worker of this pod found the model unable to serve (its /ping says why)"
        return None

    async def first_verdict(self, timeout_s: float, poll_s: float = 0.05) -> None:
        """Wait until the pod serves (:meth:`pod_problem` is ``None``) or this worker's canary failed.

        At most ``timeout_s`` seconds. The gateway's start waits for it, so the server's "Application
        startup complete" comes with ``/ping`` 200 when the model serves; a model that is down or
        still loading fails the first canary and the gateway starts at once (``/ping`` 503, the reason).
        """
        deadline = self._clock() + timeout_s
        while self.pod_problem() is not None and self.consecutive_failures == 0 and self._clock() < deadline:
            await asyncio.sleep(poll_s)

    async def canary(self, backend: TranscriptionBackend) -> bool:
        """One canary inference; records its outcome. True when it succeeded.

        While the pod has requests in progress the canary may wait behind them, up to the request
        timeout; while another client keeps Triton busy (:attr:`shared`), up to ``hang_after_seconds``:
        a dead model fails it at once, a busy one is only slow.
        """
        busy = self._busy()
        timeout = self._canary_timeout(busy)
        # staleness waits for this canary's verdict, no longer than an idle pod's canary (busy excuses the rest)
        self._canary_verdict_by = self._clock() + self.settings.canary_timeout_seconds + VERDICT_GRACE_S
        load_at_timeout: TritonLoad | None = None
        call = asyncio.ensure_future(backend.infer([self._clip], self._request, timeout + CANARY_STREAM_GRACE_S))
        try:
            answered = await self._wait_probing(backend, call, timeout)
            if answered is None:
                if self._triton_load is not None:  # read while the scheduler still counts the canary as queued
                    load_at_timeout = await self._triton_load()
                raise TimeoutError(f"canary took over {timeout:g} s")
            texts = answered.result()
            if len(texts) != 1:
                raise BackendError(f"canary inference returned {len(texts)} transcripts for 1 window")
        except (BackendError, TimeoutError) as exc:
            timed_out = isinstance(exc, TimeoutError | BackendTimeout)
            if timed_out and (busy or self._busy()):
                return False  # waiting behind client requests: slow, not dead
            if timed_out and await self._busy_with_others(load_at_timeout):
                return False  # waiting behind another client's work on Triton: slow, not dead
            self.shared.observe(None)
            self._log_shared_busy()
            self.record_failure("canary", exc if str(exc) else TimeoutError(f"canary took over {timeout:g} s"))
            return False
        finally:
            self._canary_verdict_by = float("-inf")
            if not call.done():  # timed out, or this task was cancelled: cancelling the stream cancels the canary
                call.cancel()
        self.record_success()  # before the load read below: the model answered now, whatever that read takes
        if self._triton_load is not None:
            self.shared.observe(await self._triton_load())
            self._log_shared_busy()
        return True

    async def _canary_published(self, backend: TranscriptionBackend) -> bool:
        """:meth:`canary`, publishing the verdict every canary interval while it waits.

        The gauge is what the pod's other workers answer ``/ping`` from, and the verdict moves while a
        canary waits: a worker created while the pod was idle publishes "loading", and its first canary
        may then wait behind another worker's long request for minutes (busy, not loading).
        """
        call = asyncio.ensure_future(self.canary(backend))
        try:
            while not (await asyncio.wait({call}, timeout=self.settings.canary_interval_seconds))[0]:
                self.publish()
            return call.result()
        finally:
            if not call.done():  # the loop was stopped mid-canary
                call.cancel()

    async def _wait_probing(
        self, backend: TranscriptionBackend, call: asyncio.Future[Any], timeout: float
    ) -> asyncio.Future[Any] | None:
        """Wait up to ``timeout`` s for the canary ``call``; the call once finished, ``None`` at the timeout.

        A long wait (the pod busy) is probed after each ``canary_timeout_seconds``: a second canary that
        reaches the model's runtime now. A dead stub never answers what it held, but fails a new call at
        once, so the probe's :class:`ModelRestarting` is raised here; a probe that answers is returned
        (the runtime serves: the held canary was lost with a stub another worker replaced); a probe that
        only waits is cancelled (a busy model).
        """
        loop = asyncio.get_running_loop()
        every = self.settings.canary_timeout_seconds  # a probe that only waits is abandoned: keep them rare
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            if (await asyncio.wait({call}, timeout=min(left, every)))[0]:
                return call
            if left <= every:
                break
            probe = asyncio.ensure_future(backend.infer([self._clip], self._request, every + CANARY_STREAM_GRACE_S))
            try:
                await asyncio.wait(
                    {call, probe}, timeout=min(every, deadline - loop.time()), return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                if not probe.done():
                    probe.cancel()
            answered = probe.done() and not probe.cancelled()
            error = probe.exception() if answered else None
            if isinstance(error, ModelRestarting):
                raise error
            if answered and error is None and not call.done():
                return probe
        return call if call.done() else None

    def _canary_timeout(self, pod_busy: bool) -> float:
        """Seconds the next canary may take: the request timeout while the pod is busy, the hang bound while others keep Triton busy."""
        if pod_busy:
            return self.request_timeout_seconds
        return self.settings.hang_after_seconds if self.shared.busy else self.settings.canary_timeout_seconds

    async def _busy_with_others(self, load: TritonLoad | None = None) -> bool:
        """After a canary timed out with the pod idle: does Triton say another client keeps the model busy?

        ``load``: the reading taken at the timeout, the canary still queued (``None``: read now).
        """
        if self._triton_load is None:
            return False
        busy = self.shared.canary_timed_out(load if load is not None else await self._triton_load())
        self._log_shared_busy()
        return busy

    def _log_shared_busy(self) -> None:
        """Log when the model starts or stops being busy with other clients' work (and publish it)."""
        busy = self.shared.busy
        if busy != self._was_shared_busy:
            if busy:
                log.warning(
                    "model %r is busy with other clients' work on Triton: %d window(s) queued, last window"
                    " finished %.0f s ago; the canary waits up to %g s (slow, not dead)",
                    self.model_name, self.shared.queued, self.shared.progress_age(),
                    self.settings.hang_after_seconds,
                )  # fmt: skip
            else:
                log.info("model %r is no longer busy with other clients' work", self.model_name)
            self._was_shared_busy = busy
        self.publish()

    async def repair(self, backend: TranscriptionBackend, reload: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Ask the backend to load the model again when failures call for it and back-off allows.

        A dead runtime (:class:`ModelRestarting`) calls for it at once; ``reload`` (the worker's
        :meth:`whisper_build.serving.transcription.recovery.ModelRecovery.recover`, shared with the
        requests' retries) replaces ``backend.reload``.
        """
        now = self._clock()
        if self.last_failure_core:  # the model starts its engine core again by itself; a reload would only add one
            return
        if (
            (self.consecutive_failures < self.settings.reload_after_failures and not self.last_failure_restarting)
            or self.last_failure_timed_out
            or now < self._next_reload_at
        ):
            return
        self.reloads += 1
        delay = self._backoff.next_delay()
        log.error(
            "model %r failed %d inferences in a row (%s); reloading it (attempt %d; next attempt no sooner than"
            " %g s after this one)",
            self.model_name, self.consecutive_failures, self.last_error, self.reloads, delay,
        )  # fmt: skip
        try:
            if reload is not None:
                await reload()
            else:
                await backend.reload(RELOAD_TIMEOUT_SECONDS)
        except (BackendError, TimeoutError) as exc:
            log.error("reloading model %r failed: %s", self.model_name, exc)
        self._next_reload_at = self._clock() + delay

    async def check_speakers(self, backend: TranscriptionBackend) -> None:
        """Probe the speaker model; a failed one is named in ``/ping`` and the metric (transcription is unaffected)."""
        probe = getattr(backend, "speaker_problem", None)  # test doubles of the seam may lack it
        if probe is None:
            return
        failure = self.speaker_failure
        with contextlib.suppress(BackendError, TimeoutError):  # busy or unreachable: keep the last answer
            failure = await probe(self.settings.canary_timeout_seconds)
        if failure != self.speaker_failure:
            log.log(logging.ERROR if failure else logging.INFO, "speaker model: %s", failure or "serves again")
        self.speaker_failure = failure
        self.metrics.speaker_model_failed(failure is not None)

    async def run(
        self, backend: TranscriptionBackend, stop: asyncio.Event, reload: Callable[[], Awaitable[bool]] | None = None
    ) -> None:
        """The canary loop, until ``stop`` is set: canary, repair if needed (with ``reload``), sleep the interval."""
        was_healthy = False
        while not stop.is_set():
            await self._canary_published(backend)  # also while busy: another worker's requests tell this one nothing
            await self.check_speakers(backend)
            self.publish()
            healthy = self.problem() is None
            if healthy != was_healthy:
                log.log(logging.INFO if healthy else logging.ERROR, "model %r %s", self.model_name,
                        "serves: canary inference succeeded" if healthy else f"cannot serve: {self.problem()}")  # fmt: skip
                was_healthy = healthy
            if not healthy:
                await self.repair(backend, reload)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.settings.canary_interval_seconds)
