"""The model checks cancellation before each engine call (whisper_build/serving/triton_model/cancellation.py)."""

from __future__ import annotations

import pytest

from whisper_build.serving.triton_model.cancellation import BatchCancelled, CancellableEngine


class _Engine:
    def __init__(self) -> None:
        self.calls = 0

    def generate(self, audio, *args, **kwargs):
        self.calls += 1
        return ["h"] * len(audio)

    def align(self, audio, *args, **kwargs):
        self.calls += 1
        return [[]] * len(audio)


class _Request:
    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled

    def is_cancelled(self) -> bool:
        return self.cancelled


def test_calls_stop_once_every_request_is_cancelled_and_windows_are_counted_as_they_start() -> None:
    requests = [_Request(False), _Request(False)]
    counted: list[int] = []
    engine = CancellableEngine(_Engine(), lambda: all(r.is_cancelled() for r in requests), counted.append)
    assert engine.generate([1, 2, 3]) == ["h"] * 3  # nobody cancelled
    requests[0].cancelled = True
    assert engine.align([1]) == [[]]  # one live request left: the batch runs on
    requests[1].cancelled = True
    with pytest.raises(BatchCancelled):
        engine.generate([1, 2, 3])  # the next fallback pass is not computed
    assert engine.stopped and counted == [3, 1] and engine._engine.calls == 2
