"""FastAPI app: the SageMaker-style and OpenAI routers behind API-key authentication.

``/invocations`` and ``/ping`` come from :mod:`.routes.sagemaker`, ``/v1/...`` from
:mod:`.routes.openai`, ``/live`` (liveness, no model call) from :mod:`.routes.liveness`. Build with
:func:`create_app`; ``app`` uses the environment's settings. With API keys configured
(:mod:`.auth`), ``/v1/*`` and ``/invocations`` need one; ``/ping`` and ``/live`` stay open.
Prometheus metrics are not on this app (unless ``metrics_on_traffic_port``): :func:`whisper_build.serving.gateway.metrics.start_metrics_server`
serves them on their own port (``WHISPER_GATEWAY_METRICS_PORT``), because a network load balancer
forwards every path of the traffic port.

Routers live in :mod:`whisper_build.serving.gateway.routes` and share one
:class:`~whisper_build.serving.gateway.pipeline.Pipeline` through a FastAPI dependency; the
lifespan builds it, over the core's ``TranscriptionService`` (``app.state.service``), once the
backend exists (``app.state.pipeline``).
Docs: docs/gateway.md, "Endpoints".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, WebSocket
from fastapi.responses import Response

from whisper_build.serving.gateway.auth import ApiKeyMiddleware, auth_from_settings
from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware
from whisper_build.serving.gateway.disconnect import DisconnectMiddleware
from whisper_build.serving.gateway.errors import install_error_handlers
from whisper_build.serving.gateway.metrics import GatewayMetrics, MetricsMiddleware
from whisper_build.serving.gateway.pipeline import Pipeline
from whisper_build.serving.gateway.routes import liveness, openai, page, sagemaker
from whisper_build.serving.gateway.settings import GatewaySettings
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

INVOCATIONS = sagemaker.INVOCATIONS
OPENAI = openai.TRANSCRIPTIONS
TRANSLATIONS = openai.TRANSLATIONS
METRICS = "/metrics"
REALTIME = "/v1/realtime"
ROUTES = frozenset(
    {INVOCATIONS, OPENAI, openai.TRANSLATIONS, openai.MODELS, openai.MODEL, sagemaker.PING, liveness.LIVE, METRICS}
)
"""Route labels in the gateway's metrics; any other path is counted as ``other``."""

BackendFactory = Callable[[GatewaySettings], TranscriptionBackend]


