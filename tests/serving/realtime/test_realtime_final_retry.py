"""A turn's final decode: beside the session (the next turn is never held behind it), retried once past its deadline.

The backend answers the same words to every update (so LocalAgreement-2 confirms them) and times out or
holds the final decode as the test says; ``failed`` is left for a turn with nothing confirmed.
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
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import BackendTimeout, ServedModel

pytestmark = pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")


class WordsThenTimeouts:
    """Every update decodes to WORDS; once ``finals`` is set, the next ``timeouts`` calls miss their deadline."""

    WORDS = "the quick brown fox jumped over the lazy dog"

    def __init__(self) -> None:
        self.finals = False
        self.timeouts = 0
        self.calls = 0

    async def infer(self, windows: Any, request: Any, timeout: float) -> list[WindowResult]:
        self.calls += 1
        if self.finals and self.timeouts > 0:
            self.timeouts -= 1
            raise BackendTimeout(f"Triton did not answer within {timeout:g} s")
        return [WindowResult(self.WORDS, no_speech_prob=0.0, avg_logprob=-0.1)]

    async def served_model(self, timeout: float) -> ServedModel:
        return ServedModel("whisper", 16, multilingual=False)


@pytest.fixture(scope="module")
def pcm(tmp_path_factory) -> bytes:
    return speech_pcm24k(samples.SENTENCES[0], tmp_path_factory.mktemp("retry") / "s.wav")


def _turn(pcm: bytes, timeouts: int, from_start: bool = False) -> tuple[list[dict[str, Any]], LiveMetrics]:
    backend, events = WordsThenTimeouts(), []
    backend.finals, backend.timeouts = from_start, timeouts if from_start else 0
    metrics = LiveMetrics(CollectorRegistry())

    async def send(event: dict[str, Any]) -> None:
        events.append(event)

    async def run() -> None:
        session = TranscriptionSession(backend, send, ["whisper-1"], LiveLimits(), metrics, NullHealth())  # type: ignore[arg-type]
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        for start in range(0, len(pcm), 9600):  # 200 ms appends, sent faster than real time: updates are awaited
            await session.append(base64.b64encode(pcm[start : start + 9600]).decode())
            await asyncio.sleep(0)
        if not from_start:
            backend.finals, backend.timeouts = True, timeouts
        await session.commit()
        await session.settle()  # the turn completes beside the session

    asyncio.run(run())
    return events, metrics


def _value(metrics: LiveMetrics, counter: str) -> float:
    return float(getattr(metrics, counter)._value.get())


def test_a_final_that_times_out_once_is_retried_and_completes(pcm: bytes) -> None:
    events, metrics = _turn(pcm, timeouts=1)
    assert events[-1]["type"] == "conversation.item.input_audio_transcription.completed"
    assert _value(metrics, "final_retries") == 1 and _value(metrics, "failed") == 0


def test_a_final_that_times_out_twice_ends_the_turn_with_its_confirmed_words(pcm: bytes) -> None:
    events, metrics = _turn(pcm, timeouts=2)
    deltas = "".join(e["delta"] for e in events if e["type"].endswith("transcription.delta"))
    completed = events[-1]
    assert completed["type"] == "conversation.item.input_audio_transcription.completed"
    assert deltas.split() and completed["transcript"] == deltas.strip()  # the confirmed words, nothing retracted
    assert WordsThenTimeouts.WORDS.startswith(completed["transcript"])
    assert _value(metrics, "final_retries") == 1 and _value(metrics, "failed") == 0


def test_a_turn_with_nothing_confirmed_fails_and_is_counted(pcm: bytes) -> None:
    events, metrics = _turn(pcm, timeouts=1000, from_start=True)
    assert not [e for e in events if e["type"].endswith("transcription.delta")]
    assert events[-1]["type"] == "conversation.item.input_audio_transcription.failed"
    assert events[-1]["error"]["code"] == "timeout"
    assert _value(metrics, "final_retries") == 1 and _value(metrics, "failed") == 1


class HeldFinals(WordsThenTimeouts):
    """Every decode waits for ``release`` once ``finals`` is set (a final decode stuck in a busy model)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.held = 0

    async def infer(self, windows: Any, request: Any, timeout: float) -> list[WindowResult]:
        if self.finals and not self.release.is_set():
            self.held += 1
            await self.release.wait()
        return await super().infer(windows, request, timeout)


def test_the_next_turn_is_not_held_behind_a_final_decode_in_flight(pcm: bytes) -> None:
    silence = bytes(24000 * 2)  # 1 s: the VAD's 500 ms ends the turn
    backend, events = HeldFinals(), []

    async def send(event: dict[str, Any]) -> None:
        events.append(event)

    async def run() -> None:
        sent = [0.0]  # audio seconds sent: the clock of a client at real-time pace

        async def held_after_the_first_turn(event: dict[str, Any]) -> None:
            await send(event)
            if event["type"] == "input_audio_buffer.speech_stopped":
                backend.finals = True  # from now on every decode is held: the first turn's final never comes back

        metrics = LiveMetrics(CollectorRegistry())
        session = TranscriptionSession(backend, held_after_the_first_turn, ["whisper-1"], LiveLimits(), metrics,
                                       NullHealth(), clock=lambda: sent[0])  # type: ignore[arg-type]  # fmt: skip
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": {"type": "server_vad"}}}}))
        async with asyncio.timeout(300):  # a session held behind the final would never get here
            for audio in (pcm + silence, pcm + silence):
                for start in range(0, len(audio), 9600):
                    sent[0] += len(audio[start : start + 9600]) / 48000
                    await session.append(base64.b64encode(audio[start : start + 9600]).decode(), received_at=sent[0])
                    await asyncio.sleep(0)
        kinds = [e["type"] for e in events]
        assert kinds.count("input_audio_buffer.speech_started") == 2  # the second turn was heard meanwhile
        assert kinds.count("input_audio_buffer.committed") == 2
        assert "conversation.item.input_audio_transcription.completed" not in kinds and backend.held >= 1
        backend.release.set()
        await session.settle()

    asyncio.run(run())
    completed = [e for e in events if e["type"].endswith("transcription.completed")]
    committed = [e["item_id"] for e in events if e["type"] == "input_audio_buffer.committed"]
    assert [e["item_id"] for e in completed] == committed  # turns complete in order
