"""Several gateway processes on one port: the pod's CPU cores for HTTP, JSON, audio decoding and gRPC.

One gateway process does all of its per-request CPU work (HTTP parsing, JSON, base64, audio
decoding, gRPC serialization) under one GIL, which capped a GPU pod at ~13 requests/s
(docs/benchmarks.md "GPU, served path"). With ``WHISPER_GATEWAY_WORKERS`` = N > 1,
:func:`run_workers` binds the traffic socket once and starts N worker processes (``spawn``), each
a complete gateway (:func:`whisper_build.serving.gateway.serve.build_server`) accepting on the
shared socket; the kernel hands each connection to one of them.

Entry point: :func:`run_workers` (the details, in its docstring).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from types import FrameType

from whisper_build.serving.gateway.serve import build_server
from whisper_build.serving.gateway.settings import GatewaySettings

STARTUP_FAILURE = 3
"""Exit status of a worker whose server never started (uvicorn's ``STARTUP_FAILURE``): the gateway stops."""
RESTART_PAUSE_SECONDS = 1.0
"""Pause before starting again a worker that lived less than this long (no hot crash loop)."""

logger = logging.getLogger("uvicorn.error")


def _share(total: int, workers: int, index: int) -> int:
    """Worker ``index``'s part of ``total`` split into ``workers`` parts that differ by at most one."""
    return total // workers + (1 if index < total % workers else 0)


def worker_settings(settings: GatewaySettings, index: int) -> GatewaySettings:
    """The settings of worker ``index`` (0-based) of ``settings.workers``: its share of the pod's budget.

    ``capacity``, ``queue_size`` and ``realtime_max_sessions`` are split into parts that differ by at most one and add up to
    the totals; the audio budget (``effective_audio_budget_seconds``) is split evenly. With one
    worker the settings are returned unchanged.

    Raises:
        ValueError: ``index`` is not in ``[0, workers)``.
    """
    workers = settings.server.workers
    if not 0 <= index < workers:
        raise ValueError(f"worker index {index} is not in [0, {workers})")
    if workers == 1:
        return settings
    admission = settings.admission.model_copy(
        update={
            "capacity": _share(settings.admission.capacity, workers, index),
            "queue_size": _share(settings.admission.queue_size, workers, index),
            "audio_budget_seconds": settings.effective_audio_budget_seconds / workers,
        }
    )
    live = settings.live.model_copy(
        update={"realtime_max_sessions": _share(settings.live.realtime_max_sessions, workers, index)}
    )
    return settings.model_copy(update={"admission": admission, "live": live})


def _stop_with_parent(parent: int) -> None:
    """Send this process SIGTERM (drain, then exit) once its parent ``parent`` is gone (checked each second)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _worker_main(settings: GatewaySettings, index: int, sock: socket.socket, parent: int) -> None:
    """Entry point of worker ``index``: a full gateway with its share of the budget, on ``sock``."""
    _stop_with_parent(parent)
    server, _ = build_server(worker_settings(settings, index))
    server.run(sockets=[sock])
    if not server.started:
        raise SystemExit(STARTUP_FAILURE)


def _bind(settings: GatewaySettings) -> socket.socket:
    """The traffic socket, bound and listening, shared by the workers (as uvicorn binds it)."""
    family = socket.AF_INET6 if ":" in settings.server.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((settings.server.host, settings.server.port))
    sock.listen(2048)  # uvicorn's default backlog
    sock.set_inheritable(True)
    return sock


def run_workers(settings: GatewaySettings) -> int:
    """Serve with ``settings.workers`` worker processes until SIGTERM/SIGINT; returns the exit status.

    Returns 0 after a signal-initiated stop, 1 when a worker failed at startup.

    Raises:
        OSError: the traffic or metrics port cannot be bound.

    Every worker admits its share of the pod's budget (:func:`worker_settings`): ``capacity``,
    ``queue_size`` and the audio budget are divided between the workers (remainders to the first
    ones), so the totals stay as configured and nothing ever waits without a bound; a worker may
    refuse (429) while another has room, as any pod of a Service may. Metrics use prometheus-client's
    multiprocess mode (:mod:`whisper_build.serving.gateway.metrics`): this process serves ``/metrics``
    on the metrics port summed over the workers. Each worker runs its own canary, so ``/ping`` is
    each worker's own view of the model.

    This process forwards SIGTERM/SIGINT to every worker (each drains as a single gateway does, see
    :mod:`whisper_build.serving.gateway.serve`) and exits once all have stopped. A worker that dies is
    started again (its metrics files marked dead), unless its server failed to start
    (:data:`STARTUP_FAILURE`, e.g. a broken configuration), which stops the gateway with status 1 so
    that the pod's supervisor sees it. A worker whose parent is gone stops itself.
    """
    from whisper_build.serving.gateway.metrics import start_metrics_server

    logging.basicConfig(level=settings.server.log_level.upper(), format="%(levelname)s:     %(message)s")
    metrics_dir = tempfile.mkdtemp(prefix="whisper-gateway-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # inherited by the workers (before their imports)
    sock = _bind(settings)
    metrics_server = None
    if not settings.server.metrics_on_traffic_port:
        metrics_server, _ = start_metrics_server(None, settings.server.host, settings.server.metrics_port)
    pool = _WorkerPool(settings, sock)
    previous = {sig: signal.signal(sig, pool.forward) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return pool.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        pool.kill()
        sock.close()
        if metrics_server is not None:
            metrics_server.shutdown()
        shutil.rmtree(metrics_dir, ignore_errors=True)
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)


class _WorkerPool:
    """The worker processes of :func:`run_workers`: started, restarted, signalled, reaped."""

    def __init__(self, settings: GatewaySettings, sock: socket.socket) -> None:
        self.settings = settings
        self.sock = sock
        self.context = multiprocessing.get_context("spawn")
        self.processes: dict[int, tuple[BaseProcess, float]] = {}
        self.stopping: list[int] = []  # signals received
        self.status = 0

    def start(self, index: int) -> None:
        """Start worker ``index``."""
        process = self.context.Process(
            target=_worker_main, args=(self.settings, index, self.sock, os.getpid()), name=f"gateway-worker-{index}"
        )
        process.start()
        self.processes[index] = (process, time.monotonic())
        logger.info("gateway worker %d started (pid %s)", index, process.pid)

    def forward(self, signum: int, _frame: FrameType | None) -> None:
        """Signal handler: pass ``signum`` to every live worker; no worker is restarted after it."""
        self.stopping.append(signum)
        for process, _ in self.processes.values():
            if process.pid is not None and process.is_alive():
                os.kill(process.pid, signum)

    def run(self) -> int:
        """Start every worker and supervise them until all have stopped; the exit status."""
        for index in range(self.settings.server.workers):
            self.start(index)
        while self.processes:
            by_sentinel = {process.sentinel: index for index, (process, _) in self.processes.items()}
            for sentinel in wait(list(by_sentinel), timeout=0.5):
                self._reap(by_sentinel[sentinel])  # type: ignore[index]  # wait() returns the sentinels given
        return self.status

    def _reap(self, index: int) -> None:
        """Worker ``index`` exited: stop the gateway if it failed to start, else start it again (unless stopping)."""
        from prometheus_client import multiprocess

        process, started = self.processes.pop(index)
        process.join()
        if process.pid is not None:
            multiprocess.mark_process_dead(process.pid)  # type: ignore[no-untyped-call]  # its live gauges leave the sums
        if self.stopping:
            return
        if process.exitcode == STARTUP_FAILURE:
            logger.error("gateway worker %d failed to start; stopping the gateway", index)
            self.status = 1
            self.forward(signal.SIGTERM, None)
            return
        logger.warning("gateway worker %d exited with %s; starting it again", index, process.exitcode)
        if time.monotonic() - started < RESTART_PAUSE_SECONDS:
            time.sleep(RESTART_PAUSE_SECONDS)
        self.start(index)

    def kill(self) -> None:
        """Kill the workers still running (after :meth:`run`, or when it raised)."""
        for process, _ in self.processes.values():
            process.kill()
