"""``python -m whisper_build.serving.gateway`` as its own process tree (test helper), as the pod runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from whisper_build.paths import REPO_ROOT
from whisper_build.workstation.ports import PortTaken, port_taken_in, start_on_free_ports
from whisper_build.workstation.process import NotReady, stop, wait_until_ready


class GatewayProcess:
    """A started gateway: ``url``, ``metrics`` (its ``/metrics`` URL), ``process``, ``log`` (its output file)."""

    def __init__(self, process: subprocess.Popen[bytes], url: str, metrics: str, log: Path) -> None:
        self.process, self.url, self.metrics, self.log = process, url, metrics, log

    def log_text(self) -> str:
        """Everything the gateway printed so far."""
        return self.log.read_text(errors="replace")


@contextmanager
def gateway_process(
    triton_url: str, workdir: Path, workers: int = 2, ready_timeout: float = 120.0, **env: str
) -> Iterator[GatewayProcess]:
    """The gateway with ``workers`` processes against ``triton_url``; ``env`` adds ``WHISPER_GATEWAY_<KEY>``.

    Its two ports are picked free, again on fresh ones when another process takes one first
    (:func:`whisper_build.workstation.ports.start_on_free_ports`). Waits until ``/ping`` is 200; at
    the end sends SIGTERM and asserts that every process of the tree has exited (nothing left behind).
    """
    extra = {f"WHISPER_GATEWAY_{key.upper()}": value for key, value in env.items()}
    gateway = start_on_free_ports(lambda ports: _start(ports, triton_url, workdir, workers, ready_timeout, extra), 2)
    process = gateway.process
    try:
        children = psutil.Process(process.pid).children(recursive=True)
        yield gateway
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0, gateway.log_text()[-3000:]
        _, left = psutil.wait_procs(children, timeout=15)  # multiprocessing's helpers exit after the parent
        left = [c for c in left if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        # multiprocessing's resource tracker ends when the last holder of its pipe closes it, which on
        # a busy box can be after the wait above; it holds no gateway work, so it is stopped, not counted
        trackers = [c for c in left if "resource_tracker" in " ".join(_cmdline(c))]
        for tracker in trackers:
            tracker.kill()
        left = [c for c in left if c not in trackers]
        assert not left, f"gateway processes left behind: {[(c, _cmdline(c)) for c in left]}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _start(
    ports: list[int], triton_url: str, workdir: Path, workers: int, ready_timeout: float, extra: dict[str, str]
) -> GatewayProcess:
    """Start the gateway on ``ports`` (traffic, metrics) and wait for ``/ping`` 200.

    Raises:
        PortTaken: it exited saying a port is in use (it binds both at start).
    """
    port, metrics_port = ports
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "WHISPER_GATEWAY_WORKERS": str(workers),
        "WHISPER_GATEWAY_PORT": str(port),
        "WHISPER_GATEWAY_METRICS_PORT": str(metrics_port),
        "WHISPER_GATEWAY_TRITON_URL": triton_url,
        "WHISPER_GATEWAY_LOG_LEVEL": "warning",
        **extra,
    }
    log = workdir / f"gateway-{port}.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "whisper_build.serving.gateway"],
            env=environment, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    gateway = GatewayProcess(process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics", log)
    try:
        wait_until_ready(
            f"{gateway.url}/ping", process, ready_timeout, "the gateway", lambda: gateway.log_text()[-3000:]
        )
    except NotReady as failed:
        if failed.exited and port_taken_in(gateway.log_text()):
            raise PortTaken(f"the gateway could not bind port {port} or {metrics_port}") from None
        stop(process, timeout_s=0)
        raise AssertionError(str(failed)) from None
    return gateway


def _cmdline(process: psutil.Process) -> list[str]:
    """``process``'s command line, or ``[]`` once it has gone."""
    try:
        return process.cmdline()
    except psutil.Error:
        return []
