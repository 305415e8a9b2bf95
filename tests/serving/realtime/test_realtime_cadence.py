"""Live sessions under load: a slow model at live pace drops stale updates and stretches the cadence;
a client ahead of real time gets every update awaited (docs/gateway.md, "Live transcription")."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Sequence

import numpy as np
from live_fakes import NullHealth
from prometheus_client import CollectorRegistry

from whisper_build.serving.realtime.events import SessionConfig, merge
from whisper_build.serving.realtime.ports import LiveMetrics
from whisper_build.serving.realtime.session import RATE, LiveLimits, TranscriptionSession
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.request import WindowRequest

SECONDS = 6
APPEND = base64.b64encode(bytes(9600)).decode()  # 200 ms of 24 kHz PCM16 (silence; speech is forced below)


class TimedBackend:
    """Answers two words per second of audio after ``decode_seconds``; records in-flight calls and windows."""

    def __init__(self, decode_seconds: float) -> None:
        self.decode_seconds = decode_seconds
        self.windows: list[int] = []
        self.in_flight = self.max_in_flight = 0

    async def infer(self, windows: Sequence[np.ndarray], request: WindowRequest, timeout: float) -> list[WindowResult]:
        self.windows.append(len(windows[0]))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.decode_seconds)
        finally:
            self.in_flight -= 1
        return [WindowResult(" ".join(f"word{i}" for i in range(int(len(windows[0]) / RATE * 2))))]


def run_turn(backend: TimedBackend, speedup: float) -> tuple[list[dict], TranscriptionSession, float]:
    """One manual turn of ``SECONDS`` s in 200 ms appends sent at ``speedup`` × real time (arrival stamps
    as the endpoint takes them); the events, the session and the wall time from commit to ``completed``."""
    events: list[dict] = []
    metrics = LiveMetrics(CollectorRegistry())

    async def send(event: dict) -> None:
        events.append(event)

    async def run() -> tuple[TranscriptionSession, float]:
        session = TranscriptionSession(backend, send, ["whisper-1"], LiveLimits(), metrics, NullHealth())
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        session.detector.speech_chunks = 10  # silence stands in for speech: the fake model answers any audio
        start = time.monotonic()
        for k in range(SECONDS * 5):
            arrival = start + (k + 1) * 0.2 / speedup
            await asyncio.sleep(max(0.0, arrival - time.monotonic()))  # a client ahead is not held back by us
            await session.append(APPEND, arrival)
        committed = time.monotonic()
        await session.commit()
        await session.settle()  # the turn completes beside the session
        return session, time.monotonic() - committed

    session, final_latency = asyncio.run(run())
    session.dropped = metrics.dropped._value.get()  # type: ignore[attr-defined]
    return events, session, final_latency


def deltas(events: list[dict]) -> list[str]:
    return [e["delta"] for e in events if e["type"].endswith(".delta")]


def test_a_slow_model_at_live_pace_drops_stale_updates_and_stretches_the_cadence() -> None:
    backend = TimedBackend(decode_seconds=1.5)  # slower than the 1 s cadence
    events, session, final_latency = run_turn(backend, speedup=1.0)
    updates = [n / RATE for n in backend.windows[:-1]]  # the last window is the final decode
    assert session.dropped >= 1  # type: ignore[attr-defined]
    assert backend.max_in_flight == 1
    assert len(updates) < SECONDS  # fewer than one update per second of audio
    assert all(b - a >= 1.4 for a, b in zip(updates[1:], updates[2:], strict=False))  # ≥ the decode's 1.5 s
    assert session.update_interval >= 1.5 * RATE
    assert final_latency < 1.5 + 1.0  # the final decode does not wait behind a stale update
    completed = events[-1]
    assert completed["type"].endswith(".completed")
    assert completed["transcript"] == "".join(deltas(events))  # never a retraction
    assert completed["transcript"].split()[-1] == f"word{SECONDS * 2 - 1}"


def test_a_client_ahead_of_real_time_gets_every_update_as_a_fast_model_gives_it() -> None:
    slow_events, slow, _ = run_turn(TimedBackend(decode_seconds=1.5), speedup=10.0)
    fast_backend = TimedBackend(decode_seconds=0.0)
    fast_events, _, _ = run_turn(fast_backend, speedup=10.0)
    assert slow.dropped == 0  # type: ignore[attr-defined]
    assert slow.update_interval == RATE  # the cadence stays on audio time
    assert deltas(slow_events) == deltas(fast_events) and len(deltas(fast_events)) >= 3
    assert slow_events[-1]["transcript"] == fast_events[-1]["transcript"] == "".join(deltas(fast_events))
