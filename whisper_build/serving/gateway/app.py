"""FastAPI app: the SageMaker-style and OpenAI routers behind API-key authentication.

``/invocations`` and ``/ping`` come from :mod:`.routes.sagemaker`, ``/v1/...`` from
:mod:`.routes.openai`, ``/live`` (liveness, no model call) from :mod:`.routes.liveness`. Build with
:func:`create_app`; ``app`` uses the environment's settings. With API keys configured
(:mod:`.auth`), ``/v1/*`` and ``/invocations`` need one; ``/ping`` and ``/live`` stay open.
Prometheus metrics are not on this app (unless ``metrics_on_traffic_port``): :func:`whisper_build.serving.gateway.metrics.start_metrics_server`
serves them on their own port (``WHISPER_GATEWAY_METRICS_PORT``), because a network load balancer
forwards every path of the traffic port.

:func:`create_app` only mounts routes and middleware: the objects they share are built by the
composition root, :class:`~whisper_build.serving.gateway.runtime.GatewayRuntime` (``app.state.runtime``),
which the lifespan starts and stops.
Docs: docs/gateway.md, "Endpoints".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, WebSocket
from fastapi.responses import Response

from whisper_build.serving.gateway.auth import ApiKeyMiddleware
from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware
from whisper_build.serving.gateway.disconnect import DisconnectMiddleware
from whisper_build.serving.gateway.errors import install_error_handlers
from whisper_build.serving.gateway.metrics import MetricsMiddleware
from whisper_build.serving.gateway.routes import liveness, openai, page, sagemaker
from whisper_build.serving.gateway.runtime import BackendFactory, GatewayRuntime
from whisper_build.serving.gateway.settings import GatewaySettings

INVOCATIONS = sagemaker.INVOCATIONS
OPENAI = openai.TRANSCRIPTIONS
TRANSLATIONS = openai.TRANSLATIONS
METRICS = "/metrics"
REALTIME = "/v1/realtime"
ROUTES = frozenset(
    {INVOCATIONS, OPENAI, openai.TRANSLATIONS, openai.MODELS, openai.MODEL, sagemaker.PING, liveness.LIVE, METRICS}
)
"""Route labels in the gateway's metrics; any other path is counted as ``other``."""


def create_app(settings: GatewaySettings | None = None, backend_factory: BackendFactory | None = None) -> FastAPI:
    """Build the gateway app: the runtime of ``settings``, its routes and its middleware.

    Args:
        settings: defaults to :class:`GatewaySettings` read from ``WHISPER_GATEWAY_*``.
        backend_factory: builds the model-server client at startup (default: one
            :class:`~whisper_build.serving.transcription.triton.TritonBackend` on ``settings.triton_url``);
            closed at shutdown.
    """
    runtime = GatewayRuntime(settings or GatewaySettings(), backend_factory)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.start()
        try:
            await runtime.health.first_verdict(
                2 * runtime.settings.health.canary_timeout_seconds
            )  # started: /ping 200, or 503 with why
            yield
        finally:
            await runtime.stop()

    app = FastAPI(title="whisper-hyperpod gateway", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runtime = runtime
    install_error_handlers(app)
    _mount_routes(app, runtime)
    _add_middleware(app, runtime)
    return app


def _mount_routes(app: FastAPI, runtime: GatewayRuntime) -> None:
    """The SageMaker, OpenAI and liveness routers, the live sessions' WebSocket and, if asked, ``/metrics``."""
    if runtime.settings.server.metrics_on_traffic_port:

        @app.get(METRICS)
        async def prometheus_metrics() -> Response:
            """Prometheus text exposition of the metrics in docs/contracts.md §7 (inference operator workers)."""
            return Response(runtime.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.include_router(sagemaker.router)
    app.include_router(openai.router)
    app.include_router(liveness.router)
    app.include_router(page.router)  # GET /: the try-it page (WHISPER_GATEWAY_PAGE)

    @app.websocket(REALTIME)
    async def realtime(websocket: WebSocket) -> None:
        """OpenAI Realtime transcription sessions (``?intent=transcription``; docs/gateway.md, "Live transcription")."""
        await runtime.live.serve(websocket)


def _add_middleware(app: FastAPI, runtime: GatewayRuntime) -> None:
    """Body limit innermost, then API keys, disconnects, and metrics outermost (every answer is counted)."""
    settings = runtime.settings
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.uploads.max_body_bytes,
        setting_name="WHISPER_GATEWAY_MAX_BODY_BYTES",
        max_concurrent=settings.admission.capacity + settings.admission.queue_size,
        retry_after_seconds=settings.retry_after_seconds,
        max_uploads=settings.upload_slots,
        max_buffered_bytes=settings.buffered_bytes_budget,
    )
    if runtime.auth is not None:
        # outside the body limit (a request without a key is refused before its body is read),
        # inside the metrics middleware (401s are counted)
        app.add_middleware(ApiKeyMiddleware, auth=runtime.auth, retry_after_seconds=settings.retry_after_seconds)
    # outside the body limit (it sees the real body), inside the metrics middleware (499 is counted)
    app.add_middleware(DisconnectMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=runtime.metrics, routes=ROUTES)


app: FastAPI
"""The app with the environment's settings (:class:`GatewaySettings`), built on first access."""


def __getattr__(name: str) -> Any:
    """``app`` is built on first access, so importing this module reads no environment."""
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)
