"""The engine-core process: the engine and its scheduler, fed over ZMQ by the Triton stub that started it.

Run as ``python -m whisper_build.serving.engine_core whisper-engine-core --config JSON`` (the name is in
``/proc/<pid>/cmdline`` for an operator). Its threads: the main thread reads requests without blocking
the scheduler (``submit`` → :meth:`Scheduler.submit`, ``cancel``, ``stop``); the scheduler's own loop
(static batches or in-flight steps) decodes; one output thread sends every finished request and, every
:data:`STATS_S`, the gauges; one watch thread ends the process when the stub that started it is gone
(its parent pid changes: ``kill -9`` of the stub). Messages: :mod:`.wire`. Docs: docs/engines.md,
"The engine core".
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import Future
from typing import Any

import zmq
from pydantic import BaseModel, ConfigDict

from whisper_build.serving.engine_core import wire
from whisper_build.serving.engine_core.echo import EchoScheduler
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.triton_model.batching import RequestError
from whisper_build.serving.triton_model.cancellation import WorkCounters
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.front import error_code
from whisper_build.serving.triton_model.scheduler import Job, QueueFull, Scheduler, SchedulerConfig, StaticScheduler
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics
from whisper_build.serving.triton_model.stages import StageClock, StageCounters

__all__ = ["IPC_PREFIX", "PROCESS_NAME", "STATS_S", "CoreConfig", "EngineCore", "build_scheduler", "main"]

log = logging.getLogger(__name__)

PROCESS_NAME = "whisper-engine-core"
"""The word in the core's command line (``ps``, ``/proc/<pid>/cmdline``)."""
STATS_S = 0.1
"""Seconds between two ``stats`` messages (the gauges the stub copies to Triton's metrics)."""
IPC_PREFIX = "whisper-engine-core-"
"""Prefix of the temporary folder holding the stub's two ``ipc://`` sockets."""
PARENT_WATCH_S = 0.5
"""Seconds between two looks at the parent pid."""


