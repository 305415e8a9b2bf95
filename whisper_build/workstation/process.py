"""Start a local server process, wait until it answers, stop it (tests, benchmarks, ``make serve``).

Entry points: :func:`wait_until_ready` (poll a URL until 200 while the process lives) and
:class:`GatewayProcess` (``python -m whisper_build.serving.gateway`` on free ports, with logs, CPU
and memory readings). ``LocalTriton``, ``tests/support/gateway_process.py`` and the benchmarks use them.
Docs: docs/development.md, "What the two commands run".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil

from whisper_build.paths import REPO_ROOT
from whisper_build.workstation.ports import free_ports

GATEWAY_CAPACITY = 32
"""Default ``WHISPER_GATEWAY_CAPACITY`` of :class:`GatewayProcess`: 16 concurrent requests reach Triton's batcher."""


class NotReady(RuntimeError):
    """The process exited (``exited`` True) or did not answer 200 in time; the message ends with its log."""

    def __init__(self, message: str, exited: bool) -> None:
        super().__init__(message)
        self.exited = exited


def wait_until_ready(
    url: str,
    process: subprocess.Popen[bytes],
    timeout_s: float,
    what: str,
    log_tail: Callable[[], str] = lambda: "",
    interval_s: float = 0.3,
) -> None:
    """Poll the local ``url`` until it answers 200.

    Raises:
        NotReady: ``process`` exited first, or ``timeout_s`` seconds passed; the message names
            ``what`` and ends with ``log_tail()``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise NotReady(f"{what} exited with {process.returncode}\n{log_tail()}".rstrip(), exited=True)
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - a local http URL
                if response.status == 200:
                    return
        except (OSError, ConnectionError):
            pass
        if time.monotonic() >= deadline:
            raise NotReady(f"{what} did not answer {url} within {timeout_s:g} s\n{log_tail()}".rstrip(), exited=False)
        time.sleep(interval_s)


def stop(process: subprocess.Popen[bytes], timeout_s: float = 30.0) -> int:
    """SIGTERM ``process``, then SIGKILL after ``timeout_s`` seconds; its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


class GatewayProcess:
    """Run ``python -m whisper_build.serving.gateway`` on free ports (traffic, metrics), pointed at ``triton_url``.

    A context manager that waits for ``/ping`` and stops the gateway on exit (SIGTERM, then SIGKILL).
    ``settings`` adds ``WHISPER_GATEWAY_*`` variables (e.g. ``{"WHISPER_GATEWAY_QUEUE_SIZE": "4"}``);
    ``module`` runs another server reading ``WHISPER_GATEWAY_PORT`` / ``_TRITON_URL`` instead
    (``benchmarks.reference_gateway``, the seeds' design); ``root`` runs another source tree's
    gateway (e.g. an exported older commit, for before/after figures).
    """

    def __init__(
        self,
        triton_url: str,
        capacity: int = GATEWAY_CAPACITY,
        settings: dict[str, str] | None = None,
        module: str = "whisper_build.serving.gateway",
        root: Path = REPO_ROOT,
    ) -> None:
        self._module = module
        self._root = root
        self.port, metrics_port = free_ports(2)
        self.url = f"http://127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        env = dict(os.environ)
        env.update(
            WHISPER_GATEWAY_PORT=str(self.port), WHISPER_GATEWAY_METRICS_PORT=str(metrics_port),
            WHISPER_GATEWAY_TRITON_URL=triton_url,
            WHISPER_GATEWAY_CAPACITY=str(capacity), WHISPER_GATEWAY_LOG_LEVEL="warning",
            PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])),
        )  # fmt: skip
        env.update(settings or {})
        self._env = env
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> GatewayProcess:
        self._process = subprocess.Popen([sys.executable, "-m", self._module], env=self._env, cwd=self._root)
        try:
            wait_until_ready(f"{self.url}/ping", self._process, 60.0, "the gateway")
        except NotReady:
            self.__exit__()
            raise
        return self

    @property
    def pid(self) -> int:
        """Process id of the running gateway."""
        assert self._process is not None
        return self._process.pid

    def alive(self) -> bool:
        """True while the gateway process runs."""
        return self._process is not None and self._process.poll() is None

    def cpu_seconds(self) -> float:
        """CPU seconds (user + system) used so far by the gateway and its live worker processes."""
        assert self._process is not None
        total = 0.0
        parent = psutil.Process(self._process.pid)
        for process in (parent, *parent.children(recursive=True)):
            try:
                times = process.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
        return total

    def rss_bytes(self) -> int:
        """Resident set size of the gateway process now."""
        assert self._process is not None
        return psutil.Process(self._process.pid).memory_info().rss

    def __exit__(self, *_: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop(process)
