"""The gateway's model-health rules (canary, thresholds, staleness, repair back-off) on a fake clock."""

from __future__ import annotations

import asyncio

import pytest
from fake_backend import FakeBackend
from pydantic import ValidationError

from whisper_build.contracts.gateway_metrics import HEALTHY
from whisper_build.serving.gateway.metrics import GatewayMetrics
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.backend import BackendError, BackendTimeout, ModelRestarting
from whisper_build.serving.transcription.health import CANARY_SECONDS, ModelHealth, canary_clip
from whisper_build.serving.transcription.triton_load import TritonLoad


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(busy: bool = False) -> tuple[ModelHealth, FakeBackend, Clock, dict[str, bool]]:
    clock, state = Clock(), {"busy": busy}
    settings = GatewaySettings()
    health = ModelHealth(
        settings.health,
        GatewayMetrics(8),
        model_name=settings.model_name,
        request_timeout_seconds=settings.requests.request_timeout_seconds,
        busy=lambda: state["busy"],
        clock=clock,
    )
    return health, FakeBackend(), clock, state


def test_the_canary_is_one_second_of_16k_silence() -> None:
    clip = canary_clip()
    assert clip.shape == (int(CANARY_SECONDS * 16000),) and clip.dtype.name == "float32" and not clip.any()


def test_unready_until_a_success_then_two_failures_or_staleness_make_it_unready() -> None:
    health, backend, clock, _ = make()
    assert "loading" in health.problem()
    assert asyncio.run(health.canary(backend)) and health.problem() is None
    backend.error = BackendError("Stub process 'whisper_0_0' is not healthy.")
    asyncio.run(health.canary(backend))
    assert health.problem() is None  # one failure is tolerated
    asyncio.run(health.canary(backend))
    assert "2 inferences in a row failed" in health.problem() and "not healthy" in health.problem()
    backend.error = None
    asyncio.run(health.canary(backend))
    assert health.problem() is None
    clock.now += 8.1  # nothing succeeded for longer than stale_after_seconds (a hung server)
    assert "no inference succeeded for 8 s" in health.problem()


def test_a_worker_starting_while_the_pod_is_busy_is_not_loading_until_a_canary_fails() -> None:
    # GIVEN a worker with no canary back yet (its first waits behind another worker's requests)
    health, backend, _, state = make(busy=True)
    assert health.problem() is None and health.pod_problem() is None  # busy, not loading
    state["busy"] = False
    assert "loading" in health.problem()  # an idle pod with no success is loading
    # WHEN its first canary fails (a dead model fails at once) THEN it is not excused, busy or not
    state["busy"] = True
    backend.error = BackendError("Stub process 'whisper_0_0' is not healthy.")
    asyncio.run(health.canary(backend))
    assert "not healthy" in health.problem()


def test_a_busy_model_is_slow_not_dead() -> None:
    health, backend, clock, state = make(busy=True)
    asyncio.run(health.canary(backend))
    backend.error = BackendTimeout("Triton did not answer within 5 s")
    for _ in range(3):
        asyncio.run(health.canary(backend))
    clock.now += 30
    assert health.problem() is None  # canary timeouts behind client requests, no staleness while busy
    state["busy"] = False
    assert "no inference succeeded" in health.problem()
    asyncio.run(health.canary(backend))
    asyncio.run(health.canary(backend))
    assert "2 inferences in a row failed" in health.problem()  # idle and timing out: a hang


class HeldFirstCanary(FakeBackend):
    """The first canary waits until ``release`` (held by a busy model, or by a stub that died holding it);
    later ones fail with ``later_error`` or wait ``later_wait_s`` and answer (a busy model); probes are counted."""

    def __init__(self, later_error: Exception | None = None, later_wait_s: float = 0.0) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.later_error, self.later_wait_s = later_error, later_wait_s
        self.probes = self.cancelled = self.cancelled_by_canary = 0

    async def infer(self, windows, request, timeout):  # type: ignore[no-untyped-def]
        first = self.canaries == 0
        self.canaries += 1
        if first:
            await self.release.wait()
            return await super().infer(windows, request, timeout)
        self.probes += 1
        if self.later_error is not None:
            raise self.later_error
        try:
            await asyncio.sleep(self.later_wait_s)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return await super().infer(windows, request, timeout)


