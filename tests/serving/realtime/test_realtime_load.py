"""A live session under a slow model: updates decode once (no temperature fallback), finals fall back;
the update cadence stretches to the model's pace; a client that leaves cancels every model call it caused.

The backends are fakes that record each call's options and hold or time calls as the test says; the
session runs on its own clock, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
import speech_samples as samples
from live_fakes import NullHealth, speech_pcm24k
from prometheus_client import CollectorRegistry

from whisper_build.serving.realtime.events import SessionConfig, merge
from whisper_build.serving.realtime.ports import LiveMetrics
from whisper_build.serving.realtime.session import LiveLimits, TranscriptionSession
from whisper_build.serving.realtime.timeline import seconds_to_samples
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import ServedModel

pytestmark = pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")

APPEND_BYTES = 9600
"""200 ms of 24 kHz PCM16."""


class SlowModel:
    """Answers WORDS after ``seconds`` of the session's clock; ``hold`` keeps every call waiting until cancelled."""

    WORDS = "the quick brown fox jumped over the lazy dog"

    def __init__(self, clock: list[float], seconds: float = 0.0, hold: bool = False) -> None:
        self.clock, self.seconds, self.hold = clock, seconds, hold
        self.fallback: list[bool] = []
        self.cancelled = 0

    async def infer(self, windows: Any, request: Any, timeout: float) -> list[WindowResult]:
        self.fallback.append(request.options.fallback)
        try:
            if self.hold:
                await asyncio.Event().wait()
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.clock[0] += self.seconds
        return [WindowResult(self.WORDS, no_speech_prob=0.0, avg_logprob=-0.1)]

    async def served_model(self, timeout: float) -> ServedModel:
        return ServedModel("whisper", 16, multilingual=False)


@pytest.fixture(scope="module")
def pcm(tmp_path_factory) -> bytes:
    return speech_pcm24k(samples.SENTENCES[0], tmp_path_factory.mktemp("load") / "s.wav")


def _session(model: SlowModel, clock: list[float], events: list[dict[str, Any]]) -> TranscriptionSession:
    async def send(event: dict[str, Any]) -> None:
        events.append(event)

    metrics = LiveMetrics(CollectorRegistry())
    session = TranscriptionSession(
        model,  # type: ignore[arg-type]
        send,
        ["whisper-1"],
        LiveLimits(),
        metrics,
        NullHealth(),
        clock=lambda: clock[0],
    )
    session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
    return session


async def _stream(session: TranscriptionSession, pcm: bytes, clock: list[float], real_time: bool) -> None:
    """``pcm`` in 200 ms appends; at real time each arrives 200 ms of clock after the one before."""
    for start in range(0, len(pcm), APPEND_BYTES):
        if real_time:
            clock[0] += 0.2
        await session.append(base64.b64encode(pcm[start : start + APPEND_BYTES]).decode(), received_at=clock[0])
        await asyncio.sleep(0)


def test_updates_decode_without_the_fallback_and_the_final_decode_with_it(pcm: bytes) -> None:
    clock, events = [0.0], []
    model = SlowModel(clock)

    async def run() -> None:
        session = _session(model, clock, events)
        await _stream(session, pcm, clock, real_time=False)  # ahead of real time: every update is awaited
        await session.commit()
        await session.settle()

    asyncio.run(run())
    assert len(model.fallback) >= 3, model.fallback
    assert model.fallback[:-1] == [False] * (len(model.fallback) - 1) and model.fallback[-1] is True
    assert len([e for e in events if e["type"].endswith(".completed")]) == 1


def test_at_live_pace_a_slow_final_decode_stretches_the_update_cadence_to_its_wall_time(pcm: bytes) -> None:
    clock, events = [0.0], []
    model = SlowModel(clock, seconds=6.0)

    async def run() -> TranscriptionSession:
        session = _session(model, clock, events)
        await _stream(session, pcm, clock, real_time=True)
        await session.commit()
        await session.settle()
        return session

    session = asyncio.run(run())
    assert not session.pace.ahead
    assert session.update_interval == seconds_to_samples(6.0), "updates are due no faster than the model answers"
    assert seconds_to_samples(LiveLimits().update_seconds) < session.update_interval


def test_a_client_that_leaves_cancels_its_update_and_every_ended_turns_final_decode(pcm: bytes) -> None:
    clock, events = [0.0], []
    model = SlowModel(clock, hold=True)
    turns = 3

    async def run() -> None:
        session = _session(model, clock, events)
        for _ in range(turns):  # each final waits at the model; the next turn goes on beside it
            await _stream(session, pcm, clock, real_time=True)
            await session.commit()
        for _ in range(5):
            await asyncio.sleep(0)
        calls = len(model.fallback)
        session.close()
        for _ in range(5):
            await asyncio.sleep(0)
        assert model.cancelled == calls, (model.cancelled, calls)  # every call that reached the model

    asyncio.run(run())
    committed = [e for e in events if e["type"] == "input_audio_buffer.committed"]
    assert len(committed) == turns
    assert not [e for e in events if e["type"].endswith((".completed", ".failed"))]
