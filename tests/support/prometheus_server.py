"""Test helpers: a real Prometheus server (Debian package ``prometheus``) and a static metrics page,
both on free 127.0.0.1 ports, always stopped on exit."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from whisper_build.workstation.ports import PortTaken, port_taken_in, start_on_free_ports

PROMETHEUS = shutil.which("prometheus")


class PrometheusStartError(RuntimeError):
    """Prometheus exited or did not become ready; the message holds the end of its log."""


@contextmanager
def running_prometheus(config: dict[str, Any], workdir: Path, startup_timeout: float = 60.0) -> Iterator[str]:
    """Run ``prometheus`` with ``config`` (a prometheus.yml as a dict); yield its base URL.

    The TSDB and the log live in ``workdir``. The process is terminated (then killed) on exit.

    Raises:
        PrometheusStartError: the binary is missing, exits early or is not ready in time.
    """
    if PROMETHEUS is None:
        raise PrometheusStartError("prometheus is not installed (apt-get install prometheus; make system-deps)")
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log_path = workdir / "prometheus.log"
    process, url = start_on_free_ports(lambda ports: _start(ports[0], config_path, log_path, startup_timeout), 1)
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _start(port: int, config_path: Path, log_path: Path, startup_timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """``prometheus`` on 127.0.0.1:``port``, ready; its process and URL.

    Raises:
        PortTaken: it exited saying the port is in use.
        PrometheusStartError: it exited otherwise or was not ready in time (it is stopped).
    """
    assert PROMETHEUS is not None
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config_path}",
                f"--storage.tsdb.path={config_path.parent / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + startup_timeout
    while process.poll() is None:
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            process.wait(timeout=10)
            raise PrometheusStartError(f"prometheus not ready after {startup_timeout} s:\n{_tail(log_path)}")
        time.sleep(0.2)
    error = PortTaken if port_taken_in(_tail(log_path)) else PrometheusStartError
    raise error(f"prometheus exited with {process.returncode}:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def serving_text(body: str, path: str = "/metrics") -> Iterator[str]:
    """Serve ``body`` as a Prometheus text page at ``path`` on 127.0.0.1; yield ``host:port``."""
    raw = body.encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            status = 200 if self.path.split("?")[0] == path else 404
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(raw) if status == 200 else 0))
            self.end_headers()
            if status == 200:
                self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"{host}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