def _canary_while_busy(
    backend: HeldFirstCanary,
    release_after_s: float | None,
    settings: GatewaySettings | None = None,
    served_before: bool = True,
) -> tuple[bool, float, ModelHealth]:
    """One canary with the pod busy (default: probes every 0.2 s, 60 s to wait): (succeeded, seconds, health)."""
    settings = settings or GatewaySettings(canary_timeout_seconds=0.2, request_timeout_seconds=60)
    health = ModelHealth(
        settings.health,
        GatewayMetrics(8),
        model_name=settings.model_name,
        request_timeout_seconds=settings.requests.request_timeout_seconds,
        busy=lambda: True,
    )
    if served_before:
        health.record_success()

    async def run() -> tuple[bool, float]:
        if release_after_s is not None:
            asyncio.get_running_loop().call_later(release_after_s, backend.release.set)
        started = asyncio.get_running_loop().time()
        ok = await health.canary(backend)
        took = asyncio.get_running_loop().time() - started
        await asyncio.sleep(0)  # one tick for a cancelled probe to end; asyncio.run would cancel what is left
        backend.cancelled_by_canary = backend.cancelled
        return ok, took

    ok, took = asyncio.run(run())
    return ok, took, health


def test_a_canary_held_by_a_dead_stub_is_failed_by_a_probe_not_the_request_timeout() -> None:
    # GIVEN the pod busy (the canary may wait the 60 s request timeout) and a stub that died holding the canary
    backend = HeldFirstCanary(later_error=ModelRestarting("Stub process 'whisper_0_0' is not healthy."))
    ok, took, health = _canary_while_busy(backend, release_after_s=None)
    # THEN a probe after canary_timeout_seconds learns it died, and /ping says so at once
    assert not ok and took < 5, took
    assert backend.probes == 1 and "runtime died" in (health.problem() or "")


def test_a_busy_model_is_probed_each_canary_timeout_and_the_probes_cancelled() -> None:
    # GIVEN the pod busy and a live model: the canary answers after 1.5 s, a probe would wait 10 s
    backend = HeldFirstCanary(later_wait_s=10.0)
    ok, took, health = _canary_while_busy(backend, release_after_s=1.5)
    # THEN the canary succeeds; every probe (one per 0.2 s of waiting, at most) was cancelled
    assert ok and 1.4 < took < 5, took
    assert 2 <= backend.probes <= 8 and backend.cancelled_by_canary == backend.probes, (
        backend.probes,
        backend.cancelled_by_canary,
    )
    assert health.problem() is None


def test_a_canary_held_by_a_stub_another_worker_replaced_passes_on_its_probe() -> None:
    # GIVEN the pod busy and a canary the dead stub holds forever, the model already loaded again
    # (by another worker): the probes reach the new runtime and answer after 0.1 s
    backend = HeldFirstCanary(later_wait_s=0.1)
    settings = GatewaySettings(canary_timeout_seconds=0.2, request_timeout_seconds=3)
    ok, took, health = _canary_while_busy(backend, None, settings, served_before=False)
    # THEN the probe's answer is the canary's: a success, not a wait until the request timeout
    assert ok and took < 1.5 and backend.probes == 1, (ok, took, backend.probes)
    assert health.last_success is not None and health.problem() is None


def test_a_probe_does_not_stretch_the_canary_past_its_timeout() -> None:
    # GIVEN the pod busy, a canary that may wait 0.5 s and is never answered, probes after each 0.4 s
    backend = HeldFirstCanary(later_wait_s=10.0)
    settings = GatewaySettings(canary_timeout_seconds=0.4, request_timeout_seconds=0.5)
    ok, took, _ = _canary_while_busy(backend, None, settings, served_before=False)
    # THEN it gives up at 0.5 s (its stream ends 1 s later: the load is read while it still waits)
    assert not ok and backend.probes == 1 and took < 0.7, (ok, backend.probes, took)


