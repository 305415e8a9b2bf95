"""A window group whose model runtime died is retried once on the reloaded model (transcription/recovery.py)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import ModelRestarting
from whisper_build.serving.transcription.recovery import ModelRecovery, RecoveringBackend
from whisper_build.serving.transcription.request import WindowRequest


class _Backend:
    def __init__(self, failures: int, hang: bool = False) -> None:
        self.failures, self.hang, self.calls, self.reloads = failures, hang, 0, 0

    async def infer(self, windows, request, timeout):
        self.calls += 1
        if self.hang and self.calls == 1:
            await asyncio.sleep(3600)  # queued on a dead runtime, never answered
        if self.failures:
            self.failures -= 1
            raise ModelRestarting("Stub process 'whisper_0_0' is not healthy.")
        return [WindowResult("ok")]

    async def reload(self, timeout: float) -> None:
        await asyncio.sleep(0.05)
        self.reloads += 1


WINDOW = [np.zeros(16000, dtype=np.float32)]


def _run(backend: _Backend, requests: int = 1) -> tuple[list[object], list[str]]:
    outcomes: list[str] = []

    async def scenario() -> list[object]:
        retrying = RecoveringBackend(backend, ModelRecovery(backend), outcomes.append)
        calls = [retrying.infer(WINDOW, WindowRequest(), 30) for _ in range(requests)]
        return await asyncio.gather(*calls, return_exceptions=True)

    return asyncio.run(scenario()), outcomes


def test_requests_failing_together_share_one_reload_and_are_retried_once() -> None:
    backend = _Backend(failures=3)
    results, outcomes = _run(backend, requests=3)
    assert [r[0].text for r in results] == ["ok"] * 3  # type: ignore[index]
    assert backend.reloads == 1 and outcomes == ["ok"] * 3 and backend.calls == 6


def test_a_second_failure_reaches_the_client() -> None:
    results, outcomes = _run(_Backend(failures=2))
    assert isinstance(results[0], ModelRestarting) and outcomes == ["failed"]


def test_a_call_still_queued_when_the_reload_completes_is_sent_again() -> None:
    async def scenario() -> tuple[list[WindowResult], _Backend]:
        backend = _Backend(failures=0, hang=True)
        recovery = ModelRecovery(backend)
        retrying = RecoveringBackend(backend, recovery)
        call = asyncio.ensure_future(retrying.infer(WINDOW, WindowRequest(), 30))
        await asyncio.sleep(0.05)
        assert await recovery.recover()  # another request found the runtime dead and reloaded it
        return await asyncio.wait_for(call, 5), backend

    outputs, backend = asyncio.run(scenario())
    assert outputs[0].text == "ok" and backend.calls == 2


def test_a_reload_by_another_worker_re_sends_what_this_one_queued_and_loads_nothing() -> None:
    published: list[float] = []

    async def scenario() -> tuple[list[WindowResult], _Backend, list[bool]]:
        backend = _Backend(failures=0, hang=True)
        recovery = ModelRecovery(backend, on_reloaded=published.append)
        retrying = RecoveringBackend(backend, recovery)
        looks = [recovery.observe_pod(0.0)]  # the first look only notes the pod's time
        call = asyncio.ensure_future(retrying.infer(WINDOW, WindowRequest(), 30))
        await asyncio.sleep(0.05)
        looks.append(recovery.observe_pod(0.0))  # nothing new
        looks.append(recovery.observe_pod(1_800_000_000.0))  # another worker loaded the model again
        looks.append(recovery.observe_pod(1_800_000_000.0))  # the same reload, seen again
        return await asyncio.wait_for(call, 5), backend, looks

    outputs, backend, looks = asyncio.run(scenario())
    # THEN the queued call is sent once more on the new runtime, without a reload of this worker's own
    assert outputs[0].text == "ok" and backend.calls == 2 and backend.reloads == 0
    assert looks == [False, False, True, False] and published == []


def test_a_reload_here_is_published_and_not_taken_for_another_workers() -> None:
    published: list[float] = []

    async def scenario() -> bool:
        backend = _Backend(failures=0)
        recovery = ModelRecovery(backend, on_reloaded=published.append)
        recovery.observe_pod(0.0)
        assert await recovery.recover()
        return recovery.observe_pod(published[0])

    assert asyncio.run(scenario()) is False and len(published) == 1 and published[0] > 1.7e9


@pytest.mark.parametrize("error", [ModelRestarting("x")])
def test_model_restarting_is_a_503(error: Exception) -> None:
    from whisper_build.serving.transcription.backend import BackendUnavailable

    assert isinstance(error, BackendUnavailable)
