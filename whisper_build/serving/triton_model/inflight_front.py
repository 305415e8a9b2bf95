"""The ``torch`` engine's in-flight scheduler behind the decoupled front (model parameter ``scheduler: inflight``).

Same interface as :class:`~whisper_build.serving.triton_model.scheduler.StaticScheduler`: each
submitted request runs the whole decoding layer (:func:`~whisper_build.serving.triton_model.batching.run_batch`:
silence gate, language, temperature fallback, segments) on a thread of its own through :class:`InflightEngine`,
whose ``generate`` submits every window to :class:`~whisper_build.serving.engines.torch_inflight.InflightScheduler`
at the request's level (a fallback re-decode is a new submission; ``best_of`` samples are that many) and
whose ``detect_language`` submits a one-token decode. The deadline bounds the request's first submission;
a cancelled request's windows are cancelled in the engine's queue or rows. Words: a window asked for
them is aligned by the scheduler before its row is freed (``Window.words``). Gauges come from the
scheduler's ``stats()``.
Docs: docs/engines.md, "In-flight batching (`torch` engine)".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from settings.engines import ENGINE_PROFILES, profile
from whisper_build.serving import contract
from whisper_build.serving.engines.base import Hypothesis
from whisper_build.serving.engines.inflight_window import DeadlineExceeded, Window
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.batching import run_batch
from whisper_build.serving.triton_model.cancellation import BatchCancelled
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.scheduler import Job, QueueFull, RequestTimeout, SchedulerConfig, deliver
from whisper_build.serving.triton_model.scheduler_metrics import LEVEL_NAMES, SchedulerMetrics

__all__ = ["InflightEngine", "InflightFront"]

POLL_S = 0.5
"""Seconds between two looks at a request's cancellation while its windows decode (a safety net:
:meth:`InflightFront.cancel` cancels the windows at once). One thread waits per open request, so a short
poll wakes hundreds of threads that take the GIL from the scheduler's decode loop."""


class InflightEngine:
    """One request's view of the engine: ``generate``/``detect_language`` go through the in-flight scheduler.

    Every other attribute is the loaded engine's.

    Args:
        scheduler: has ``submit(Window) -> Future[Hypothesis]`` (``InflightScheduler``).
        engine: the loaded engine (tokens, capabilities).
        priority: ``live``/``sync``/``bulk``.
        deadline: ``time.monotonic()`` s for the first submission (``None`` = none).
        cancelled: True once the client gave up.
        best_of: samples per window at temperature > 0 (``EngineParams.best_of``).
    """

    def __init__(
        self,
        scheduler: Any,
        engine: Any,
        priority: str,
        deadline: float | None,
        cancelled: Callable[[], bool],
        best_of: int = 1,
    ) -> None:
        self._scheduler, self._engine, self._priority, self._best_of = scheduler, engine, priority, max(1, best_of)
        self._deadline, self._cancelled = deadline, cancelled
        self.expired = False
        """True once a submission waited past the deadline."""
        self.stopped = False
        """True once the request was found cancelled (its windows were cancelled)."""
        self._pending: set[Future[Hypothesis]] = set()
        self._lock = threading.Lock()

    def cancel_pending(self) -> None:
        """Cancel the windows submitted and not finished (any thread): the waiting ``generate`` wakes at once."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.cancel()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _run(self, windows: list[Window]) -> list[Hypothesis]:
        futures = [self._scheduler.submit(w) for w in windows]
        self._deadline = None  # later passes (fallback, tails) belong to a request already served
        pending: set[Future[Hypothesis]] = set(futures)
        with self._lock:
            self._pending = set(futures)
        woken = threading.Event()  # set by every window's end, a cancel() included (concurrent.futures.wait
        for future in futures:  # does not wake on Future.cancel() of a pending future)
            future.add_done_callback(lambda _: woken.set())
        if self._cancelled():  # cancelled while submitting
            self.cancel_pending()
        while pending:
            woken.wait(POLL_S)
            woken.clear()
            done = {f for f in pending if f.done()}
            pending -= done
            failed = [f for f in done if not f.cancelled() and f.exception() is not None]
            if failed or self._cancelled():
                for future in pending:
                    future.cancel()
                if failed:
                    error = failed[0].exception()
                    self.expired = isinstance(error, DeadlineExceeded)
                    raise error  # type: ignore[misc]
                self.stopped = True
                raise BatchCancelled("cancelled by the client")
        return [f.result() for f in futures]

    def generate(
        self,
        audio: Sequence[Any],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
        *,
        timestamps: bool,
        temperature: float,
        words: bool = False,
    ) -> list[Hypothesis]:
        """One submission per window (``best_of`` at temperature > 0, the best by mean log-prob kept)."""
        copies = self._best_of if temperature > 0 else 1
        windows = [
            Window(a, p, temperature, None, self._priority, self._deadline, timestamps, r, words)  # type: ignore[arg-type]
            for a, p, r in zip(audio, prompts, repetition_penalty, strict=True)
            for _ in range(copies)
        ]
        decoded = self._run(windows)
        return [
            max(decoded[k * copies : (k + 1) * copies], key=lambda h: h.sum_logprob / max(1, len(h.tokens)))
            for k in range(len(audio))
        ]

    def detect_language(self, audio: Sequence[Any]) -> list[str | None]:
        """A one-token decode per window without a language: the scheduler's detection (English-only: ``None``)."""
        if not self._engine.multilingual:
            return [None] * len(audio)
        windows = [Window(a, DecodePrompt(), 0.0, 1, self._priority, self._deadline) for a in audio]  # type: ignore[arg-type]
        return [h.language for h in self._run(windows)]