def test_a_worker_made_while_the_pod_was_idle_publishes_busy_not_loading_while_its_first_canary_waits() -> None:
    # GIVEN a worker made while the pod is idle: its gauge (what the pod's other workers' /ping reads) says 0
    settings = GatewaySettings(canary_interval_seconds=0.1, canary_timeout_seconds=0.2, request_timeout_seconds=60)
    metrics, state = GatewayMetrics(8), {"busy": False}
    health = ModelHealth(
        settings.health, metrics, model_name=settings.model_name, request_timeout_seconds=60, busy=lambda: state["busy"]
    )
    assert metrics.registry.get_sample_value(HEALTHY) == 0.0
    # WHEN another worker's long request makes the pod busy and this worker's first canary waits behind it
    state["busy"] = True
    backend = HeldFirstCanary(later_wait_s=10.0)

    async def run() -> tuple[float | None, int]:
        stop = asyncio.Event()
        canaries = asyncio.create_task(health.run(backend, stop))
        await asyncio.sleep(1.0)
        seen, answered = metrics.registry.get_sample_value(HEALTHY), int(health.last_success is not None)
        stop.set()
        backend.release.set()
        await canaries
        return seen, answered

    seen, answered = asyncio.run(run())
    # THEN the gauge says it serves (busy, not loading) while that canary has not come back
    assert answered == 0 and seen == 1.0, (answered, seen)


def _slowly_read_load(load: TritonLoad) -> tuple[ModelHealth, list[str | None]]:
    """An idle pod's health (stale after 0.5 s, canary timeout 0.3 s) that served just now, whose read of
    Triton's load takes 0.4 s (a loaded machine) and returns ``load``; ``/ping``'s verdict during each read."""
    settings = GatewaySettings(canary_interval_seconds=0.1, canary_timeout_seconds=0.3, stale_after_seconds=0.5)
    during_read: list[str | None] = []

    async def slow_load() -> TritonLoad:
        await asyncio.sleep(0.4)
        during_read.append(health.problem())
        return load

    health = ModelHealth(
        settings.health, GatewayMetrics(8), model_name="whisper", request_timeout_seconds=60, triton_load=slow_load
    )
    health.record_success()
    return health, during_read


def test_staleness_waits_for_the_verdict_of_a_canary_that_timed_out() -> None:
    # GIVEN an idle pod that served 0 s ago, a canary held behind another client's batch, and Triton's load
    # read slowly after the canary's timeout: the canary is 0.7 s old during the read
    # (the canary queued, a window finished just now: busy)
    health, during_read = _slowly_read_load(TritonLoad(queued=1, finished=5))
    ok = asyncio.run(health.canary(HeldFirstCanary()))
    # THEN /ping never judged it stale while the verdict was pending, and the verdict is "busy with others"
    assert not ok and during_read == [None] and health.shared.busy and health.problem() is None, during_read


def test_a_canary_that_answered_counts_before_the_load_read_after_it() -> None:
    # GIVEN an idle pod whose last success is older than stale_after_seconds, and Triton's load read slowly
    health, during_read = _slowly_read_load(TritonLoad(queued=0, finished=6))
    health.last_success = (health.last_success or 0.0) - 1.0  # a second ago
    # WHEN a canary answers THEN /ping is 200 during the read that follows it
    assert asyncio.run(health.canary(FakeBackend())) and during_read == [None], during_read


def test_repair_reloads_only_after_errors_and_backs_off() -> None:
    health, backend, clock, _ = make()
    backend.reload_heals = False
    backend.error = BackendTimeout("slow")
    for _ in range(4):
        asyncio.run(health.canary(backend))
        asyncio.run(health.repair(backend))
    assert backend.reloads == 0  # timeouts: never reload a model that may just be slow
    backend.error = BackendError("Stub process 'whisper_0_0' is not healthy.")
    reload_times = []
    for _ in range(40):  # 20 s of canaries every 0.5 s
        asyncio.run(health.canary(backend))
        before = backend.reloads
        asyncio.run(health.repair(backend))
        if backend.reloads > before:
            reload_times.append(clock.now)
        clock.now += 0.5
    gaps = [b - a for a, b in zip(reload_times, reload_times[1:], strict=False)]
    assert gaps[:4] == [1.0, 2.0, 4.0, 8.0]  # back-off, not a reload every canary
    assert len(reload_times) == 5


def test_staleness_must_cover_one_slow_canary() -> None:
    with pytest.raises(ValidationError, match=r"stale_after_seconds \(6\) must be greater than"):
        GatewaySettings(stale_after_seconds=6, canary_interval_seconds=2, canary_timeout_seconds=5)
