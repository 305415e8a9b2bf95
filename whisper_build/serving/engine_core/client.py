"""The stub's side of the engine core: constant work per request, three threads, a core restarted when it dies.

:class:`CoreClient` starts the core (:mod:`.process`), hands each request over (``submit``: one ZMQ
message, audio as a 16-bit PCM frame) and returns at once. Three threads, whatever the load — the
pattern of NVIDIA's own decoupled python models (TensorRT-LLM ``llmapi`` model: an event thread, a
response thread, a cancellation thread every 100 ms; vllm_backend PR #46: a response thread):

- the **receiver** reads the core's answers and stats;
- the **sender** calls ``answer`` (``response_sender.send()``: a blocking round trip to Triton) and
  flushes the gauges first, once for all answers ready together;
- the **sweeper**, every :data:`SWEEP_S`, asks each open request ``is_cancelled()`` (a cancelled one is
  answered CANCELLED at once and its windows are aborted in the core) and checks that the core lives: a
  dead core's open requests are answered UNAVAILABLE with retry advice, and a new core is started.

No ``pb_utils`` here: ``answer`` and ``is_cancelled`` are the model's. Docs: docs/engines.md, "The engine core".
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import zmq

from whisper_build.serving import contract
from whisper_build.serving.engine_core import wire
from whisper_build.serving.engine_core.core import IPC_PREFIX, CoreConfig
from whisper_build.serving.engine_core.process import spawn_core
from whisper_build.serving.triton_model.batching import RequestWindows

__all__ = ["SWEEP_S", "Answer", "CoreClient", "CoreFailed", "OpenRequest"]

log = logging.getLogger(__name__)

SWEEP_S = 0.075
"""Seconds between two sweeps over the open requests' cancellation and the core's liveness."""
READY_TIMEOUT_S = 900.0
"""Most seconds a core may take to load its engine (a large model compiling CUDA graphs)."""
RETRY_AFTER_S = 5
"""The retry advice of the answer to requests open when the core died."""


class CoreFailed(RuntimeError):
    """The engine core could not start: the engine did not load, or the process exited first."""


@dataclass(frozen=True)
class Answer:
    """What one request is answered with: texts and ``RESULT`` JSON per window, or an error code and message."""

    texts: list[str] | None = None
    results: list[str] | None = None
    code: str = ""
    message: str = ""


@dataclass
class OpenRequest:
    """A request handed to the core and not answered yet: the model's handle and its cancellation check."""

    handle: Any
    is_cancelled: Callable[[], bool]
    generation: int
    finished: bool = False
    """Set (under the client's lock) as its final response is sent: no ``is_cancelled()`` after that."""