def create_app(settings: GatewaySettings | None = None, backend_factory: BackendFactory | None = None) -> FastAPI:
    """Build the gateway app.

    Args:
        settings: defaults to :class:`GatewaySettings` read from ``WHISPER_GATEWAY_*``.
        backend_factory: builds the model-server client at startup (default: one
            :class:`TritonBackend` on ``settings.triton_url``); closed at shutdown.
    """
    settings = settings or GatewaySettings()
    factory = backend_factory or (lambda s: TritonBackend(s.triton_url, s.model_name))
    metrics = GatewayMetrics(settings.capacity)
    admission = AdmissionController(
        settings.capacity,
        settings.queue_size,
        settings.queue_timeout_seconds,
        settings.effective_audio_budget_seconds,
    )
    pod = PodView(lambda: PodState(admission.running + admission.waiting, 1.0))
    reader = (
        TritonMetricsReader(settings.triton_metrics_url, settings.model_name) if settings.triton_metrics_url else None
    )
    slots = SessionSlots(settings.realtime_max_sessions)
    health = ModelHealth(
        settings,
        metrics,
        busy=lambda: pod.busy() or slots.used > 0,  # a canary queued behind live updates is slow, not dead
        pod_healthy=lambda: pod.state().healthy,
        triton_load=reader.read if reader is not None else None,
    )
    auth = auth_from_settings(settings)
    live = LiveSessions(  # live sessions: not admitted requests, so neither /ping nor the inflight gauge sees them
        lambda: app.state.live_backend,
        lambda: openai.served_ids(app.state.pipeline),
        slots,
        LiveLimits(
            update_seconds=settings.realtime_update_seconds,
            call_timeout_seconds=settings.realtime_call_timeout_seconds,
            max_event_bytes=settings.realtime_max_event_bytes,
            idle_audio_seconds=settings.realtime_idle_audio_seconds,
            load_test_confirmation=settings.realtime_load_test_confirmation,
        ),
        LiveMetrics(metrics.registry),
        health,
    )
    if settings.realtime_load_test_confirmation:  # visible in the pod's log: never meant for real traffic
        logging.getLogger(__name__).warning(
            "WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION is on: live deltas confirm two words an update "
            "without agreement (load tests only)"
        )

    def start_drain() -> None:
        admission.start_drain()
        live.start_drain()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backend = factory(settings)
        # one reload per worker for the canary and the requests' retries, published to the pod's other workers
        recovery = ModelRecovery(backend, on_reloaded=metrics.model_reloaded.set)
        retrying = RecoveringBackend(backend, recovery, lambda outcome: metrics.window_retries.labels(outcome).inc())
        transcriber = Transcriber(retrying, settings.window_plan())
        app.state.service = TranscriptionService(settings, metrics, admission, health, transcriber)
        app.state.pipeline = Pipeline(settings, app.state.service)
        app.state.live_backend = retrying
        stop_canary = asyncio.Event()
        canary = asyncio.create_task(health.run(backend, stop_canary, recovery.recover), name="canary")
        reloads = asyncio.create_task(_watch_pod_reloads(pod, recovery, settings.canary_interval_seconds))
        if auth is not None:
            await auth.start()
        try:
            yield
        finally:
            start_drain()
            stop_canary.set()
            canary.cancel()
            reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await canary
            with contextlib.suppress(asyncio.CancelledError):
                await reloads
            if auth is not None:
                await auth.stop()
            await backend.close()

    app = FastAPI(
        title="whisper-hyperpod gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.admission = admission
    app.state.metrics = metrics
    app.state.health = health
    app.state.auth = auth
    app.state.live = live
    app.state.start_drain = start_drain
    install_error_handlers(app)
    if settings.metrics_on_traffic_port:

        @app.get(METRICS)
        async def prometheus_metrics() -> Response:
            """Prometheus text exposition of the metrics in docs/contracts.md §7 (inference operator workers)."""
            return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.include_router(sagemaker.router)
    app.include_router(openai.router)
    app.include_router(liveness.router)
    app.include_router(page.router)  # GET /: the try-it page (WHISPER_GATEWAY_PAGE)

    @app.websocket(REALTIME)
    async def realtime(websocket: WebSocket) -> None:
        """OpenAI Realtime transcription sessions (``?intent=transcription``; docs/gateway.md, "Live transcription")."""
        await live.serve(websocket)

    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        setting_name="WHISPER_GATEWAY_MAX_BODY_BYTES",
        max_concurrent=settings.capacity + settings.queue_size,
        retry_after_seconds=settings.retry_after_seconds,
        max_uploads=settings.upload_slots,
        max_buffered_bytes=settings.buffered_bytes_budget,
    )
    if auth is not None:
        # outside the body limit (a request without a key is refused before its body is read),
        # inside the metrics middleware (401s are counted)
        app.add_middleware(ApiKeyMiddleware, auth=auth, retry_after_seconds=settings.retry_after_seconds)
    # outside the body limit (it sees the real body), inside the metrics middleware (499 is counted)
    app.add_middleware(DisconnectMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=ROUTES)
    return app


app: FastAPI
"""The app with the environment's settings (:class:`GatewaySettings`), built on first access."""


def __getattr__(name: str) -> Any:
    """``app`` is built on first access, so importing this module reads no environment."""
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)


async def _watch_pod_reloads(pod: PodView, recovery: ModelRecovery, every_s: float) -> None:
    """Every ``every_s``: a reload by another worker of the pod re-sends what this one queued on the old runtime."""
    while True:
        recovery.observe_pod(pod.state().reloaded_at)
        await asyncio.sleep(every_s)
