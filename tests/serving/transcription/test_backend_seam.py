"""One window batch crosses the backend seam as one WindowRequest, which every wrapper forwards unchanged.

The wrappers (recovery, bulk admission, the yield gate, the delegating base) are stacked over the shared
recording fake; the request the fake receives is the very object the caller sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest
from fake_backend import FakeBackend

from whisper_build.bulk.admission import ActiveJobs, AdmissionBackend, BulkAdmission
from whisper_build.bulk.yielding import YieldGate, YieldingBackend
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.transcription.backend import DelegatingBackend, TranscriptionBackend, WindowRequest
from whisper_build.serving.transcription.recovery import ModelRecovery, RecoveringBackend

UNREACHABLE = "http://127.0.0.1:9/metrics"  # an unreadable gauge opens the yield gate
Wrap = Callable[[TranscriptionBackend], TranscriptionBackend]
WRAPPERS: dict[str, Wrap] = {
    "delegating": DelegatingBackend,
    "recovering": lambda b: RecoveringBackend(b, ModelRecovery(b)),
    "admission": lambda b: AdmissionBackend(b, BulkAdmission(ActiveJobs(count=1), gather_seconds=0)),
    "yielding": lambda b: YieldingBackend(b, YieldGate(UNREACHABLE, poll_seconds=0.01)),
}
REQUEST = WindowRequest(DecodePrompt("earlier words", "de", "translate"), 1.3, DecodeOptions.transcript(True, 0.2))
WINDOWS = [np.full(8000, 0.1, np.float32), np.full(4000, 0.2, np.float32)]


def send(wraps: list[Wrap]) -> FakeBackend:
    fake = FakeBackend()

    async def scenario() -> None:
        backend: TranscriptionBackend = fake
        for wrap in wraps:
            backend = wrap(backend)
        results = await backend.infer(WINDOWS, REQUEST, 30.0)
        assert len(results) == len(WINDOWS)
        await backend.close()

    asyncio.run(scenario())
    return fake


@pytest.mark.parametrize("name", sorted(WRAPPERS))
def test_each_wrapper_forwards_the_request_unchanged(name: str) -> None:
    fake = send([WRAPPERS[name]])
    assert len(fake.requests) == 1 and fake.requests[0] is REQUEST
    assert fake.calls == [(2, [8000, 4000], REQUEST.text_prefix(), 1.3)]


def test_stacked_wrappers_forward_the_request_unchanged() -> None:
    fake = send(list(WRAPPERS.values()))
    assert len(fake.requests) == 1 and fake.requests[0] is REQUEST
    assert fake.options == [REQUEST.options] and fake.closed
