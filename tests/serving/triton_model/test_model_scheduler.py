"""The ``whisper`` model's own scheduler (triton_model/scheduler.py) with an in-memory engine: priority
order, queue bounds, deadlines, cancellation, a failing engine call, and its gauges."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import CancelledError
from contextlib import contextmanager

import numpy as np
import pytest
from fake_engine import Decoded, ScriptedEngine

from whisper_build.serving import contract
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.batching import RequestWindows
from whisper_build.serving.triton_model.cancellation import BatchCancelled
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.scheduler import (
    QueueFull,
    RequestTimeout,
    SchedulerConfig,
    StaticScheduler,
)
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics

LIVE, SYNC, BULK = contract.LIVE_PRIORITY, contract.SYNC_PRIORITY, contract.BULK_PRIORITY
WAIT_S = 10.0


class GatedEngine(ScriptedEngine):
    """Decodes window ``[v, …]`` to the text ``"v"``; ``generate`` waits for :attr:`gate` and may fail once."""

    def __init__(self, sum_logprob: float = 0.0) -> None:
        super().__init__(lambda a, _p, _t: Decoded([f"{a[0]:g}"], sum_logprob=sum_logprob))
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_next: Exception | None = None
        self.order: list[list[float]] = []

    def generate(self, audio, prompts, repetition_penalty, *, timestamps, temperature):  # type: ignore[no-untyped-def]
        self.order.append([float(a[0]) for a in audio])
        self.entered.set()
        assert self.gate.wait(WAIT_S), "the test never opened the gate"
        failure, self.fail_next = self.fail_next, None
        if failure is not None:
            raise failure
        return super().generate(audio, prompts, repetition_penalty, timestamps=timestamps, temperature=temperature)


def _request(*values: float) -> RequestWindows:
    """One request of one window per value, each window ``[value] * 160`` (10 ms)."""
    return RequestWindows(
        audio=[np.full(160, v, np.float32) for v in values],
        prompts=[DecodePrompt() for _ in values],
        repetition_penalty=[1.0 for _ in values],
    )


@pytest.fixture
def engine() -> GatedEngine:
    return GatedEngine()


@contextmanager
def _scheduler(engine: GatedEngine, **config: object) -> Iterator[StaticScheduler]:
    settings = {"max_batch_windows": 2, "max_queue_delay_s": 0.0, **config}
    scheduler = StaticScheduler(
        engine,
        DecodingPolicy(silence_dbfs=-100.0, cut_speech_db=0.0),
        SchedulerConfig(**settings),
        SchedulerMetrics("whisper"),
    )
    try:
        yield scheduler
    finally:
        engine.gate.set()
        scheduler.close()


@pytest.fixture
def scheduler(engine: GatedEngine) -> Iterator[StaticScheduler]:
    with _scheduler(engine) as made:
        yield made


def _texts(job) -> list[str]:  # type: ignore[no-untyped-def]
    return [w.text for w in job.future.result(WAIT_S)]


def _busy(scheduler: StaticScheduler, engine: GatedEngine):  # type: ignore[no-untyped-def]
    """Submit a bulk request of value 100 and wait until the engine decodes it (behind the closed gate)."""
    job = scheduler.submit(_request(100), BULK)
    assert engine.entered.wait(WAIT_S)
    return job


def _value(scheduler: StaticScheduler, name: str, **labels: str) -> float:
    return scheduler.metrics.value(name, **labels)


def test_a_live_window_queued_behind_bulk_work_runs_in_the_next_batch(
    scheduler: StaticScheduler, engine: GatedEngine
) -> None:
    first = _busy(scheduler, engine)
    bulk = [scheduler.submit(_request(v), BULK) for v in (1, 2, 3)]
    sync = scheduler.submit(_request(20), SYNC)
    live = scheduler.submit(_request(10), LIVE)
    assert _value(scheduler, contract.SCHEDULER_QUEUED, level="bulk") == 3
    assert _value(scheduler, contract.SCHEDULER_ACTIVE_ROWS) == 1
    engine.gate.set()
    assert [_texts(job) for job in (first, live, sync, *bulk)] == [["100"], ["10"], ["20"], ["1"], ["2"], ["3"]]
    # batches of 2 windows: the running one, then live + sync, then the bulk work in arrival order
    assert engine.order == [[100.0], [10.0, 20.0], [1.0, 2.0], [3.0]]
    assert _value(scheduler, contract.SCHEDULER_STEPS) == 4
    assert _value(scheduler, contract.SCHEDULER_STEP_ROWS) == 6 == _value(scheduler, contract.SCHEDULER_FINISHED)
    assert _value(scheduler, contract.SCHEDULER_QUEUED, level="bulk") == 0
    assert _value(scheduler, contract.SCHEDULER_ACTIVE_ROWS) == 0


def test_each_level_has_its_own_bounded_queue(engine: GatedEngine) -> None:
    with _scheduler(engine, max_queue_size=1, bulk_max_queue_size=2) as scheduler:
        _busy(scheduler, engine)
        scheduler.submit(_request(1), SYNC)
        with pytest.raises(QueueFull, match="^Exceeds maximum queue size$"):
            scheduler.submit(_request(2, 3), SYNC)
        scheduler.submit(_request(4), BULK)
        scheduler.submit(_request(5), BULK)
        with pytest.raises(QueueFull):
            scheduler.submit(_request(6), BULK)
        live = scheduler.submit(_request(7), LIVE)  # a full sync or bulk queue never refuses live work
        rejected = contract.SCHEDULER_REJECTED
        assert _value(scheduler, rejected, level="sync", reason="queue_full") == 2  # windows
        assert _value(scheduler, rejected, level="bulk", reason="queue_full") == 1
        assert _value(scheduler, rejected, level="live", reason="queue_full") == 0
        engine.gate.set()
        assert _texts(live) == ["7"]


def test_a_window_waiting_past_its_deadline_is_answered_at_once_and_never_decoded(
    scheduler: StaticScheduler, engine: GatedEngine
) -> None:
    _busy(scheduler, engine)
    late = scheduler.submit(_request(1), SYNC, timeout_s=0.05)
    patient = scheduler.submit(_request(2), SYNC, timeout_s=60)
    # answered while the engine is still busy with the batch before it (long before the gate's own limit)
    with pytest.raises(RequestTimeout, match="^Request timeout expired$"):
        late.future.result(2.0)
    assert not engine.gate.is_set() and len(engine.order) == 1
    engine.gate.set()
    assert _texts(patient) == ["2"]
    assert engine.order == [[100.0], [2.0]]
    assert _value(scheduler, contract.SCHEDULER_REJECTED, level="sync", reason="timeout") == 1


def test_a_cancelled_waiting_request_is_dropped(scheduler: StaticScheduler, engine: GatedEngine) -> None:
    _busy(scheduler, engine)
    gone = scheduler.submit(_request(1, 2), SYNC)
    kept = scheduler.submit(_request(3), SYNC)
    scheduler.cancel(gone)
    assert _value(scheduler, contract.SCHEDULER_QUEUED, level="sync") == 1
    engine.gate.set()
    assert _texts(kept) == ["3"]
    with pytest.raises(CancelledError):
        gone.future.result(0)
    assert engine.order == [[100.0], [3.0]]
    assert _value(scheduler, contract.SCHEDULER_REJECTED, level="sync", reason="cancelled") == 2


def test_a_batch_whose_requests_are_all_cancelled_stops_before_the_next_engine_call() -> None:
    # every decode has a low log-probability, so the temperature fallback decodes each window again
    engine = GatedEngine(sum_logprob=-50.0)
    with _scheduler(engine) as scheduler:
        job = _busy(scheduler, engine)
        scheduler.cancel(job)
        follower = scheduler.submit(_request(5), SYNC)
        engine.gate.set()
        assert follower.future.result(WAIT_S)[0].text == "5"
        # the cancelled batch made one engine call, not the fallback's six
        assert engine.order[0] == [100.0] and engine.order.count([100.0]) == 1
        assert _value(scheduler, contract.SCHEDULER_REJECTED, level="bulk", reason="cancelled") == 1
        with pytest.raises((CancelledError, BatchCancelled)):
            job.future.result(0)


def test_a_failing_engine_call_answers_only_its_batch(scheduler: StaticScheduler, engine: GatedEngine) -> None:
    engine.fail_next = MemoryError("CUDA out of memory")
    failed = _busy(scheduler, engine)
    after = scheduler.submit(_request(7), SYNC)
    engine.gate.set()
    with pytest.raises(RuntimeError, match="whisper engine failed: MemoryError: CUDA out of memory"):
        failed.future.result(WAIT_S)
    assert _texts(after) == ["7"]
    assert _value(scheduler, contract.SCHEDULER_FINISHED) == 1


def test_requests_arriving_within_the_batching_delay_share_a_batch(engine: GatedEngine) -> None:
    engine.gate.set()
    with _scheduler(engine, max_batch_windows=4, max_queue_delay_s=0.3) as scheduler:
        jobs = [scheduler.submit(_request(v), SYNC) for v in (1, 2, 3)]
        assert [_texts(job) for job in jobs] == [["1"], ["2"], ["3"]]
        assert engine.order == [[1.0, 2.0, 3.0]]


def test_unknown_levels_are_refused(scheduler: StaticScheduler) -> None:
    with pytest.raises(ValueError, match="priority level: one of 1, 2, 3, got 7"):
        scheduler.submit(_request(1), 7)


class _Series:
    """Stands in for one pb_utils metric: records every call (the stub's IPC) and the thread making it."""

    def __init__(self, calls: list[tuple[str, float, str]]) -> None:
        self.calls = calls

    def set(self, value: float) -> None:
        self.calls.append(("set", value, threading.current_thread().name))

    def increment(self, value: float) -> None:
        self.calls.append(("increment", value, threading.current_thread().name))


class _Family:
    GAUGE, COUNTER = "gauge", "counter"
    calls: list[tuple[str, float, str]] = []
    series: dict[tuple[str, tuple[tuple[str, str], ...]], _Series] = {}

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name = name

    def Metric(self, labels: dict[str, str]) -> _Series:  # noqa: N802 - the backend's spelling
        series = _Series(_Family.calls)
        _Family.series[(self.name, tuple(sorted((k, v) for k, v in labels.items() if k != "model")))] = series
        return series


def test_scheduler_threads_never_call_triton_metrics_only_flush_does() -> None:
    # GIVEN the scheduler's values changed on another thread (the worker's)
    metrics = SchedulerMetrics("whisper", _Family)
    worker = threading.Thread(
        target=lambda: (metrics.queued(2, 3), metrics.step(rows=4), metrics.step(rows=2), metrics.queued(2, -3)),
        name="whisper-scheduler",
    )
    worker.start()
    worker.join()
    # THEN no Triton metric was called from it (the stub's IPC is not shared between threads)
    assert _Family.calls == []
    # WHEN the loop flushes THEN counters grow by what changed, unchanged gauges are left alone
    metrics.flush()
    metrics.step(rows=1)
    metrics.flush()
    metrics.flush()
    assert {c[2] for c in _Family.calls} == {threading.current_thread().name}
    assert [c[:2] for c in _Family.calls] == [
        ("increment", 2.0),
        ("increment", 6.0),
        ("increment", 1.0),
        ("increment", 1.0),
    ]
