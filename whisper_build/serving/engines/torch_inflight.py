"""In-flight (continuous) batching for the ``torch`` engine: the engine forms its own batches from a queue.

Windows arrive through :meth:`InflightScheduler.submit` (a future per window); new arrivals are
encoded in batches into free rows of the static cache, every decode step runs over all active rows
(the CUDA graph of the smallest bucket holding the highest active row), a row leaves at its
end-of-text or length limit and the next waiting window joins at the next step. Priorities, cancel
and deadlines: :class:`Window`. Entry point: :class:`InflightScheduler`.
Docs: docs/engines.md, "In-flight batching (`torch` engine)".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future, InvalidStateError

import torch

from whisper_build.serving.engines.base import Hypothesis
from whisper_build.serving.engines.buckets import choose_bucket
from whisper_build.serving.engines.inflight_window import PRIORITY_LEVELS, DeadlineExceeded, Entry, Priority, Window
from whisper_build.serving.engines.tokens import build_prompt_ids, generated_ids
from whisper_build.serving.engines.torch_alignment import sot_sequence
from whisper_build.serving.engines.torch_engine import TorchEngine
from whisper_build.serving.engines.torch_logits import RowState
from whisper_build.serving.engines.torch_overlap import gemm_sm_target, host_to_device

__all__ = ["PRIORITY_LEVELS", "DeadlineExceeded", "InflightScheduler", "Priority", "Window"]

log = logging.getLogger(__name__)

SWEEP_EVERY = 16
"""Decode steps between sweeps of the waiting queue for deadlines and cancels while no row is free."""


class InflightScheduler:
    """Continuous batching over a loaded :class:`TorchEngine` (its cache, graphs, encoder and rules).

    Args:
        engine: the loaded engine (its largest bucket bounds the rows).
        slots: rows to decode at once (``None`` = the engine's largest bucket).
        encoder_batch: fewest arrivals encoded together while bulk windows wait (``None`` = slots / 8);
            ``max_encoder_batch`` the most (``None`` = slots / 4: passes stagger the rows, so later ones overlap);
            a live or sync window, or an idle decoder, starts an encoder pass at once.
        overlap_encoder: on a GPU, run the arrivals' log-Mel and encoder on the engine's side stream while
            the rows decode (they join the step after it ends); else (the default) in line, between two
            steps. Off by default: on an H200 the encoder's GEMMs slowed the concurrent steps, 0.86× static
            on the mixed workload against 1.02× in line (docs/benchmarks.md, "GPU, engine").

    Drive it with :meth:`start` (a background thread) or :meth:`step` / :meth:`run_until_idle` (the
    caller's thread, as the tests and the benchmark do); :meth:`submit` is thread-safe. One
    scheduler per engine, and no ``generate`` call on that engine meanwhile (they share the cache).
    A row's result is read from a snapshot of its last step, taken without a device sync: one spare step.
    """

    def __init__(
        self,
        engine: TorchEngine,
        slots: int | None = None,
        encoder_batch: int | None = None,
        max_encoder_batch: int | None = None,
        overlap_encoder: bool = False,
    ) -> None:
        self.engine, self.decoder = engine, engine._decoder
        self.slots = min(slots or self.decoder.buckets[-1], self.decoder.buckets[-1])
        self.encoder_batch = max(1, encoder_batch or self.slots // 8)
        self.max_encoder_batch = max(self.encoder_batch, max_encoder_batch or self.slots // 4)
        self.limit_default = engine._params.random_weights_fixed_tokens or engine._params.max_new_tokens
        self.width = self.decoder.state.history.shape[1]
        self.device = device = self.decoder.positions.device
        cuda = device.type == "cuda"
        rows = self.decoder.buckets[-1]  # a step may run a bucket larger than ``slots``
        self.no_speech = torch.zeros(rows, device=device)
        # two pinned host snapshots (finished, history, summed log-prob, no-speech) of a step's end
        flat, long = ((rows,), torch.float32), ((rows, self.width), torch.long)
        layout = [((rows,), torch.bool), long, flat, flat]
        self._snaps = [tuple(torch.zeros(shape, dtype=t, pin_memory=cuda) for shape, t in layout) for _ in range(2)]
        self._pending: tuple[int, int, torch.cuda.Event | None] | None = None  # (step, snap index, event)
        self.rows: list[Entry | None] = [None] * self.slots
        self.waiting: dict[Priority, deque[Entry]] = {p: deque() for p in PRIORITY_LEVELS}
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stop = False
        self._failed: BaseException | None = None  # the loop's error: later submissions get it at once
        self._in_pass: list[Entry] = []  # taken from the queue, not yet in a row (an encoder pass)
        self.overlap = overlap_encoder and device.type == "cuda"
        # an encoder pass under way (GPU, overlap): its rows, windows, cross K/V and the event of its end
        self._encoding: tuple[list[int], list[Entry], torch.Tensor, torch.cuda.Event | None] | None = None
        self.steps = self.row_steps = self.encoder_passes = self.encoded = 0
        self.step_seconds = 0.0  # host wall time of the loop's steps that launched a decode step
        self.delivered = self.cancelled = self.expired = 0

    def submit(self, window: Window) -> Future[Hypothesis]:
        """Queue ``window``; the future gets its :class:`Hypothesis`, or :class:`DeadlineExceeded`.

        ``future.cancel()`` works until the result is set: a waiting window is dropped, a decoding
        row leaves at the next step.

        Raises:
            ValueError: unknown priority, audio not 1-D, or ``max_new`` < 1.
        """
        window.check()
        future: Future[Hypothesis] = Future()
        with self._lock:
            if self._failed is not None:
                future.set_exception(self._failed)
                return future
            self.waiting[window.priority].append(Entry(window, future))
            self._lock.notify()
        return future

    def stats(self) -> dict[str, float]:
        """Gauges and counters: queue depth per priority, active rows, mean active rows per step, mean encoder batch."""
        with self._lock:
            depth = {f"queue_{p}": float(len(q)) for p, q in self.waiting.items()}
        return {
            **depth,
            "active_rows": float(sum(r is not None for r in self.rows)),
            "steps": float(self.steps),
            "mean_active_rows": self.row_steps / self.steps if self.steps else 0.0,
            "step_seconds": self.step_seconds,
            "encoder_passes": float(self.encoder_passes),
            "mean_encoder_batch": self.encoded / self.encoder_passes if self.encoder_passes else 0.0,
            **{name: float(getattr(self, name)) for name in ("delivered", "cancelled", "expired")},
        }

    def start(self) -> None:
        """Run :meth:`step` on a background thread until :meth:`close`.

        Raises:
            RuntimeError: the loop already runs (two loops on one KV cache would corrupt it).
        """
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("the in-flight scheduler is already started")
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="inflight-scheduler", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the background thread (after its current step)."""
        with self._lock:
            self._stop = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        try:
            while not self._stop:
                started, before = time.perf_counter(), self.steps
                more = self.step()
                if self.steps != before:
                    self.step_seconds += time.perf_counter() - started
                if not more:
                    with self._lock:
                        if not self._stop and not any(self.waiting.values()):
                            self._lock.wait(0.05)
        except Exception as exc:  # every open future gets the error rather than waiting forever
            with self._lock:
                self._failed = exc
                queued = [e for q in self.waiting.values() for e in q]
                entries = [*(r for r in self.rows if r is not None), *self._in_pass, *queued]
                self.rows, self.waiting = [None] * self.slots, {p: deque() for p in PRIORITY_LEVELS}
                self._in_pass, self._encoding = [], None
            for entry in entries:
                self._deliver(entry.future, exc)
            log.exception("in-flight scheduler stopped; %d windows answered with the error", len(entries))

    def run_until_idle(self) -> None:
        """Step until no window waits and no row decodes."""
        while self.step():
            continue

    def step(self) -> bool:
        """Launch one decode step over the active rows, deliver finished rows, admit waiting windows.

        Returns:
            whether work remains (waiting windows, active rows or an unread snapshot).
        """
        stream = self.decoder.stream
        on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        with torch.inference_mode(), on_stream:
            previous = self._launch()
            self._harvest(previous)
            self._admit()
        with self._lock:
            queued = any(self.waiting.values())
        busy = self._pending is not None or self._encoding is not None
        return queued or busy or any(r is not None for r in self.rows)

    def _launch(self) -> tuple[int, int, torch.cuda.Event | None] | None:
        """Launch a step and its snapshot; return the snapshot to read now (the one before, or the last)."""
        active = [i for i, r in enumerate(self.rows) if r is not None]
        if not active:
            previous, self._pending = self._pending, None
            return previous
        d = self.decoder
        b = choose_bucket(active[-1] + 1, d.buckets)
        entries = [r for r in self.rows if r is not None]
        span = next(w for w in d.spans if w >= min(d.context, max(r.fed for r in entries) + 1))
        full = any(r.full for r in entries)
        if d.mode == "graphs":
            d.graphs[b, full, span].replay()
        else:
            d._step(b, full, span)
        for r in entries:
            r.fed += 1
        self.steps += 1
        self.row_steps += len(active)
        snap = self.steps % 2
        finished, history, logprob, no_speech = self._snaps[snap]
        s = d.state
        finished[:b].copy_(s.finished[:b], non_blocking=True)
        history[:b].copy_(s.history[:b], non_blocking=True)
        logprob[:b].copy_(s.sum_logprob[:b], non_blocking=True)
        no_speech[:b].copy_(self.no_speech[:b], non_blocking=True)
        event = None
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record()
        previous, self._pending = self._pending, (self.steps, snap, event)
        return previous

    def _harvest(self, previous: tuple[int, int, torch.cuda.Event | None] | None) -> None:
        """Free cancelled rows; deliver the rows finished in snapshot ``previous`` (step, index, event)."""
        for slot, r in enumerate(self.rows):  # cancelled rows leave now
            if r is not None and r.future.cancelled():
                self.rows[slot] = None
                self.cancelled += 1
        if previous is None:
            return
        step, snap, event = previous
        if event is not None:
            event.synchronize()
        finished, history, logprob, no_speech = self._snaps[snap]
        done = finished.tolist()
        ready: list[tuple[int, Entry, Hypothesis]] = []
        for slot, r in enumerate(self.rows):
            if r is None or r.joined >= step or not done[slot]:
                continue
            tokens = generated_ids(history[slot].tolist(), [], self.decoder.eot)
            ready.append((slot, r, Hypothesis(tokens, float(logprob[slot]), float(no_speech[slot]), r.language)))
        worded = [(slot, r, h) for slot, r, h in ready if r.window.words]
        if worded:  # aligned while the rows still hold their cross-attention keys/values (torch_alignment)
            e = self.engine
            starts = [sot_sequence(r.window.prompt, r.language, e._specials, e._tokenizer) for _, r, _ in worded]
            aligned = e.aligner.with_words(
                [h for _, _, h in worded], host_to_device([slot for slot, _, _ in worded], self.device), None, starts,
                [len(r.window.audio) for _, r, _ in worded],
            )  # fmt: skip
            with_words = {slot: h for (slot, _, _), h in zip(worded, aligned, strict=True)}
            ready = [(slot, r, with_words.get(slot, h)) for slot, r, h in ready]
        for slot, r, hypothesis in ready:
            self.rows[slot] = None
            self._deliver(r.future, hypothesis)

    def _deliver(self, future: Future[Hypothesis], result: Hypothesis | BaseException) -> None:
        try:
            future.set_exception(result) if isinstance(result, BaseException) else future.set_result(result)
            self.delivered += not isinstance(result, BaseException)
        except InvalidStateError:  # cancelled meanwhile
            self.cancelled += 1

    def _take(self, free: int) -> list[Entry]:
        """Up to ``free`` waiting windows by priority, once enough wait (or a live/sync one, or nothing decodes)."""
        if not free and self.steps % SWEEP_EVERY:
            return []  # the queue's deadline and cancel sweep: when a row is free, else every few steps
        now = time.monotonic()
        expired: list[Entry] = []
        try:
            with self._lock:
                return self._take_locked(free, now, expired)
        finally:  # outside the lock: a done-callback may call submit from another thread
            for e in expired:
                self._deliver(e.future, DeadlineExceeded("waited past its deadline; not decoded"))

    def _take_locked(self, free: int, now: float, expired: list[Entry]) -> list[Entry]:
        """:meth:`_take` under the lock; deadline-expired windows go to ``expired`` (answered after)."""
        for level, queue in self.waiting.items():
            gone = [e for e in queue if e.future.cancelled() or (e.window.deadline or now) < now]
            if gone:
                self.waiting[level] = deque(e for e in queue if all(e is not g for g in gone))
            for e in gone:
                if e.future.cancelled():
                    self.cancelled += 1
                else:
                    self.expired += 1
                    expired.append(e)
        waiting = sum(len(q) for q in self.waiting.values())
        urgent = bool(self.waiting["live"] or self.waiting["sync"])
        idle = all(r is None for r in self.rows)
        if not free or not waiting or not (urgent or idle or free >= min(self.encoder_batch, waiting)):
            return []
        taken: list[Entry] = []
        for level in PRIORITY_LEVELS:
            queue = self.waiting[level]
            while queue and len(taken) < min(free, self.max_encoder_batch):
                taken.append(queue.popleft())
        return taken

    def _admit(self) -> None:
        """Start an encoder pass for arrivals into free rows; join the pass that is ready (at once on the CPU)."""
        try:
            if self._encoding is None:
                free = [i for i, r in enumerate(self.rows) if r is None]
                self._in_pass = arrivals = self._take(len(free))
                if arrivals:
                    self._encoding = (free[: len(arrivals)], arrivals, *self._encode(arrivals))
            if self._encoding is not None:
                event = self._encoding[3]
                if event is not None and not any(r is not None for r in self.rows):
                    event.synchronize()  # nothing decodes meanwhile
                if event is None or event.query():
                    self._join(*self._encoding)
                    self._encoding, self._in_pass = None, []
        except Exception as exc:  # this pass's windows get the error (a bad prompt); the rows decode on
            failed, self._in_pass, self._encoding = self._in_pass, [], None
            for entry in failed:
                self._deliver(entry.future, exc)
            log.exception("encoder pass of %d windows failed; they were answered with the error", len(failed))

    def _encode(self, arrivals: list[Entry]) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Log-Mel + encoder + cross-attention keys/values of the arrivals: on the side stream (GPU, overlap)."""
        e, d = self.engine, self.decoder
        side = e._side if self.overlap else None
        if side is None:
            return d.cross_kv(e._encoder(e._mel.features([a.window.audio for a in arrivals]))), None
        audio = [a.window.audio for a in arrivals]
        with torch.cuda.stream(side), gemm_sm_target(e._device, e.tuning.encoder_gemm_sms):
            features = e._mel.staged(audio) if e.tuning.inflight_staged else e._mel.features(audio)
            kv = d.cross_kv(e._encoder(features))
            event = torch.cuda.Event()
            event.record()
        kv.record_stream(d.stream or torch.cuda.current_stream())
        return kv, event

    def _join(self, slots: list[int], arrivals: list[Entry], kv: torch.Tensor, event: torch.cuda.Event | None) -> None:
        """Cross-attention keys/values, prompt prefill and first token of encoded arrivals, into their rows."""
        e, d = self.engine, self.decoder
        if event is not None:
            torch.cuda.current_stream().wait_event(event)
        rows = host_to_device(slots, self.device)
        for i in range(len(d.cross_k)):
            d.cross_k[i].index_copy_(0, rows, kv[i, 0])
            d.cross_v[i].index_copy_(0, rows, kv[i, 1])
        self.encoder_passes += 1
        self.encoded += len(arrivals)
        languages = [a.window.prompt.language for a in arrivals]
        if e._specials.multilingual and any(lang is None for lang in languages):
            sot = torch.full((len(arrivals), 1), d.sot, device=self.device)
            logits = d._prefill(sot, torch.zeros_like(sot), rows, kv)[:, 0]
            ids = host_to_device(list(e._languages), self.device)
            best = ids[logits[:, ids].argmax(-1)].tolist()  # token ids, as StaticDecoder.detect_language
            languages = [lang or e._languages[k] for lang, k in zip(languages, best, strict=True)]
        prompts = [
            build_prompt_ids(
                a.window.prompt, e._specials, e._encode, e._tokenizer.token_to_id, lang, a.window.timestamps
            )
            for a, lang in zip(arrivals, languages, strict=True)
        ]
        padded, positions = d.prompt_rows(prompts)
        tokens, read = host_to_device(padded, self.device), host_to_device(positions, self.device)
        logits = d._prefill(tokens, read, rows, kv)
        if d.no_speech is not None:
            self.no_speech[rows] = logits[:, 0].softmax(-1)[:, d.no_speech]
        fresh = self._fresh(arrivals, prompts)
        full = [a.window.timestamps or a.window.temperature > 0 or a.window.repetition_penalty != 1.0 for a in arrivals]
        d.rules.choose(logits[:, 1], fresh, any(full))
        for name in fresh.__dataclass_fields__:
            getattr(d.state, name)[rows] = getattr(fresh, name)
        for slot, a, p, f, lang in zip(slots, arrivals, prompts, full, languages, strict=True):
            a.language, a.fed, a.joined, a.full = lang, len(p), self.steps, f
            self.rows[slot] = a

    def _fresh(self, arrivals: list[Entry], prompts: list[list[int]]) -> RowState:
        """Row state for the arrivals, before their first token (:meth:`RowState.clear`)."""
        d, n = self.decoder, len(arrivals)
        s = RowState.allocate(n, self.width, d.state.seen.shape[1], self.device)
        limits = d.row_limits(
            [
                a.window.max_new or self.engine.window_token_limit(a.window.audio) or self.limit_default
                for a in arrivals
            ],
            [len(p) for p in prompts],
        )
        s.pos.copy_(host_to_device([len(p) for p in prompts], self.device))
        s.limit.copy_(host_to_device(limits, self.device))
        s.penalty.copy_(host_to_device([a.window.repetition_penalty for a in arrivals], self.device))
        s.temperature.copy_(host_to_device([a.window.temperature for a in arrivals], self.device))
        s.timestamps.copy_(host_to_device([a.window.timestamps for a in arrivals], self.device))
        s.clear(d.eot)
        return s
