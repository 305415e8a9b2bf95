"""Speakers by word wherever the served engine has word timings, by segment where it has none.

A ``diarized_json`` request through the gateway (fake model backend that records what each window
batch asked for, and answers speaker turns): on ``torch`` and ``ctranslate2`` the windows are asked
for words, so the speakers follow the words; on ``tensorrt_llm`` (no word timings) they are asked for
segment timestamps only, instead of a words request the model would refuse with a 400. A bulk job
asks the same (``decode_options``).
"""

from __future__ import annotations

import numpy as np
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.bulk.job import decode_options
from whisper_build.bulk.messages import JobOptions
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.backend import ServedModel

AUDIO = samples.encode(samples.tone(8.0, 16000), 16000, "flac")


class SpeakingBackend(FakeBackend):
    """The fake backend with speaker turns: A for the first 4 s, B after."""

    async def diarize(self, audio: np.ndarray, options: SpeakerOptions, timeout: float) -> list[Turn]:
        return [Turn(0.0, 4.0, "A"), Turn(4.0, 8.0, "B")]


@pytest.mark.parametrize(("engine", "words"), [("torch", True), ("ctranslate2", True), ("tensorrt_llm", False)])
def test_diarized_json_asks_for_words_only_from_an_engine_that_has_them(engine: str, words: bool) -> None:
    backend = SpeakingBackend()
    backend.served = ServedModel("whisper", 16, multilingual=False, engine=engine)
    settings = GatewaySettings(max_body_bytes=1_000_000, max_audio_seconds=120)
    with TestClient(create_app(settings, lambda _: backend)) as client:
        answer = client.post(
            "/v1/audio/transcriptions", files={"file": ("a.flac", AUDIO)}, data={"response_format": "diarized_json"}
        )
    assert answer.status_code == 200, answer.text
    assert [o.word_timestamps for o in backend.options] == [words]
    assert all(o.timestamps for o in backend.options)
    assert [s["speaker"] for s in answer.json()["segments"]] == ["A"]  # the fake's one segment, mostly A's


@pytest.mark.parametrize(("engine_words", "asked"), [(True, True), (False, False)])
def test_a_bulk_job_with_speakers_asks_for_words_only_where_the_engine_has_them(
    engine_words: bool, asked: bool
) -> None:
    options = JobOptions(speakers={})  # type: ignore[arg-type]
    assert decode_options(options, engine_words).word_timestamps is asked
    assert decode_options(JobOptions(word_timestamps=True), engine_words).word_timestamps  # asked for: always
