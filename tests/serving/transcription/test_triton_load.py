"""Busy with another client's work or hung: the canary's reading of the model scheduler's metrics on Triton
(triton_load.py), fake clock."""

from __future__ import annotations

import asyncio

import pytest
from fake_backend import FakeBackend

from whisper_build.serving.gateway.metrics import GatewayMetrics
from whisper_build.serving.transcription.backend import BackendTimeout, ModelRestarting
from whisper_build.serving.transcription.health import CANARY_STREAM_GRACE_S, ModelHealth
from whisper_build.serving.transcription.triton_load import TritonLoad, TritonMetricsReader, parse_load

# The model scheduler's series as Triton exposes custom metrics (prometheus-cpp text; trimmed)
TRITON_METRICS = """\
# HELP whisper_scheduler_finished_windows_total Windows whose decode finished
# TYPE whisper_scheduler_finished_windows_total counter
whisper_scheduler_finished_windows_total{model="whisper"} 3
whisper_scheduler_finished_windows_total{model="other"} 40
# HELP whisper_scheduler_queued_windows Windows waiting in the model's scheduler
# TYPE whisper_scheduler_queued_windows gauge
whisper_scheduler_queued_windows{level="live",model="whisper"} 0
whisper_scheduler_queued_windows{level="sync",model="whisper"} 1
whisper_scheduler_queued_windows{level="bulk",model="whisper"} 4
whisper_scheduler_queued_windows{level="sync",model="other"} 7
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="whisper",version="1"} 0
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.51
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TimingBackend(FakeBackend):
    """FakeBackend that records each canary's timeout."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float] = []

    async def infer(self, windows, request, timeout):  # type: ignore[no-untyped-def]
        self.timeouts.append(timeout)
        return await super().infer(windows, request, timeout)


class Triton:
    """What the fake Triton's metrics say next (``None``: unreadable)."""

    def __init__(self) -> None:
        self.load: TritonLoad | None = TritonLoad(queued=0, finished=10)

    async def read(self) -> TritonLoad | None:
        return self.load

    def set(self, queued: int, finished_more: int = 0) -> None:
        assert self.load is not None
        self.load = TritonLoad(queued, self.load.finished + finished_more)


def make() -> tuple[ModelHealth, TimingBackend, Clock, Triton, GatewayMetrics]:
    from whisper_build.serving.gateway.settings import GatewaySettings

    clock, triton, metrics = Clock(), Triton(), GatewayMetrics(8)
    settings = GatewaySettings()
    health = ModelHealth(
        settings.health,
        metrics,
        model_name=settings.model_name,
        request_timeout_seconds=settings.requests.request_timeout_seconds,
        clock=clock,
        triton_load=triton.read,
    )
    backend = TimingBackend()
    assert asyncio.run(health.canary(backend)) and health.problem() is None
    return health, backend, clock, triton, metrics


def timeout_after(health: ModelHealth, backend: TimingBackend, clock: Clock, seconds: float) -> None:
    backend.error = BackendTimeout("Triton did not answer")
    clock.now += seconds
    asyncio.run(health.canary(backend))


def busy_gauge(metrics: GatewayMetrics) -> float:
    return metrics.model_busy_with_others._value.get()  # type: ignore[attr-defined]


def test_parse_load_reads_the_models_queued_windows_over_all_levels_and_finished_windows() -> None:
    assert parse_load(TRITON_METRICS, "whisper") == TritonLoad(queued=5, finished=3)
    # today's non-decoupled model exports only Triton's own series: no reading, not "idle"
    triton_only = TRITON_METRICS.split("# HELP nv_inference_pending")[1]
    assert parse_load("# HELP nv_inference_pending" + triton_only, "whisper") is None
    assert parse_load("nv_cpu_utilization 0.5\n", "whisper") is None
    assert parse_load("<html><body>not Triton</body></html>\n", "whisper") is None  # a wrong port's page


def test_the_reader_needs_an_http_url_and_answers_none_when_triton_is_unreachable() -> None:
    with pytest.raises(ValueError, match="http"):
        TritonMetricsReader("127.0.0.1:8002", "whisper")
    assert asyncio.run(TritonMetricsReader("http://127.0.0.1:1/metrics", "whisper", 0.5).read()) is None


def test_a_canary_queued_behind_another_clients_batch_is_slow_not_dead_until_the_hang_bound() -> None:
    health, backend, clock, triton, metrics = make()
    triton.set(queued=1)  # GIVEN the canary queued behind a batch that decodes (no window finishes meanwhile)
    timeout_after(health, backend, clock, 7)
    assert health.consecutive_failures == 0 and health.shared.busy and busy_gauge(metrics) == 1.0
    clock.now += 30  # THEN no staleness while busy, and the next canary may wait up to hang_after_seconds
    assert health.problem() is None
    timeout_after(health, backend, clock, 0)
    assert (
        backend.timeouts[-1] == health.settings.hang_after_seconds + CANARY_STREAM_GRACE_S and health.problem() is None
    )
    clock.now += 24  # 61 s without a finished window: hung
    assert "no inference succeeded" in health.problem()
    timeout_after(health, backend, clock, 0)
    timeout_after(health, backend, clock, 0)
    assert health.consecutive_failures == 2 and busy_gauge(metrics) == 0.0


def test_windows_finished_during_the_wait_mean_busy_even_with_nothing_queued() -> None:
    health, backend, clock, triton, _ = make()
    for _ in range(10):  # back-to-back long decodes: each wait sees a window finish
        triton.set(queued=0, finished_more=1)
        timeout_after(health, backend, clock, 14)
        assert health.problem() is None, health.problem()
    backend.error = None
    assert asyncio.run(health.canary(backend)) and not health.shared.busy


def test_an_idle_hang_is_a_failure_and_later_queued_canaries_excuse_nothing() -> None:
    health, backend, clock, triton, _ = make()
    timeout_after(health, backend, clock, 7)  # nothing queued, nothing finished: the canary itself hangs
    assert health.consecutive_failures == 1
    clock.now += 1.1
    assert "no inference succeeded" in health.problem()  # stale at 8 s, as without Triton's view
    triton.set(queued=1)  # the next canary waits behind the hung one
    timeout_after(health, backend, clock, 1)
    assert health.consecutive_failures == 2 and not health.shared.busy


def test_unreadable_metrics_or_a_dead_runtime_are_failures_as_before() -> None:
    health, backend, clock, triton, _ = make()
    triton.load = None
    timeout_after(health, backend, clock, 7)
    assert health.consecutive_failures == 1
    health, backend, clock, triton, _ = make()
    triton.set(queued=3)
    timeout_after(health, backend, clock, 7)
    assert health.shared.busy
    backend.error = ModelRestarting("Stub process 'whisper_0_0' is not healthy.")
    asyncio.run(health.canary(backend))
    assert "runtime died" in health.problem() and not health.shared.busy
