"""One transcript per audio: every output format, route and the bulk outputs carry the same words.

The fake-backend test checks that every route asks the model for the same decoding options; the
integration test (real tritonserver, tiny.en on the CPU) requests every format of one espeak-ng
recording and compares the words. The bulk outputs are made by the code a bulk worker runs for a
job (``Transcriber.results`` with ``job.decode_options``, then ``outputs.render_outputs``), in process
against the same Triton, not by a full bulk run (no S3/SQS emulator, no worker process).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from contextlib import aclosing
from pathlib import Path

import httpx
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient
from gateway_server import running_gateway

from whisper_build.bulk.job import decode_options
from whisper_build.bulk.messages import JobOptions
from whisper_build.bulk.outputs import render_outputs
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.bulk.worker import window_plan
from whisper_build.serving.audio import open_audio_file
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.serving.transcription.windows import Transcriber, WindowRequest

TRANSCRIPTIONS = "/v1/audio/transcriptions"
FORMATS = ("json", "text", "srt", "vtt", "verbose_json")
SENTENCES = samples.SENTENCES[:8]
"""About 35 s said with pauses: two windows, so the groups of the routes differ (stream: one window each)."""


def _requests(client: TestClient | httpx.Client, audio: bytes) -> dict[str, httpx.Response]:
    """Every route and format of one audio, by name."""
    file = {"file": ("a.wav", audio, "audio/wav")}
    answers = {fmt: client.post(TRANSCRIPTIONS, files=file, data={"response_format": fmt}) for fmt in FORMATS}
    answers["stream"] = client.post(TRANSCRIPTIONS, files=file, data={"stream": "true"})
    body = {"audio_data": base64.b64encode(audio).decode()}
    answers["invocations"] = client.post("/invocations", json=body)
    answers["invocations_timestamps"] = client.post("/invocations", json={**body, "timestamps": True})
    for name, answer in answers.items():
        assert answer.status_code == 200, (name, answer.text)
    return answers


def test_every_route_and_format_asks_the_model_for_the_same_decode():
    backend = FakeBackend()
    audio = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")
    with TestClient(create_app(GatewaySettings(), lambda _: backend)) as client:
        _requests(client, audio)
    expected = DecodeOptions.transcript()
    assert expected.timestamps  # the measured choice: docs/serving.md "One transcript per audio"
    assert len(backend.options) == len(FORMATS) + 3 and set(backend.options) == {expected}
    assert decode_options(JobOptions()) == expected  # and what a bulk job asks for


def _words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def _cue_text(subtitles: str) -> str:
    """The text lines of SRT or WebVTT cues (numbers, times and the header left out)."""
    lines = [line.strip() for line in subtitles.splitlines()]
    return " ".join(line for line in lines if line and "-->" not in line and not line.isdigit() and line != "WEBVTT")


def _stream_text(body: str) -> tuple[str, str]:
    """(the deltas joined, the ``transcript.text.done`` text) of a transcript event stream."""
    events = [json.loads(line[len("data:") :]) for line in body.splitlines() if line.startswith("data:")]
    deltas = "".join(e["delta"] for e in events if e["type"] == "transcript.text.delta")
    [done] = [e["text"] for e in events if e["type"] == "transcript.text.done"]
    return deltas, done


async def _bulk_outputs(triton_grpc_url: str, audio: Path) -> dict[str, str]:
    """A bulk job's four outputs for ``audio``, by the worker's own code (module docstring)."""
    settings = WorkerSettings(queue_url="unused", bucket="unused", triton_url=triton_grpc_url)
    backend = TritonBackend(triton_grpc_url, settings.triton_model)
    transcriber = Transcriber(backend, window_plan(settings))
    options = JobOptions()
    request = WindowRequest(DecodePrompt(options.prompt, options.language, options.task), 1.0, decode_options(options))
    segments: list[Segment] = []
    stream = await asyncio.to_thread(open_audio_file, audio)  # as JobRunner opens a downloaded input
    try:
        async with aclosing(transcriber.results(stream, request)) as results:
            async for group in results:
                segments += group.segments
    finally:
        stream.close()
        await backend.close()
    outputs = render_outputs(segments, stream.seconds, "en", options)
    return {name: body.decode() for name, (body, _) in outputs.items()}


@pytest.mark.integration
@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
def test_every_format_route_and_bulk_output_has_the_same_words(triton_server, tmp_path):
    parts = [samples.speak(s, tmp_path / f"s{i}.wav") for i, s in enumerate(SENTENCES)]
    path = samples.concatenate_with_pauses(parts, tmp_path / "meeting.wav", pause_seconds=1.2)
    audio = path.read_bytes()
    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url, request_timeout_seconds=300)
    with running_gateway(settings) as url, httpx.Client(base_url=url, timeout=300) as client:
        answers = _requests(client, audio)
    verbose = answers["verbose_json"].json()
    deltas, done = _stream_text(answers["stream"].text)
    texts = {
        "json": answers["json"].json()["text"],
        "text": answers["text"].text,
        "srt": _cue_text(answers["srt"].text),
        "vtt": _cue_text(answers["vtt"].text),
        "verbose_json": verbose["text"],
        "verbose_json segments": " ".join(s["text"] for s in verbose["segments"]),
        "stream deltas": deltas,
        "stream done": done,
        "invocations": answers["invocations"].json()["transcribe_text"],
        "invocations segments": " ".join(s["text"] for s in answers["invocations_timestamps"].json()["segments"]),
    }
    bulk = asyncio.run(_bulk_outputs(triton_server.settings.grpc_url, path))
    texts |= {
        "bulk txt": bulk["txt"],
        "bulk srt": _cue_text(bulk["srt"]),
        "bulk vtt": _cue_text(bulk["vtt"]),
        "bulk verbose_json": json.loads(bulk["verbose_json"])["text"],
    }
    reference = _words(texts["json"])
    assert samples.wer(" ".join(SENTENCES), texts["json"]) <= 0.25, texts["json"]
    differing = {name: text for name, text in texts.items() if _words(text) != reference}
    assert not differing, (texts["json"], differing)
    # the plain-text bodies are the same string, not only the same words
    assert texts["text"].strip() == texts["json"] == texts["verbose_json"] == done == deltas
    assert texts["invocations"] == texts["json"] == bulk["txt"].strip()