class CoreConfig(BaseModel):
    """What the stub tells its core (one JSON argument).

    Attributes:
        requests / answers: the ZMQ endpoints the stub bound (``ipc://…``).
        parent: the stub's pid; the core exits when its parent is no longer that process.
        generation: the stub's count of cores started, echoed in ``ready`` (a late ``ready`` is ignored).
        model_name: the ``model`` label of the gauges.
        params: the engine's :class:`EngineParams` (``model_path`` already absolute).
        scheduling: the scheduler's :class:`SchedulerConfig`.
        echo_ms: a benchmark double: no engine; every request answered ``""`` per window after this many ms.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: str
    answers: str
    parent: int
    generation: int = 0
    model_name: str = "whisper"
    params: dict[str, Any] = {}
    scheduling: dict[str, Any] = {}
    echo_ms: float | None = None


def build_scheduler(config: CoreConfig, on_batch: Any, on_windows: Any) -> tuple[Scheduler, dict[str, Any]]:
    """The scheduler the config names over the loaded engine, and what ``ready`` reports (engine, multilingual).

    Raises:
        EngineParamsError, ImportError, ValueError: the engine cannot load (the stub's ``initialize`` fails).
    """
    scheduling = SchedulerConfig(**config.scheduling)
    metrics = SchedulerMetrics(config.model_name)
    if config.echo_ms is not None:
        return EchoScheduler(config.echo_ms / 1000.0, scheduling, metrics), {"engine": "echo", "multilingual": False}
    params = EngineParams(**config.params)
    engine = load_engine(params)
    policy = DecodingPolicy.from_params(params)
    scheduler: Scheduler
    if scheduling.mode == "inflight":
        from whisper_build.serving.triton_model.inflight_front import InflightFront

        scheduler = InflightFront(engine, policy, scheduling, metrics, best_of=params.best_of)
    else:
        scheduler = StaticScheduler(engine, policy, scheduling, metrics, on_batch, on_windows)
    return scheduler, {"engine": engine.name, "multilingual": bool(engine.multilingual)}


class EngineCore:
    """The core's loop over one scheduler; see the module docstring."""

    def __init__(self, config: CoreConfig) -> None:
        self.config = config
        self._context = zmq.Context()
        self._inbox = self._context.socket(zmq.PULL)
        self._inbox.connect(config.requests)
        self._outbox = self._context.socket(zmq.PUSH)
        self._outbox.setsockopt(zmq.LINGER, 1000)
        self._outbox.connect(config.answers)
        self._out: queue.SimpleQueue[list[Any] | None] = queue.SimpleQueue()
        self._jobs: dict[int, Job] = {}
        self._stages = StageCounters(None)
        self._work = WorkCounters(None)
        self._stopping = threading.Event()

    def run(self) -> int:
        """Load, report ``ready`` (or ``failed``), serve until ``stop``; the exit status."""
        threading.Thread(target=self._watch_parent, name="engine-core-parent", daemon=True).start()
        sender = threading.Thread(target=self._send_loop, name="engine-core-out", daemon=True)
        sender.start()
        try:
            self.scheduler, info = build_scheduler(self.config, self._batch_done, self._work.count_windows)
        except Exception as error:  # noqa: BLE001 - the stub's initialize reports it
            log.exception("engine core: the engine did not load")
            self._out.put([wire.encode({"kind": "failed", "generation": self.config.generation,
                                        "message": f"{type(error).__name__}: {error}"})])  # fmt: skip
            self._out.put(None)
            sender.join(timeout=5)
            return 1
        self._out.put(
            [wire.encode({"kind": "ready", "generation": self.config.generation, "pid": os.getpid(), **info})]
        )
        try:
            self._receive_loop()
        finally:
            self._stopping.set()
            self.scheduler.close()
            self._out.put(None)
            sender.join(timeout=5)
            self._context.destroy(linger=0)
        return 0

    def _batch_done(self, clock: StageClock, engine: Any) -> None:
        self._stages.add(clock)
        self._work.add(engine)

    # --- requests ----------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        while not self._stopping.is_set():
            if not self._inbox.poll(100):
                continue
            frames = self._inbox.recv_multipart(copy=False)
            header = wire.decode_header(frames[0].buffer)
            kind = header["kind"]
            if kind == "submit":
                self._submit(header, frames[1].buffer)
            elif kind == "cancel":
                for request_id in header["ids"]:
                    job = self._jobs.pop(int(request_id), None)
                    if job is not None:
                        self.scheduler.cancel(job)
            elif kind == "stop":
                return

    def _submit(self, header: dict[str, Any], pcm: memoryview) -> None:
        request_id = int(header["id"])
        try:
            submitted = wire.decode_submit(header, pcm)
            job = self.scheduler.submit(submitted.request, submitted.level, submitted.timeout_s)
        except (RequestError, QueueFull, ValueError, RuntimeError) as error:
            self._out.put([wire.encode(error_message(request_id, error))])
            return
        self._jobs[request_id] = job
        job.future.add_done_callback(lambda future: self._done(request_id, future))

    def _done(self, request_id: int, future: Future[Any]) -> None:
        """A request ended (any thread): its answer goes to the output thread."""
        self._jobs.pop(request_id, None)
        if future.cancelled():
            return  # the stub already answered the client that cancelled
        error = future.exception()
        if error is not None:
            self._out.put([wire.encode(error_message(request_id, error))])
            return
        windows = future.result()
        self._out.put([wire.encode({"kind": "result", "id": request_id, "texts": [w.text for w in windows],
                                    "results": [w.to_json() for w in windows], "stats": self._stats()})])  # fmt: skip

    # --- output --------------------------------------------------------------------------------

    def _send_loop(self) -> None:
        next_stats = time.monotonic()
        while True:
            try:
                frames = self._out.get(timeout=max(0.0, next_stats - time.monotonic()))
            except queue.Empty:
                frames = []
            if frames is None:
                return
            if frames:
                self._outbox.send_multipart(frames, copy=False)
            if time.monotonic() >= next_stats and hasattr(self, "scheduler"):
                self._outbox.send(wire.encode(self._stats()))
                next_stats = time.monotonic() + STATS_S
            elif not hasattr(self, "scheduler"):
                next_stats = time.monotonic() + STATS_S

    def _stats(self) -> dict[str, Any]:
        """The gauges' values; sent every :data:`STATS_S` and with every result (its windows counted before it)."""
        windows, stopped = self._work.take()
        return {
            "kind": "stats",
            "generation": self.config.generation,
            "scheduler": self.scheduler.metrics.snapshot(),
            "counters": self.scheduler.counters(),
            "stages": self._stages.take(),
            "work": [windows, stopped],
        }

    def _watch_parent(self) -> None:
        """End the process once the stub that started it is gone (reparented: ``kill -9`` of the stub)."""
        while os.getppid() == self.config.parent:
            time.sleep(PARENT_WATCH_S)
        log.warning("engine core: its stub (pid %d) is gone; exiting", self.config.parent)
        folder = os.path.dirname(self.config.requests.removeprefix("ipc://"))
        if os.path.basename(folder).startswith(IPC_PREFIX):  # the dead stub's socket folder
            shutil.rmtree(folder, ignore_errors=True)
        os._exit(0)


def error_message(request_id: int, error: BaseException) -> dict[str, Any]:
    """The ``error`` answer: the gRPC status of ``front.error_code`` and the message."""
    return {"kind": "error", "id": request_id, "code": error_code(error), "message": str(error)}


def main(argv: list[str] | None = None) -> int:
    """``whisper-engine-core --config JSON``: serve until the stub says ``stop`` or goes away."""
    args = sys.argv[1:] if argv is None else argv
    if PROCESS_NAME in args:
        args = [a for a in args if a != PROCESS_NAME]
    if len(args) != 2 or args[0] != "--config":
        print(f"usage: python -m whisper_build.serving.engine_core {PROCESS_NAME} --config JSON", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C drains through the stub, which stops its core
    logging.basicConfig(level=logging.WARNING, format=f"{PROCESS_NAME} %(levelname)s %(name)s: %(message)s")
    return EngineCore(CoreConfig.model_validate_json(args[1])).run()
