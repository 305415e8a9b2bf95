"""Tiny local servers for the bench tool's tests (helpers for tests only).

- :func:`http_server` — a gateway look-alike on 127.0.0.1:<free port> whose answers are chosen
  by a function of the request number; it also serves Triton-style ``/metrics`` counters.
- :func:`silent_server` — accepts TCP connections and never answers (a hung server).
- :func:`closed_port` — a port with nothing listening (connection refused).
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from whisper_build.workstation.local_triton import free_ports

Answer = tuple[int, dict]
"""HTTP status and JSON body."""


def ok_answer(path: str) -> Answer:
    """A correct gateway answer for either route."""
    if path == "/invocations":
        return 200, {"code": 0, "message": "Success", "transcribe_text": "hello"}
    return 200, {"text": "hello"}


class _Handler(BaseHTTPRequestHandler):
    server: _FakeGateway

    def log_message(self, *args: object) -> None:  # keep test output quiet
        pass

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        status, body = self.server.answer(self.server.count(), self.path)
        self._reply(status, json.dumps(body).encode(), "application/json")

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/metrics":
            self._reply(404, b"{}", "application/json")
            return
        n = self.server.served
        text = (
            "# TYPE nv_inference_count counter\n"
            f'nv_inference_count{{model="whisper",version="1"}} {n}\n'
            'nv_inference_count{model="other",version="1"} 1000\n'
            "# TYPE nv_inference_exec_count counter\n"
            f'nv_inference_exec_count{{model="whisper",version="1"}} {n // self.server.batch}\n'
        )
        self._reply(200, text.encode(), "text/plain; version=0.0.4")


class _FakeGateway(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # listen backlog: open-loop bursts open many connections at once (default 5)

    def __init__(self, answer: Callable[[int, str], Answer], batch: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer = answer
        self.batch = batch
        self.served = 0
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            self.served += 1
            return next(self._counter)


@contextmanager
def http_server(answer: Callable[[int, str], Answer], batch: int = 2) -> Iterator[str]:
    """Serve until the block ends; yields ``http://127.0.0.1:<port>``.

    Args:
        answer: (request number from 0, path) -> (status, JSON body).
        batch: the fake Triton metrics report one execution per ``batch`` requests served.
    """
    server = _FakeGateway(answer, batch)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def silent_server() -> Iterator[int]:
    """Accept connections and never send a byte; yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=10)
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> int:
    """A port that was free a moment ago (bound, then closed): connecting is refused."""
    return free_ports(1)[0]
