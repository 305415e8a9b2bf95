"""The bulk worker process: ``python -m whisper_build.bulk.worker`` (settings: ``WHISPER_BULK_*``).

In a bulk pod the serving image's supervisor starts it in place of the gateway, beside the pod's own
Triton; locally ``make bulk-demo`` starts it. It works up to ``files_in_flight`` messages at once,
each with :class:`whisper_build.bulk.job.JobRunner`; one receiver asks SQS for as many messages as
slots are free. Entry points: :func:`main`, :class:`Worker` (heartbeat, drain, priority, admission
and health, in its docstring), :func:`bulk_plan`. Docs: docs/bulk.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from whisper_build.bulk import metrics
from whisper_build.bulk.admission import ActiveJobs, AdmissionBackend, BulkAdmission
from whisper_build.bulk.aws import JobQueue, JobStore, Received, clients
from whisper_build.bulk.job import JobRunner, backoff_seconds
from whisper_build.bulk.messages import BadMessage, parse_body
from whisper_build.bulk.outcome import Lifeline, Outcome
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.yielding import YieldGate, YieldingBackend
from whisper_build.serving.contract import BULK_PRIORITY
from whisper_build.serving.transcription.backend import BackendError, TranscriptionBackend
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.serving.transcription.windows import (
    CUT_SEARCH_SECONDS,
    SILENCE_RMS,
    WINDOW_SECONDS,
    Transcriber,
    WindowPlan,
)

log = logging.getLogger("whisper.bulk")
LIVE_STALE_SECONDS = 60.0
TICK_SECONDS = 2.0
DELETE_OUTCOMES = frozenset({Outcome.COMPLETED, Outcome.FAILED, Outcome.DUPLICATE, Outcome.CONTINUED})


def window_plan(settings: WorkerSettings) -> WindowPlan:
    """The core's default windowing (the gateway's cuts and silence rule) with the bulk group size and no length cap."""
    return WindowPlan(
        window_seconds=WINDOW_SECONDS,
        cut_search_seconds=CUT_SEARCH_SECONDS,
        silence_rms=SILENCE_RMS,
        group_size=settings.calls.window_group_size,
        max_audio_seconds=math.inf,  # storage is the only limit (max_file_bytes)
        call_timeout_seconds=settings.calls.call_timeout_seconds,
    )


def bulk_plan(plan: WindowPlan, max_batch_size: int) -> WindowPlan:
    """``plan`` with at most half of the model's ``max_batch_size`` windows per call.

    With the lower priority level (``contract.BULK_PRIORITY``) this leaves synchronous requests room in
    every batch when bulk work shares a Triton with them.
    """
    half = max(1, max_batch_size // 2)
    if plan.group_size <= half:
        return plan
    log.info(
        "window_group_size %d > half of max_batch_size %d: sending %d windows per call",
        plan.group_size,
        max_batch_size,
        half,
    )
    return replace(plan, group_size=half)


class Worker:
    """Slots, heartbeat, drain and health around one :class:`JobRunner` (module docstring).

    * **Heartbeat**: every ``heartbeat_seconds`` the message's visibility is set to the visibility timeout
      again (never past SQS's 12-hour total: ``max_total_visibility_seconds``) and the job's lease renewed,
      so no second worker starts the same file.
    * **Drain**: SIGTERM (or SIGINT) stops receiving; each job stops at its next window-group boundary,
      checkpoints and returns its message (visibility 0); a job still busy after ``drain_seconds`` is
      cancelled (its Triton call too) and its message returned, the last checkpoint kept.
    * **Priority**: its Triton requests carry ``contract.BULK_PRIORITY`` (the lower level, a queue of its own)
      and at most half of ``max_batch_size`` windows (:func:`bulk_plan`), so synchronous requests sharing
      the Triton keep their latency and their queue; with ``yield_to_metrics_url`` (a gateway sharing that
      Triton) new bulk calls also wait while the gateway has requests in flight (:mod:`whisper_build.bulk.yielding`).
    * **Admission** (:mod:`whisper_build.bulk.admission`): after an idle spell (no call of this worker at
      Triton) calls wait, at most ``gather_seconds``, until they fill the model's batch or every job has one
      waiting, and go together, so a round's first batch is a full one; and at most two batches' worth of
      windows are at Triton at once (one executing, one queued), half a batch where a gateway shares it.
    * **Health**: ``/live`` (the event loop turns), ``/ready`` (Triton answered), ``/metrics``
      (prometheus-client) on ``http_host:http_port`` when the port is set.
    """

    def __init__(self, settings: WorkerSettings, runner: JobRunner, queue: JobQueue) -> None:
        self.settings = settings
        self.runner = runner
        self.queue = queue
        self.draining = asyncio.Event()
        self.ready = False
        self.last_tick = time.monotonic()
        self.jobs: set[asyncio.Task[None]] = set()
        """The messages being worked on, at most ``files_in_flight``."""
        self._slot_freed = asyncio.Event()

    def stop(self) -> None:
        """Begin the drain (signal handler)."""
        if not self.draining.is_set():
            log.info("draining: no new messages; jobs stop at their next window group and return their message")
            self.draining.set()
            self._slot_freed.set()  # wakes the receiver when every slot is busy

    async def run(self) -> int:
        """Work until drained; 0 after a clean drain."""
        loop = asyncio.get_running_loop()
        # boto3 calls and audio decoding run in threads: room for every slot's (default: cores + 4)
        loop.set_default_executor(ThreadPoolExecutor(max_workers=2 * self.settings.files_in_flight + 4))
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        ticker = asyncio.create_task(self._tick())
        poller = asyncio.create_task(self._poll_queue())
        try:
            await self._wait_for_triton()
            receiver = asyncio.create_task(self._receive())
            await self.draining.wait()
            jobs = set(self.jobs)
            _, busy = await asyncio.wait({receiver, *jobs}, timeout=self.settings.drain_seconds)
            for task in busy & jobs:
                task.cancel()  # past the drain time: the job's message is returned in handle()
            # not the receiver: its poll cannot be interrupted (the thread runs on, and the process waits
            # for it anyway); it ends within receive_wait_seconds and returns what the poll brought
            await asyncio.gather(receiver, *jobs, return_exceptions=True)
        finally:
            ticker.cancel()
            poller.cancel()
        log.info("drained")
        return 0

    async def _tick(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            await asyncio.sleep(TICK_SECONDS)

    async def _poll_queue(self) -> None:
        """``whisper_bulk_queue_messages`` from GetQueueAttributes every ``QUEUE_POLL_SECONDS``."""
        names = {"visible": "waiting", "in_flight": "in_flight", "delayed": "delayed"}
        while True:
            try:
                counts = await asyncio.to_thread(self.queue.counts)
            except Exception as exc:  # noqa: BLE001 (a metric; the next poll retries)
                log.warning("GetQueueAttributes failed: %s", exc)
            else:
                for key, state in names.items():
                    metrics.QUEUE_MESSAGES.labels(state=state).set(counts[key])
            await asyncio.sleep(metrics.QUEUE_POLL_SECONDS)

    async def _wait_for_triton(self) -> None:
        delay = 1.0
        while not self.draining.is_set():
            try:
                served = await self.runner.transcriber.backend.served_model(10.0)
            except BackendError as exc:
                log.info("waiting for Triton: %s", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 15.0)
                continue
            log.info("Triton serves %s (max batch %d); taking messages", served.name, served.max_batch_size)
            self.runner.transcriber.plan = bulk_plan(self.runner.transcriber.plan, served.max_batch_size)
            self.ready = True
            return

    async def _receive(self) -> None:
        """The one receiver: each ReceiveMessage asks for as many messages as slots are free (at most 10).

        One long poll per worker instead of one per slot: fewer SQS requests (each is billed) and a
        message starts as soon as a slot is free. Messages that arrive once the drain began go back at once.
        """
        settings = self.settings
        while not self.draining.is_set():
            while len(self.jobs) >= settings.files_in_flight and not self.draining.is_set():
                self._slot_freed.clear()
                await self._slot_freed.wait()
            if self.draining.is_set():
                return
            free = settings.files_in_flight - len(self.jobs)
            try:
                messages = await asyncio.to_thread(
                    self.queue.receive_many,
                    free,
                    settings.queue.receive_wait_seconds,
                    settings.queue.visibility_timeout_seconds,
                )
            except Exception as exc:  # noqa: BLE001 (the queue's errors are logged and retried, never fatal)
                log.warning("ReceiveMessage failed: %s", exc)
                with contextlib.suppress(TimeoutError):  # a pause before the next try; the drain ends it
                    await asyncio.wait_for(self.draining.wait(), settings.queue.receive_wait_seconds or 1)
                continue
            if self.draining.is_set():
                await self._give_back(messages)
                return
            for received in messages:
                job = asyncio.create_task(self._work(received))
                self.jobs.add(job)
                job.add_done_callback(self._job_done)
            if not messages and not settings.queue.receive_wait_seconds:  # short polling: pause between empty receives
                await asyncio.sleep(settings.queue.idle_poll_seconds)

    async def _give_back(self, messages: list[Received]) -> None:
        """Make ``messages`` visible again at once (visibility 0); one that fails is logged and comes back later."""
        for received in messages:
            try:
                await asyncio.to_thread(self.queue.set_visibility, received.receipt, 0)
            except Exception as exc:  # noqa: BLE001 (the next ones still go back; this one after its visibility timeout)
                log.warning("could not return message %s: %s", received.message_id, exc)

    def _job_done(self, job: asyncio.Task[None]) -> None:
        self.jobs.discard(job)
        self._slot_freed.set()

    async def _work(self, received: Received) -> None:
        """:meth:`handle` one message; an unexpected error is logged and the message retried after its back-off."""
        try:
            await self.handle(received)
        except Exception:  # noqa: BLE001 (a bug must not stop the worker; the message comes back later)
            log.exception("message %s: unexpected error; it is retried after its back-off", received.message_id)
            metrics.FAILURES.labels(reason="internal_error").inc()
            delay = backoff_seconds(self.settings, received.receive_count)
            await asyncio.to_thread(self.queue.set_visibility, received.receipt, delay)

    async def handle(self, received: Received) -> Outcome | None:
        """Work one message and tell the queue what became of it; ``None`` when it held no job."""
        try:
            jobs = parse_body(received.body)
        except BadMessage as exc:
            log.warning("message %s dropped: %s", received.message_id, exc)
            metrics.FAILURES.labels(reason="bad_message").inc()
            await asyncio.to_thread(self.queue.delete, received.receipt)
            return None
        if len(jobs) != 1:
            for job in jobs:  # several records in one event: one message per job
                await asyncio.to_thread(self.queue.send, job.to_body())
            await asyncio.to_thread(self.queue.delete, received.receipt)
            return None
        if received.sent_at:
            metrics.QUEUE_WAIT.observe(max(0.0, time.time() - received.sent_at))
        life = Lifeline(received, draining=self.draining)
        stopped = asyncio.Event()
        heartbeat = asyncio.create_task(self._heartbeat(life, stopped))
        try:
            outcome = await self.runner.run(jobs[0], life)
        except asyncio.CancelledError:
            await self._stop_heartbeat(heartbeat, stopped)
            await asyncio.to_thread(self.queue.set_visibility, received.receipt, 0)
            raise
        finally:
            await self._stop_heartbeat(heartbeat, stopped)  # a no-op after the cancelled branch stopped it
        metrics.JOBS.labels(outcome=outcome.value).inc()
        if outcome in DELETE_OUTCOMES:
            await asyncio.to_thread(self.queue.delete, received.receipt)
        elif outcome is Outcome.RETURNED:
            await asyncio.to_thread(self.queue.set_visibility, received.receipt, 0)
        else:
            delay = backoff_seconds(self.settings, received.receive_count)
            await asyncio.to_thread(self.queue.set_visibility, received.receipt, delay)
        log.info("message %s: %s", received.message_id, outcome.value)
        return outcome

    @staticmethod
    async def _stop_heartbeat(heartbeat: asyncio.Task[None], stopped: asyncio.Event) -> None:
        """End the heartbeat and wait for a ChangeMessageVisibility it has in flight.

        A heartbeat landing after the message was returned (visibility 0) or given its back-off would hide
        it again for a whole visibility timeout; one landing after DeleteMessage fails harmlessly.
        ``asyncio.wait`` does not cancel the heartbeat if this task is cancelled while waiting.
        """
        stopped.set()
        await asyncio.wait({heartbeat})

    async def _heartbeat(self, life: Lifeline, stopped: asyncio.Event) -> None:
        """Every ``heartbeat_seconds`` until ``stopped``: extend the message's visibility and the job's lease."""
        settings = self.settings
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopped.wait(), settings.queue.heartbeat_seconds)
            if stopped.is_set():
                return
            remaining = settings.queue.max_total_visibility_seconds - life.elapsed()
            timeout = int(max(1, min(settings.queue.visibility_timeout_seconds, remaining)))
            try:
                await asyncio.to_thread(self.queue.set_visibility, life.received.receipt, timeout)
                await self.runner.renew(life)
            except Exception as exc:  # noqa: BLE001 (a missed heartbeat is logged; the next one retries)
                log.warning("heartbeat of %s failed: %s", life.received.message_id, exc)


def serve_health(worker: Worker, host: str, port: int) -> ThreadingHTTPServer:
    """``/live``, ``/ready`` and ``/metrics`` in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/metrics":
                self._answer(200, generate_latest(), CONTENT_TYPE_LATEST)
            elif self.path == "/live":
                fresh = time.monotonic() - worker.last_tick < LIVE_STALE_SECONDS
                self._answer(200 if fresh else 503, b"ok\n" if fresh else b"event loop stalled\n")
            elif self.path == "/ready":
                self._answer(200 if worker.ready else 503, b"ok\n" if worker.ready else b"waiting for Triton\n")
            else:
                self._answer(404, b"not found\n")

        def _answer(self, status: int, body: bytes, content_type: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            del format, args

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="bulk-health", daemon=True).start()
    return server


def build_worker(settings: WorkerSettings) -> Worker:
    """The worker of ``settings``: boto3 clients, Triton backend, window pipeline, runner.

    Call it inside the event loop that runs the worker (the gRPC aio channel binds to it).
    """
    s3, sqs = clients(settings.region, settings.endpoint_url)
    queue = JobQueue(sqs, settings.queue_url)
    active = ActiveJobs()
    backend: TranscriptionBackend = TritonBackend(settings.triton_url, settings.triton_model, priority=BULK_PRIORITY)
    if settings.calls.yield_to_metrics_url:  # the gate right before Triton: it holds calls already admitted too
        gate = YieldGate(
            settings.calls.yield_to_metrics_url,
            hold_seconds=settings.calls.yield_hold_seconds,
            max_wait_seconds=settings.calls.yield_max_wait_seconds,
        )
        backend = YieldingBackend(backend, gate)
    shared = settings.calls.yield_to_metrics_url is not None
    backend = AdmissionBackend(backend, BulkAdmission(active, settings.calls.gather_seconds, shared=shared))
    transcriber = Transcriber(backend, window_plan(settings))
    return Worker(settings, JobRunner(settings, JobStore(s3, settings.bucket), queue, transcriber, active), queue)


def main() -> int:
    """Entry point: read ``WHISPER_BULK_*``, serve health, work until SIGTERM."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = WorkerSettings()

    async def work() -> int:
        worker = build_worker(settings)
        server = serve_health(worker, settings.http_host, settings.http_port) if settings.http_port else None
        try:
            return await worker.run()
        finally:
            # drained: a repeated SIGTERM must not turn the clean exit into a kill while the loop closes
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if server is not None:
                server.shutdown()

    return asyncio.run(work())


if __name__ == "__main__":
    sys.exit(main())