class CoreClient:
    """See the module docstring.

    Args:
        config: the core's configuration without endpoints, parent and generation (filled in here).
        answer: ``answer(handle, Answer)``, called on the sender thread only.
        flush: hands the gauges to Triton; called on the sender thread before the answers of a round.
        on_stats: told each ``stats`` message (receiver thread).
        spawn: starts the core process (tests replace it).
    """

    def __init__(
        self,
        config: CoreConfig,
        answer: Callable[[Any, Answer], None],
        flush: Callable[[], None] = lambda: None,
        on_stats: Callable[[dict[str, Any]], None] = lambda _: None,
        spawn: Callable[[CoreConfig], subprocess.Popen[bytes]] = spawn_core,
    ) -> None:
        self._answer, self._flush, self._on_stats, self._spawn = answer, flush, on_stats, spawn
        self._folder = tempfile.mkdtemp(prefix=IPC_PREFIX)
        self._context = zmq.Context()
        self._requests = self._context.socket(zmq.PUSH)
        self._requests.setsockopt(zmq.LINGER, 0)
        self._requests.setsockopt(zmq.SNDTIMEO, 2000)
        self._requests.bind(f"ipc://{self._folder}/requests")
        self._answers = self._context.socket(zmq.PULL)
        self._answers.bind(f"ipc://{self._folder}/answers")
        self._config = config.model_copy(update={"requests": f"ipc://{self._folder}/requests",
                                                 "answers": f"ipc://{self._folder}/answers"})  # fmt: skip
        self._send_lock = threading.Lock()
        self._open: dict[int, OpenRequest] = {}
        self._ids = itertools.count(1)
        self._out: queue.SimpleQueue[tuple[OpenRequest, Answer] | None] = queue.SimpleQueue()
        self._pb_lock = threading.Lock()  # one call into Triton at a time: send, is_cancelled, metrics
        self._ready = threading.Event()
        self._info: dict[str, Any] = {}
        self._generation = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._restarting = False
        self._closed = threading.Event()
        self.restarts = 0
        """Cores started after the first (each after a death)."""
        self._threads = [
            threading.Thread(target=self._receive_loop, name="engine-core-receiver", daemon=True),
            threading.Thread(target=self._send_loop, name="engine-core-sender", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """Start the core and wait until its engine is loaded; its ``ready`` (``engine``, ``multilingual``, ``pid``).

        Raises:
            CoreFailed: the engine did not load, the process exited or did not get ready in ``timeout_s``.
        """
        info = self._start_core(timeout_s)
        sweeper = threading.Thread(target=self._sweep_loop, name="engine-core-sweeper", daemon=True)
        sweeper.start()
        self._threads.append(sweeper)
        return info

    def _start_core(self, timeout_s: float) -> dict[str, Any]:
        self._ready.clear()
        self._generation += 1
        config = self._config.model_copy(update={"parent": os.getpid(), "generation": self._generation})
        process = self._spawn(config)
        self._process = process
        deadline = time.monotonic() + timeout_s
        while not self._ready.wait(0.1):
            if process.poll() is not None or time.monotonic() > deadline or self._closed.is_set():
                self._stop_process(process)
                raise CoreFailed(f"the engine core exited before it was ready (status {process.returncode})")
        if self._info.get("kind") == "failed":
            self._stop_process(process)
            raise CoreFailed(f"the engine did not load: {self._info.get('message')}")
        self._fail_open(
            "UNAVAILABLE", f"{contract.ENGINE_CORE_RESTARTING}: retry in {RETRY_AFTER_S} s", self._generation
        )
        return dict(self._info)

    @property
    def pid(self) -> int | None:
        """The running core's pid (``None`` while none runs)."""
        return None if self._process is None else self._process.pid

    @property
    def alive(self) -> bool:
        """True while a core is ready and running."""
        process = self._process
        return process is not None and process.poll() is None and self._ready.is_set() and not self._restarting

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the core (``stop``, then SIGKILL after ``timeout_s``); open requests are answered with an error."""
        self._closed.set()
        self._fail_open("UNAVAILABLE", "the whisper model is unloading")
        process = self._process
        if process is not None:
            with self._send_lock, contextlib.suppress(zmq.ZMQError):
                self._requests.send(wire.encode({"kind": "stop"}), flags=zmq.NOBLOCK)
            self._stop_process(process, timeout_s)
        self._out.put(None)
        for thread in self._threads:
            thread.join(timeout=5)
        self._context.destroy(linger=0)
        shutil.rmtree(self._folder, ignore_errors=True)

    @staticmethod
    def _stop_process(process: subprocess.Popen[bytes], timeout_s: float = 0.0) -> None:
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    # --- requests ------------------------------------------------------------------------------

    def submit(
        self,
        handle: Any,
        is_cancelled: Callable[[], bool],
        level: int,
        timeout_s: float | None,
        request: RequestWindows,
        wav: np.ndarray,
    ) -> None:
        """Hand one parsed request to the core; ``answer(handle, …)`` follows on the sender thread."""
        if not self.alive:
            self.reject(handle, self._unavailable())
            return
        request_id = next(self._ids)
        self._open[request_id] = OpenRequest(handle, is_cancelled, self._generation)
        try:
            frames = wire.encode_submit(request_id, level, timeout_s, request, wav)
            with self._send_lock:
                self._requests.send_multipart(frames, copy=False)
        except zmq.ZMQError as error:
            if self._open.pop(request_id, None) is not None:
                message = f"{contract.ENGINE_CORE_RESTARTING} (unreachable: {error}): retry in {RETRY_AFTER_S} s"
                self.reject(handle, Answer(code="UNAVAILABLE", message=message))

    def reject(self, handle: Any, answer: Answer) -> None:
        """Answer a request that was never handed to the core (bad input, no core) from the sender thread."""
        self._out.put((OpenRequest(handle, lambda: False, self._generation), answer))

    def _unavailable(self) -> Answer:
        return Answer(code="UNAVAILABLE", message=f"{contract.ENGINE_CORE_RESTARTING}: retry in {RETRY_AFTER_S} s")

    def _fail_open(self, code: str, message: str, before: int | None = None) -> None:
        """Answer every open request (of a core older than generation ``before``, when given)."""
        for request_id, open_entry in list(self._open.items()):
            if before is not None and open_entry.generation >= before:
                continue
            entry = self._open.pop(request_id, None)
            if entry is not None:
                self._out.put((entry, Answer(code=code, message=message)))

    # --- threads ---------------------------------------------------------------------------------

    def _receive_loop(self) -> None:
        while not self._closed.is_set():
            try:
                if not self._answers.poll(100):
                    continue
                frames = self._answers.recv_multipart(copy=False)
            except zmq.ZMQError:
                return  # the context was destroyed (close)
            try:
                self._receive(wire.decode_header(frames[0].buffer))
            except Exception:  # noqa: BLE001 - one bad message must not stop the answers
                log.exception("engine core client: a message from the core could not be read")

    def _receive(self, header: dict[str, Any]) -> None:
        """Route one message of the core: an answer to the sender, stats to ``on_stats``, ``ready``/``failed``."""
        kind = header["kind"]
        if kind in ("result", "error"):
            if "stats" in header:  # the result's windows are counted before it is answered
                self._on_stats(header["stats"])
            entry = self._open.pop(int(header["id"]), None)
            if entry is not None:  # else: cancelled and answered already, or a dead core's
                self._out.put((entry, Answer(header.get("texts"), header.get("results"),
                                                    header.get("code", ""), header.get("message", ""))))  # fmt: skip
        elif kind == "stats":
            self._on_stats(header)
        elif kind in ("ready", "failed") and header.get("generation") == self._generation:
            self._info = header
            self._ready.set()

    def _send_loop(self) -> None:
        while True:
            try:
                first = self._out.get(timeout=0.1)
            except queue.Empty:
                self._safe_flush()  # the gauges move while requests wait
                continue
            if first is None:
                return
            batch = [first]
            while len(batch) < 64:
                try:
                    item = self._out.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._out.put(None)
                    break
                batch.append(item)
            self._safe_flush()  # a client that sees its answer sees its windows counted
            for entry, answer in batch:
                try:
                    with self._pb_lock:  # never is_cancelled() on a request once its final response is sent
                        entry.finished = True
                        self._answer(entry.handle, answer)
                except Exception:  # noqa: BLE001 - one failed send must not stop the others
                    log.exception("engine core client: an answer could not be sent")

    def _safe_flush(self) -> None:
        """``flush``; a failure is logged, never the end of the sender thread (answers must keep flowing)."""
        try:
            with self._pb_lock:
                self._flush()
        except Exception:  # noqa: BLE001
            log.exception("engine core client: the gauges could not be flushed")

    def _sweep_loop(self) -> None:
        while not self._closed.wait(SWEEP_S):
            try:
                self._sweep()
            except Exception:  # noqa: BLE001 - the sweeper must outlive any one failure
                log.exception("engine core client: a sweep failed")

    def _sweep(self) -> None:
        """One look at the core's life and at every open request's cancellation."""
        process = self._process
        if process is not None and process.poll() is not None and not self._restarting:
            self._core_died(process)
            return
        cancelled = []
        for request_id, entry in list(self._open.items()):
            try:
                with self._pb_lock:
                    gone = not entry.finished and entry.is_cancelled()
            except Exception:  # noqa: BLE001 - an unreadable request counts as open
                gone = False
            if gone and self._open.pop(request_id, None) is not None:
                cancelled.append(request_id)
                self._out.put((entry, Answer(code="CANCELLED", message="cancelled by the client")))
        if cancelled:
            with self._send_lock, contextlib.suppress(zmq.ZMQError):
                self._requests.send(wire.encode({"kind": "cancel", "ids": cancelled}), flags=zmq.NOBLOCK)

    def _core_died(self, process: subprocess.Popen[bytes]) -> None:
        """Answer what the dead core held, then start a new core on a thread of its own."""
        self._restarting = True
        log.error("engine core (pid %d) exited with status %s; starting a new one", process.pid, process.returncode)
        self._fail_open("UNAVAILABLE", f"{contract.ENGINE_CORE_RESTARTING} (the last one exited with status "
                                       f"{process.returncode}): retry in {RETRY_AFTER_S} s")  # fmt: skip

        def restart() -> None:
            while not self._closed.is_set():
                try:
                    self._start_core(READY_TIMEOUT_S)
                    self.restarts += 1
                    log.warning("engine core restarted (pid %s)", self.pid)
                    break
                except CoreFailed:
                    log.exception("engine core restart failed; trying again")
                    self._closed.wait(RETRY_AFTER_S)
            self._restarting = False

        threading.Thread(target=restart, name="engine-core-restart", daemon=True).start()
