"""Run the gateway with uvicorn in a background thread on a free port (test helper)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from whisper_build.serving.gateway.app import BackendFactory, create_app
from whisper_build.serving.gateway.metrics import start_metrics_server
from whisper_build.serving.gateway.serve import protocol_options
from whisper_build.serving.gateway.settings import GatewaySettings


class GatewayUrl(str):
    """The gateway's base URL; ``.metrics`` is the base URL of its metrics port (``/metrics`` there)."""

    metrics: str


@contextmanager
def running_gateway(
    settings: GatewaySettings,
    backend_factory: BackendFactory | None = None,
    startup_timeout: float = 30.0,
) -> Iterator[GatewayUrl]:
    """Serve ``create_app(settings, backend_factory)`` on 127.0.0.1:<free port> and its metrics on
    another free port, as ``serve.serve`` does; yield the base URL (with ``.metrics``); stop both after.

    The socket is bound here (port 0) and handed to uvicorn, so no other process can take the
    port in between.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = create_app(settings, backend_factory)
    metrics_server, _ = start_metrics_server(app.state.runtime.metrics, "127.0.0.1", 0)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=10, **protocol_options(settings))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            time.sleep(0.05)
        url = GatewayUrl(f"http://127.0.0.1:{port}")
        url.metrics = f"http://127.0.0.1:{metrics_server.server_port}"
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        metrics_server.shutdown()
        metrics_server.server_close()


def first_sse_event(chunks: Iterator[bytes]) -> bytes:
    """The first raw chunk of an SSE body that is not a keep-alive comment (``: ping …``).

    sse-starlette sends a comment every 15 s while no event is due, so a slow first group on a busy
    machine comes after one or more of them (https://github.com/sysid/sse-starlette, ``ping``).
    """
    chunk = next(chunks)
    while chunk.startswith(b":"):
        chunk = next(chunks)
    return chunk
