"""The gateway's composition root: every object of one gateway process, built from its settings.

:class:`GatewayRuntime` is built outside FastAPI (admission, pod view, Triton metrics reader, session
slots, model health, API keys, live sessions); :meth:`~GatewayRuntime.start` builds the backend and
what stands on it (recovery, the core's ``TranscriptionService``, the routers' ``Pipeline``) and
starts the canary, :meth:`~GatewayRuntime.stop` drains and closes them. The app's lifespan calls the
two (:func:`whisper_build.serving.gateway.app.create_app`), so a test or another server can run the
same objects without a web framework's startup.
Docs: docs/gateway.md, "Endpoints"; docs/serving.md for the canary and the pod-wide reload.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from whisper_build.serving.gateway.auth import auth_from_settings
from whisper_build.serving.gateway.metrics import GatewayMetrics
from whisper_build.serving.gateway.pipeline import Pipeline
from whisper_build.serving.gateway.settings import GatewaySettings, LiveSessionSettings
from whisper_build.serving.realtime.endpoint import LiveSessions
from whisper_build.serving.realtime.ports import LiveMetrics, SessionSlots
from whisper_build.serving.realtime.session import LiveLimits
from whisper_build.serving.transcription.admission import AdmissionController
from whisper_build.serving.transcription.backend import TranscriptionBackend
from whisper_build.serving.transcription.health import ModelHealth
from whisper_build.serving.transcription.pod_view import PodState, PodView
from whisper_build.serving.transcription.recovery import ModelRecovery, RecoveringBackend
from whisper_build.serving.transcription.service import TranscriptionService
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.serving.transcription.triton_load import TritonMetricsReader
from whisper_build.serving.transcription.windows import Transcriber

BackendFactory = Callable[[GatewaySettings], TranscriptionBackend]
"""Builds the model-server client of the settings at startup; closed at shutdown."""

log = logging.getLogger(__name__)


def triton_backend(settings: GatewaySettings) -> TritonBackend:
    """The default backend: one :class:`TritonBackend` on ``settings.triton_url`` for ``settings.model_name``."""
    return TritonBackend(settings.triton_url, settings.model_name)


def live_limits(live: LiveSessionSettings) -> LiveLimits:
    """The per-session limits of the ``WHISPER_GATEWAY_REALTIME_*`` settings."""
    return LiveLimits(
        update_seconds=live.realtime_update_seconds,
        call_timeout_seconds=live.realtime_call_timeout_seconds,
        max_event_bytes=live.realtime_max_event_bytes,
        idle_audio_seconds=live.realtime_idle_audio_seconds,
        load_test_confirmation=live.realtime_load_test_confirmation,
    )


class GatewayRuntime:
    """The objects of one gateway process; :meth:`start` and :meth:`stop` bracket its serving.

    Args:
        settings: the process's settings (one worker's share with several workers).
        backend_factory: builds the model-server client at :meth:`start` (default :func:`triton_backend`).

    Attributes:
        pipeline: the routers' :class:`Pipeline`; set by :meth:`start`.
        live_backend: the backend live sessions call (with the requests' retries); set by :meth:`start`.
    """

    def __init__(self, settings: GatewaySettings, backend_factory: BackendFactory | None = None) -> None:
        self.settings = settings
        self._backend_factory = backend_factory or triton_backend
        self.metrics = GatewayMetrics(settings.admission.capacity)
        self.admission = AdmissionController(
            settings.admission.capacity,
            settings.admission.queue_size,
            settings.admission.queue_timeout_seconds,
            settings.effective_audio_budget_seconds,
        )
        self.pod = PodView(lambda: PodState(self.admission.running + self.admission.waiting, 1.0))
        self.slots = SessionSlots(settings.live.realtime_max_sessions)
        self.health = self._model_health()
        self.auth = auth_from_settings(settings)
        self.live = LiveSessions(  # not admitted requests: neither /ping nor the inflight gauge sees them
            lambda: self.live_backend,
            lambda: settings.served_ids,
            self.slots,
            live_limits(settings.live),
            LiveMetrics(self.metrics.registry),
            self.health,
        )
        if settings.live.realtime_load_test_confirmation:  # visible in the pod's log: never meant for real traffic
            log.warning(
                "WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION is on: live deltas confirm two words an update "
                "without agreement (load tests only)"
            )
        self.pipeline: Pipeline
        self.live_backend: TranscriptionBackend
        self._backend: TranscriptionBackend | None = None
        self._stop_canary = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def _model_health(self) -> ModelHealth:
        """The canary's record; a canary queued behind requests or live updates is slow, not dead."""
        settings = self.settings
        reader = (
            TritonMetricsReader(settings.triton_metrics_url, settings.model_name)
            if settings.triton_metrics_url
            else None
        )
        return ModelHealth(
            settings.health,
            self.metrics,
            model_name=settings.model_name,
            request_timeout_seconds=settings.requests.request_timeout_seconds,
            busy=lambda: self.pod.busy() or self.slots.used > 0,
            pod_healthy=lambda: self.pod.state().healthy,
            triton_load=reader.read if reader is not None else None,
        )

    async def start(self) -> None:
        """Build the backend and the service on it; start the canary, the pod-reload watch and the API keys."""
        backend = self._backend = self._backend_factory(self.settings)
        # one reload per worker for the canary and the requests' retries, published to the pod's other workers
        recovery = ModelRecovery(backend, on_reloaded=self.metrics.model_reloaded.set)
        retrying = RecoveringBackend(
            backend, recovery, lambda outcome: self.metrics.window_retries.labels(outcome).inc()
        )
        transcriber = Transcriber(retrying, self.settings.requests.window_plan())
        service = TranscriptionService(self.settings.requests, self.metrics, self.admission, self.health, transcriber)
        self.pipeline = Pipeline(self.settings, service)
        self.live_backend = retrying
        self._stop_canary = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self.health.run(backend, self._stop_canary, recovery.recover), name="canary"),
            asyncio.create_task(self._watch_pod_reloads(recovery), name="pod-reloads"),
        ]
        if self.auth is not None:
            await self.auth.start()

    def start_drain(self) -> None:
        """Refuse new requests and live sessions (``/ping`` 503); safe from a signal handler."""
        self.admission.start_drain()
        self.live.start_drain()

    async def stop(self) -> None:
        """Drain, stop the canary and the watch, stop the API keys' refresh, close the backend."""
        self.start_drain()
        self._stop_canary.set()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.auth is not None:
            await self.auth.stop()
        if self._backend is not None:
            await self._backend.close()

    async def _watch_pod_reloads(self, recovery: ModelRecovery) -> None:
        """Each canary interval: a reload by another worker re-sends what this one queued on the old runtime."""
        while True:
            recovery.observe_pod(self.pod.state().reloaded_at)
            await asyncio.sleep(self.settings.health.canary_interval_seconds)
