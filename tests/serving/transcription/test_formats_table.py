"""The response formats table is the one place a format is declared: routes, the stream and bulk read it.

A throwaway entry added to the table is served by ``/v1/audio/transcriptions`` with its media type,
listed in the unknown-format error, accepted or refused by ``stream=true`` as its entry says, and
written by a bulk job; the entries there are keep today's formats and their properties.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.bulk.messages import JobOptions
from whisper_build.bulk.outputs import render_outputs
from whisper_build.bulk.records import OUTPUT_FILES
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription import formats
from whisper_build.serving.transcription.formats import BulkFile, ResponseFormat, Transcript

AUDIO = samples.encode(np.concatenate([samples.tone(25.0, 16000), samples.tone(10.0, 16000)]), 16000, "flac")
LINES = ResponseFormat(
    "lines",
    lambda t: "".join(f"{s.start:.1f}\t{s.text}\n" for s in t.segments),
    "text/x-lines; charset=utf-8",
    needs_timestamps=True,
    streamable=False,
    bulk=BulkFile("lines", "transcript.lines"),
)


@pytest.fixture
def with_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(formats.FORMATS, LINES.name, LINES)


def post(form: dict[str, str]) -> httpx.Response:
    settings = GatewaySettings(max_body_bytes=1_000_000, max_audio_seconds=120)
    with TestClient(create_app(settings, lambda _: FakeBackend())) as client:
        return client.post("/v1/audio/transcriptions", files={"file": ("a.flac", AUDIO)}, data=form)


def test_a_new_table_entry_is_served_with_its_media_type(with_lines: None) -> None:
    answer = post({"response_format": "lines"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "text/x-lines; charset=utf-8"
    starts = [line.split("\t")[0] for line in answer.text.splitlines()]
    assert starts[0] == "0.0" and len(starts) == 2 and answer.text.split("\t")[1].startswith("w0:")


def test_a_new_table_entry_is_listed_and_the_stream_reads_its_flag(
    with_lines: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = post({"response_format": "nope"})
    assert unknown.status_code == 400 and "lines" in unknown.json()["error"]["message"]
    refused = post({"response_format": "lines", "stream": "true"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "stream"
    monkeypatch.setitem(formats.FORMATS, "lines", ResponseFormat(**{**LINES.__dict__, "streamable": True}))
    streamed = post({"response_format": "lines", "stream": "true"})
    assert streamed.status_code == 200 and "transcript.text.done" in streamed.text
    assert (
        "json or text or diarized_json or lines"
        in post({"response_format": "srt", "stream": "true"}).json()["error"]["message"]
    )


def test_a_new_table_entry_with_a_bulk_file_is_written_by_a_job(with_lines: None) -> None:
    outputs = render_outputs([Segment(1.0, 2.0, "hello")], 2.0, "en", JobOptions())
    assert outputs["lines"] == (b"1.0\thello\n", "text/x-lines; charset=utf-8")


def test_the_table_holds_the_openai_formats_and_the_bulk_files() -> None:
    assert formats.names() == ("json", "text", "srt", "verbose_json", "vtt", "diarized_json", "rttm")
    assert formats.names(lambda f: f.speakers) == ("diarized_json", "rttm")
    suffixes = [f.bulk.suffix for f in formats.bulk_files().values() if f.bulk is not None]
    assert len(set(suffixes)) == len(suffixes) and ".diarized.json" in suffixes  # make fetch: one file each
    assert formats.names(lambda f: f.streamable) == ("json", "text", "diarized_json")
    assert formats.names(lambda f: f.words) == ("verbose_json",)
    # the stream's events carry plain text (and speaker segments): nothing else that needs times is streamable
    assert not formats.names(lambda f: f.streamable and f.needs_timestamps and not f.speakers)
    assert OUTPUT_FILES == {
        "txt": "transcript.txt",
        "srt": "transcript.srt",
        "verbose_json": "transcript.json",
        "vtt": "transcript.vtt",
        "diarized_json": "transcript.diarized.json",
        "rttm": "speakers.rttm",
    }
    transcript = Transcript("a b", [Segment(0.0, 1.0, "a b")], 1.0, "en")
    bulk = render_outputs(transcript.segments, 1.0, "en", JobOptions())
    assert bulk["txt"] == (b"a b\n", "text/plain; charset=utf-8")
    assert bulk["vtt"][1] == "text/vtt" and bulk["srt"][1] == "application/x-subrip"
    with pytest.raises(ValueError, match="use one of json, text, srt, verbose_json, vtt, diarized_json, rttm"):
        formats.lookup("docx")
