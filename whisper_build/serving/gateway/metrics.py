"""Prometheus metrics of the gateway; names and labels are fixed by docs/contracts.md §7.

With several worker processes (``WHISPER_GATEWAY_WORKERS`` > 1) prometheus-client's multiprocess
mode is on (``PROMETHEUS_MULTIPROC_DIR``, set by :mod:`whisper_build.serving.gateway.workers`
before the workers start): every worker writes its values to files there and the exposition sums
them, so one scrape sees the pod (counters and histograms summed; ``inflight`` and ``capacity``
summed over live workers; ``model_healthy`` the minimum over live workers, 0 when any worker's
model calls fail). prometheus-client docs, "Multiprocess Mode (E.g. Gunicorn)".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from whisper_build.contracts.gateway_metrics import RELOADED
from whisper_build.serving.transcription.pod_view import multiprocess_dir

# Wall-time buckets in seconds: a 30 s window takes ~0.1-1 s on GPU, long files minutes.
_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600)


class GatewayMetrics:
    """The gateway metrics on their own registry (one per app, so tests can build many).

    Implements the core's :class:`~whisper_build.serving.transcription.metrics.TranscriptionMetrics`.

    Args:
        capacity: value of ``whisper_gateway_capacity_requests`` (settings ``capacity``).
    """

    def __init__(self, capacity: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._add_request_series(capacity)  # registration order is the exposition's order
        self._add_model_series()

    def _add_request_series(self, capacity: int) -> None:
        """Requests, their duration and audio, in flight, the capacity, window decodes by temperature."""
        self.requests = Counter(
            "whisper_gateway_requests_total",
            "Finished HTTP requests.",
            ["route", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "whisper_gateway_request_duration_seconds",
            "Wall time per successful (2xx) request in seconds.",
            ["route"],
            buckets=_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.audio_seconds = Counter(
            "whisper_gateway_audio_seconds",  # exposed with the _total suffix
            "Seconds of audio transcribed successfully.",
            ["route"],
            registry=self.registry,
        )
        self.inflight = Gauge(
            "whisper_gateway_inflight_requests",
            "Requests in progress: being processed or waiting for a slot (may exceed capacity).",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.capacity = Gauge(
            "whisper_gateway_capacity_requests",
            "Concurrent requests this pod is sized for.",
            registry=self.registry,
            multiprocess_mode="livesum",  # each worker sets its share
        )
        self.capacity.set(capacity)
        self.window_decodes = Counter(
            "whisper_gateway_window_decodes",  # exposed with the _total suffix
            "Decodes of 30 s windows by temperature: > 0 are temperature-fallback re-decodes.",
            ["temperature"],
            registry=self.registry,
        )

    def _add_model_series(self) -> None:
        """The model server's failures, retried window groups, health, busy with others, reloads."""
        self.backend_failures = Counter(
            "whisper_gateway_backend_failures",  # exposed with the _total suffix
            "Inferences the model server failed, by source: canary (the gateway's own probe) or request.",
            ["source"],
            registry=self.registry,
        )
        self.window_retries = Counter(
            "whisper_gateway_window_retries",  # exposed with the _total suffix
            "Window groups sent once more after the model's runtime died, by outcome (ok | failed).",
            ["outcome"],
            registry=self.registry,
        )
        self.model_healthy = Gauge(
            "whisper_gateway_model_healthy",
            "1 while the model serves (recent canary or request succeeded), else 0; /ping answers 503 at 0.",
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self.speaker_failed = Gauge(
            "whisper_gateway_speaker_model_failed",
            "1 while the speaker model refuses every request: it died on every load (/ping names it, still 200).",
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.model_busy_with_others = Gauge(
            "whisper_gateway_model_busy_with_others",
            "1 while the canary waits behind other clients' work on Triton (judged from Triton's metrics: "
            "busy, not dead), else 0.",
            registry=self.registry,
            multiprocess_mode="livemax",
        )
        self.model_reloaded = Gauge(
            RELOADED,
            "Unix time a worker of this pod last loaded the model again (its runtime died); the other workers "
            "then re-send what they had queued on the old runtime.",
            registry=self.registry,
            multiprocess_mode="max",
        )

    def request_started(self) -> None:
        """``whisper_gateway_inflight_requests`` + 1."""
        self.inflight.inc()

    def request_finished(self) -> None:
        """``whisper_gateway_inflight_requests`` - 1."""
        self.inflight.dec()

    def transcribed(self, route: str, audio_seconds: float, temperatures: Sequence[float]) -> None:
        """Audio seconds by route; window decodes by temperature (one decimal)."""
        self.audio_seconds.labels(route=route).inc(audio_seconds)
        for temperature in temperatures:
            self.window_decodes.labels(temperature=f"{temperature:.1f}").inc()

    def model_health(self, healthy: bool, busy_with_others: bool) -> None:
        """Set values (multiprocess mode reads files): the healthy and busy-with-others gauges."""
        self.model_healthy.set(float(healthy))
        self.model_busy_with_others.set(float(busy_with_others))

    def speaker_model_failed(self, failed: bool) -> None:
        """Set ``whisper_gateway_speaker_model_failed``."""
        self.speaker_failed.set(float(failed))

    def backend_failed(self, source: str) -> None:
        """``whisper_gateway_backend_failures_total{source}`` + 1."""
        self.backend_failures.labels(source=source).inc()

    def render(self) -> bytes:
        """Text exposition format 0.0.4 (every worker's values summed in multiprocess mode)."""
        return generate_latest(exposition_registry(self.registry))


def exposition_registry(registry: CollectorRegistry) -> CollectorRegistry:
    """The registry to expose: ``registry`` itself, or one that sums every worker's files (multiprocess mode)."""
    path = multiprocess_dir()
    if path is None:
        return registry
    combined = CollectorRegistry()
    MultiProcessCollector(combined, path=path)  # type: ignore[no-untyped-call]
    return combined


def start_metrics_server(metrics: GatewayMetrics | None, host: str, port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``metrics`` on ``host:port`` with prometheus-client's own HTTP server (a daemon thread).

    ``/metrics`` in text format 0.0.4, on a port of its own, so the load balancer's traffic port
    exposes no metrics (an NLB cannot filter by path) and the NetworkPolicy opens it to the scraper only.

    Args:
        metrics: The app's metrics (``app.state.runtime.metrics``); ``None`` in the parent of worker
            processes (multiprocess mode: it serves the workers' summed values).
        host: Address to bind (the pod IP, ``0.0.0.0``, in a pod).
        port: Port; 0 picks a free one (``server.server_port`` tells which).

    Returns:
        The server (``server.shutdown()`` stops it) and its thread.

    Raises:
        OSError: the port cannot be bound.
    """
    registry = exposition_registry(CollectorRegistry() if metrics is None else metrics.registry)
    return start_http_server(port, addr=host, registry=registry)


class MetricsMiddleware:
    """ASGI middleware counting every HTTP request by route template and status, and timing the successful ones.

    ``whisper_gateway_request_duration_seconds`` holds 2xx responses only.

    Routes are the app's path templates (``/invocations``); unknown paths count as ``other`` so
    that scanners cannot blow up label cardinality.
    """

    def __init__(self, app: ASGIApp, metrics: GatewayMetrics, routes: frozenset[str]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: run the app, then count the HTTP request (and time it when it answered 2xx)."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = scope["path"] if scope["path"] in self.routes else "other"
        status = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.metrics.requests.labels(route=route, status=str(status)).inc()
            if 200 <= status < 300:
                # Only successes: instant 4xx/429 answers would pull the percentiles down exactly
                # during overload, and 5xx carry no audio (RTF). Errors are counted by status above.
                self.metrics.duration.labels(route=route).observe(time.perf_counter() - start)
