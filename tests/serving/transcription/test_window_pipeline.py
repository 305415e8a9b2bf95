"""The window pipeline (``Transcriber.results``) on a fake backend: groups in audio order, the
joined transcript, cancellation of the model call in flight, stopping early, resuming at a
sample offset, and no web framework in its imports (a bulk worker runs it without the app)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from contextlib import aclosing

import numpy as np
import speech_samples as samples
from fake_backend import FakeBackend

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.windows import GroupResult, Transcriber, WindowRequest

RATE = 16000


def _four_voiced_windows() -> bytes:
    """143 s: four voiced windows of ~26 s, and 40 s of silence in the middle (dropped)."""
    speech, pause = samples.tone(25.0, RATE), np.zeros(RATE, np.float32)
    silence = np.zeros(40 * RATE, np.float32)
    return samples.encode(np.concatenate([speech, pause, speech, pause, silence, speech, pause, speech]), RATE, "flac")


def _transcriber(backend: FakeBackend, group_size: int = 2) -> Transcriber:
    return Transcriber(backend, GatewaySettings(window_group_size=group_size).requests.window_plan())


async def _collect(transcriber: Transcriber, audio: bytes, start_sample: int = 0) -> list[GroupResult]:
    with transcriber.open(audio) as stream:
        async with aclosing(transcriber.results(stream, WindowRequest(), start_sample)) as results:
            return [result async for result in results]


def test_groups_come_in_audio_order_and_join_to_the_transcription() -> None:
    backend = FakeBackend()
    transcriber = _transcriber(backend, group_size=2)
    audio = _four_voiced_windows()
    groups = asyncio.run(_collect(transcriber, audio))
    assert [g.index for g in groups] == [0, 1]
    assert [len(g.windows) for g in groups] == [2, 2]
    assert groups[0].end_sample <= groups[1].start_sample  # the silent stretch lies between them
    assert groups[1].start_sample > 60 * RATE
    starts = [s.start for g in groups for s in g.segments]
    assert starts == sorted(starts)

    async def whole() -> tuple[str, float]:
        with transcriber.open(audio) as stream:
            result = await transcriber.transcribe(stream, WindowRequest(options=DecodeOptions(timestamps=True)))
        return result.text, result.duration

    text, duration = asyncio.run(whole())
    assert text == " ".join(s.text for g in groups for s in g.segments)
    assert duration == 143.0
    assert backend.options[-1] == DecodeOptions(timestamps=True)


class HangingBackend(FakeBackend):
    """A backend whose call never returns; records whether the awaiting call was cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = 0
        self.started = asyncio.Event()

    async def infer(self, windows, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        self.calls.append((len(windows), [], "", 1.0))
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


def test_a_cancelled_consumer_cancels_the_model_call_in_flight() -> None:
    backend = HangingBackend()
    transcriber = _transcriber(backend)

    async def scenario() -> None:
        with transcriber.open(_four_voiced_windows()) as stream:
            consumer = asyncio.create_task(transcriber.transcribe(stream, WindowRequest()))
            await asyncio.wait_for(backend.started.wait(), 30)
            consumer.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

    asyncio.run(scenario())
    assert backend.cancelled == 1 and len(backend.calls) == 1


def test_a_consumer_that_stops_early_sends_no_further_group() -> None:
    backend = FakeBackend()
    transcriber = _transcriber(backend, group_size=1)

    async def first() -> GroupResult:
        with transcriber.open(_four_voiced_windows()) as stream:
            async with aclosing(transcriber.results(stream, WindowRequest())) as results:
                async for result in results:
                    return result
        raise AssertionError("no group")

    assert asyncio.run(first()).index == 0
    assert len(backend.calls) == 1


def test_resuming_at_a_group_end_gives_the_rest_of_an_uninterrupted_run() -> None:
    audio = _four_voiced_windows()
    whole = asyncio.run(_collect(_transcriber(FakeBackend(), group_size=1), audio))
    resumed = asyncio.run(_collect(_transcriber(FakeBackend(), group_size=1), audio, whole[1].end_sample))
    assert [g.windows for g in resumed] == [g.windows for g in whole[2:]]
    assert [g.segments for g in resumed] == [g.segments for g in whole[2:]]


def test_the_pipeline_imports_no_web_framework() -> None:
    code = (
        "import json, sys; import whisper_build.serving.transcription.windows, whisper_build.serving.transcription.backend;"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('fastapi', 'starlette', 'uvicorn'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_the_first_groups_language_is_sent_with_every_later_group() -> None:
    backend = FakeBackend()
    backend.language = "es"  # what the model detected on the first group
    groups = asyncio.run(_collect(_transcriber(backend, group_size=1), _four_voiced_windows()))
    assert [g.language for g in groups] == ["es"] * 4
    prefixes = [call[2] for call in backend.calls]
    assert "<|es|>" not in prefixes[0]  # the first group lets the model detect
    assert prefixes[1:] == ["<|startoftranscript|><|es|><|transcribe|><|notimestamps|>"] * 3
