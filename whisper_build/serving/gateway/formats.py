"""OpenAI ``/v1/audio/transcriptions`` response formats built from window segments.

Formats follow the OpenAI API reference (``response_format``: json, text, srt, verbose_json,
vtt). Segments are the gateway's audio windows: one per ≤ 30 s window, with its start/end
time, since the model decodes without timestamps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastapi.responses import JSONResponse, PlainTextResponse, Response

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
RESPONSE_FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt")


@dataclass(frozen=True)
class Segment:
    """Transcribed span: ``start``/``end`` in seconds, ``text`` stripped."""

    start: float
    end: float
    text: str


def _timestamp(seconds: float, separator: str) -> str:
    """``HH:MM:SS<sep>mmm`` (SRT uses ``,``, WebVTT ``.``)."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def to_srt(segments: list[Segment]) -> str:
    """SubRip text: numbered cues ``start --> end`` then the text, blank-line separated."""
    cues = [
        f"{i}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{s.text}\n"
        for i, s in enumerate((s for s in segments if s.text), start=1)
    ]
    return "\n".join(cues)


def to_vtt(segments: list[Segment]) -> str:
    """WebVTT text: ``WEBVTT`` header then ``start --> end`` cues."""
    cues = [f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{s.text}\n" for s in segments if s.text]
    return "WEBVTT\n\n" + "\n".join(cues)


def render(response_format: str, text: str, segments: list[Segment], duration: float, language: str | None) -> Response:
    """Build the HTTP response for ``response_format``.

    Raises: ValueError for a format not in :data:`RESPONSE_FORMATS`.
    """
    if response_format == "json":
        return JSONResponse({"text": text})
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "srt":
        return PlainTextResponse(to_srt(segments), media_type="application/x-subrip")
    if response_format == "vtt":
        return PlainTextResponse(to_vtt(segments), media_type="text/vtt")
    if response_format == "verbose_json":
        return JSONResponse(
            {
                "task": "transcribe",
                "language": language,
                "duration": round(duration, 3),
                "text": text,
                "segments": [
                    {"id": i, "start": round(s.start, 3), "end": round(s.end, 3), "text": s.text}
                    for i, s in enumerate(segments)
                ],
            }
        )
    raise ValueError(f"unknown response_format {response_format!r}: use one of {', '.join(RESPONSE_FORMATS)}")
