"""A turn's final decode that misses its deadline: retried once, then the turn ends with its confirmed words.

The backend answers the same words to every update (so LocalAgreement-2 confirms them) and times out the
final decode as many times as the test says; ``failed`` is left for a turn with nothing confirmed.
"""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
import soundfile
import speech_samples as samples
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


class _Health:
    def record_success(self) -> None: ...

    def record_failure(self, source: str, error: Exception) -> None: ...


@pytest.fixture(scope="module")
def pcm(tmp_path_factory) -> bytes:
    wav = samples.speak(samples.SENTENCES[0], tmp_path_factory.mktemp("retry") / "s.wav", rate=24000)
    return (soundfile.read(str(wav), dtype="float32")[0] * 32767).astype("<i2").tobytes()


def _turn(pcm: bytes, timeouts: int, from_start: bool = False) -> tuple[list[dict[str, Any]], LiveMetrics]:
    backend, events = WordsThenTimeouts(), []
    backend.finals, backend.timeouts = from_start, timeouts if from_start else 0
    metrics = LiveMetrics(CollectorRegistry())

    async def send(event: dict[str, Any]) -> None:
        events.append(event)

    async def run() -> None:
        session = TranscriptionSession(backend, send, ["whisper-1"], LiveLimits(), metrics, _Health())  # type: ignore[arg-type]
        session.configure(merge(SessionConfig(), {"audio": {"input": {"turn_detection": None}}}))
        for start in range(0, len(pcm), 9600):  # 200 ms appends, sent faster than real time: updates are awaited
            await session.append(base64.b64encode(pcm[start : start + 9600]).decode())
            await asyncio.sleep(0)
        if not from_start:
            backend.finals, backend.timeouts = True, timeouts
        await session.commit()

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