class InflightFront:
    """Submit/cancel/close like ``StaticScheduler``, over an ``InflightScheduler``; see the module docstring.

    Args:
        engine: the loaded ``torch`` engine.
        policy: fallback and silence thresholds.
        config: queue bounds: each level holds at most ``queue_size(level)`` open requests (waiting or decoding).
        metrics: the gauges, refreshed from ``scheduler.stats()`` every ``poll_s``.
        scheduler: an ``InflightScheduler`` already made (tests); default: one over ``engine``, started here.
        best_of: samples per window at temperature > 0 (``EngineParams.best_of``).
    """

    def __init__(
        self,
        engine: Any,
        policy: DecodingPolicy,
        config: SchedulerConfig,
        metrics: SchedulerMetrics,
        scheduler: Any = None,
        poll_s: float = 0.5,
        best_of: int = 1,
    ) -> None:
        if scheduler is None:
            name = getattr(engine, "name", "")
            if not profile(name).inflight_scheduler:
                able = [kind for kind, each in ENGINE_PROFILES.items() if each.inflight_scheduler]
                raise ValueError(f"scheduler=inflight needs engine {' or '.join(able)}, got {name}")
            from whisper_build.serving.engines.torch_inflight import InflightScheduler  # imports torch

            scheduler = InflightScheduler(engine)
            scheduler.start()
        self._engine, self._policy, self.config, self.metrics = engine, policy, config, metrics
        self._inflight, self._best_of = scheduler, best_of
        self._open = dict.fromkeys(LEVEL_NAMES, 0)
        self._jobs: set[Job] = set()
        self._lock = threading.Lock()
        workers = 2 * config.max_queue_size + config.bulk_max_queue_size
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="whisper-inflight")
        self._seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._poll_s = poll_s
        self._gauges = threading.Thread(target=self._refresh_loop, name="whisper-inflight-gauges", daemon=True)
        self._gauges.start()

    def submit(self, request: Any, level: int = contract.SYNC_PRIORITY, timeout_s: float | None = None) -> Job:
        """Start one request (see ``StaticScheduler.submit``; raises ValueError, QueueFull)."""
        if level not in LEVEL_NAMES:
            raise ValueError(f"priority level: one of {', '.join(map(str, LEVEL_NAMES))}, got {level}")
        job = Job(request, level, None if timeout_s is None else time.monotonic() + timeout_s)
        with self._lock:
            if self._open[level] >= self.config.queue_size(level):
                self.metrics.rejected(level, "queue_full", job.windows)
                raise QueueFull("Exceeds maximum queue size")
            self._open[level] += 1
            self._jobs.add(job)
        self._pool.submit(self._serve, job)
        return job

    def cancel(self, job: Job) -> None:
        """The client gave up: its windows leave the engine's queue or rows at the next look."""
        job.future.cancel()

    def _serve(self, job: Job) -> None:
        engine = InflightEngine(
            self._inflight, self._engine, LEVEL_NAMES[job.level], job.deadline, job.future.cancelled, self._best_of
        )
        job.future.add_done_callback(lambda future: engine.cancel_pending() if future.cancelled() else None)
        try:
            [result] = run_batch(engine, [job.request], self._policy)
            if job.future.cancelled() or engine.stopped:
                self.metrics.rejected(job.level, "cancelled", job.windows)
                deliver(job.future, BatchCancelled("cancelled by the client"))
            elif engine.expired:
                self.metrics.rejected(job.level, "timeout", job.windows)
                deliver(job.future, RequestTimeout("Request timeout expired"))
            else:
                if not isinstance(result, Exception):
                    self.metrics.finished(job.windows)
                deliver(job.future, result)
        except Exception as error:  # noqa: BLE001 - answered to its request
            deliver(job.future, RuntimeError(f"whisper model failed: {type(error).__name__}: {error}"))
        finally:
            with self._lock:
                self._open[job.level] -= 1
                self._jobs.discard(job)

    def counters(self) -> dict[str, float]:
        """The cumulative scheduler counters (``scheduler.COUNTERS``) from the in-flight scheduler's ``stats()``."""
        stats = self._inflight.stats()
        steps = stats.get("steps", 0.0)
        passes = stats.get("encoder_passes", 0.0)
        return {
            "steps": steps,
            "step_seconds": stats.get("step_seconds", 0.0),
            "row_steps": stats.get("mean_active_rows", 0.0) * steps,
            "encoder_passes": passes,
            "encoded": stats.get("mean_encoder_batch", 0.0) * passes,
        }

    def refresh(self) -> None:
        """Copy the in-flight scheduler's ``stats()`` into the gauges (queued, active rows, steps and their rows)."""
        stats = self._inflight.stats()
        now = {
            **{f"queue_{name}": stats.get(f"queue_{name}", 0.0) for name in LEVEL_NAMES.values()},
            "active_rows": stats.get("active_rows", 0.0),
            "steps": stats.get("steps", 0.0),
            "row_steps": round(stats.get("mean_active_rows", 0.0) * stats.get("steps", 0.0)),
        }
        delta = {key: value - self._seen.get(key, 0.0) for key, value in now.items()}
        self._seen = now
        for level, name in LEVEL_NAMES.items():
            self.metrics.queued(level, int(delta[f"queue_{name}"]))
        self.metrics.active(int(delta["active_rows"]))
        self.metrics.step(int(delta["row_steps"]), count=int(delta["steps"]))

    def _refresh_loop(self) -> None:
        while not self._stop.wait(self._poll_s):
            self.refresh()

    def close(self) -> None:
        """Stop the gauges, cancel every open request (their threads end at their next look) and the scheduler."""
        self._stop.set()
        with self._lock:
            jobs = list(self._jobs)
        for job in jobs:
            job.future.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        close = getattr(self._inflight, "close", None)
        if close is not None:
            close()
