"""Run the gateway under uvicorn with graceful drain.

On the first SIGTERM/SIGINT the gateway stops admitting (new requests and ``/ping`` get 503, so
load balancers take the pod out), keeps serving for ``drain_seconds``, then uvicorn stops
accepting connections and waits up to ``graceful_shutdown_seconds`` for in-flight requests
before the lifespan shutdown closes the Triton client. A second SIGINT forces exit.

:func:`serve` runs one gateway process; ``python -m whisper_build.serving.gateway``
(:mod:`whisper_build.serving.gateway.__main__`) chooses between it and several worker processes
(:mod:`whisper_build.serving.gateway.workers`), each of which calls :func:`build_server`.
Docs: docs/gateway.md, "Shutdown".
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI
from pydantic import ValidationError

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.client_timeouts import http_protocol
from whisper_build.serving.gateway.metrics import start_metrics_server
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.gateway.websocket_limits import websocket_protocol


class DrainingServer(uvicorn.Server):
    """``uvicorn.Server`` whose exit signal first calls ``on_drain`` and waits ``drain_seconds``.

    Args:
        config: uvicorn config.
        on_drain: called once, from the signal handler, on the first exit signal.
        drain_seconds: delay between ``on_drain`` and uvicorn's own shutdown.
    """

    def __init__(self, config: uvicorn.Config, on_drain: Callable[[], None], drain_seconds: float) -> None:
        super().__init__(config)
        self._on_drain = on_drain
        self._drain_seconds = drain_seconds
        self._draining = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain, then exit after ``drain_seconds``; later signals: uvicorn's."""
        if not self._draining:
            self._draining = True
            self._on_drain()
            if self._drain_seconds > 0:
                timer = threading.Timer(self._drain_seconds, super().handle_exit, (sig, frame))
                timer.daemon = True
                timer.start()
                return
        super().handle_exit(sig, frame)


def load_settings() -> GatewaySettings:
    """Settings from the environment; exits with status 2 and one line per bad variable."""
    try:
        return GatewaySettings()
    except ValidationError as exc:
        for error in exc.errors():
            field = ".".join(str(p) for p in error["loc"])
            print(
                f"error: WHISPER_GATEWAY_{field.upper()}={error.get('input')!r}: {error['msg']}",
                file=sys.stderr,
            )
        raise SystemExit(2) from None


def protocol_options(settings: GatewaySettings) -> dict[str, Any]:
    """``uvicorn.Config`` arguments of the gateway's protocols: bounded HTTP clients, skipped oversized live events."""
    return {"http": http_protocol(settings), **websocket_protocol(settings.live.realtime_max_event_bytes)}


def build_server(settings: GatewaySettings) -> tuple[DrainingServer, FastAPI]:
    """The app of ``settings`` and the :class:`DrainingServer` serving it (not yet running: ``run([sockets])``)."""
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        timeout_graceful_shutdown=int(settings.server.graceful_shutdown_seconds),
        timeout_keep_alive=settings.server.keep_alive_seconds,
        proxy_headers=False,
        **protocol_options(settings),
    )
    return DrainingServer(config, app.state.runtime.start_drain, settings.server.drain_seconds), app


def serve(settings: GatewaySettings) -> None:
    """Serve one gateway process on ``settings.host:settings.port`` until SIGTERM/SIGINT.

    Metrics are served on their own port unless ``metrics_on_traffic_port``.
    """
    server, app = build_server(settings)
    metrics_server = None
    if not settings.server.metrics_on_traffic_port:
        metrics_server, _ = start_metrics_server(
            app.state.runtime.metrics, settings.server.host, settings.server.metrics_port
        )
    try:
        server.run()
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
