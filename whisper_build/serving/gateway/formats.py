"""OpenAI ``/v1/audio/transcriptions`` and ``/translations`` response formats.

Formats follow the OpenAI API reference (``response_format``: json, text, srt, verbose_json,
vtt). Every format renders the same decode (timestamp tokens on, docs/serving.md "One transcript per
audio"): segments come from Whisper's timestamp tokens (decoded in the Triton model, offset by each
window's true start), and ``text`` is their text joined.
"""

from __future__ import annotations

import math
import textwrap
from typing import Literal

from fastapi.responses import JSONResponse, PlainTextResponse, Response

from whisper_build.serving.prompt import LANGUAGE_NAMES
from whisper_build.serving.results import Segment

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
RESPONSE_FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt")


def _timestamp(seconds: float, separator: str) -> str:
    """``HH:MM:SS<sep>mmm`` (SRT uses ``,``, WebVTT ``.``)."""
    millis = max(0, round(seconds * 1000))
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"


def _cue_text(text: str, line_chars: int) -> str:
    """Cue text stripped, wrapped at ``line_chars`` characters per line (0 = one line)."""
    text = " ".join(text.split())
    return "\n".join(textwrap.wrap(text, line_chars)) if line_chars > 0 else text


def to_srt(segments: list[Segment], line_chars: int = 0) -> str:
    """SubRip text: cues numbered from 1, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, no empty cues."""
    cues = [
        f"{i}\n{_timestamp(s.start, ',')} --> {_timestamp(s.end, ',')}\n{_cue_text(s.text, line_chars)}\n"
        for i, s in enumerate((s for s in segments if s.text.strip()), start=1)
    ]
    return "\n".join(cues)


def to_vtt(segments: list[Segment], line_chars: int = 0) -> str:
    """WebVTT text: ``WEBVTT`` header then ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues, no empty cues."""
    cues = [
        f"{_timestamp(s.start, '.')} --> {_timestamp(s.end, '.')}\n{_cue_text(s.text, line_chars)}\n"
        for s in segments
        if s.text.strip()
    ]
    return "WEBVTT\n\n" + "\n".join(cues)


def language_name(code: str | None) -> str | None:
    """OpenAI's ``language`` value: the lowercase English name (``en`` → ``english``)."""
    return None if code is None else LANGUAGE_NAMES.get(code, code)


def usage(duration: float) -> dict[str, object]:
    """OpenAI's ``usage`` for audio billed by duration: whole seconds, rounded up."""
    return {"type": "duration", "seconds": math.ceil(duration)}


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def render(
    response_format: str,
    text: str,
    segments: list[Segment],
    duration: float,
    language: str | None,
    *,
    task: str = "transcribe",
    words: bool = False,
    line_chars: int = 0,
) -> Response:
    """Build the HTTP response for ``response_format``.

    Args:
        response_format: one of :data:`RESPONSE_FORMATS`.
        text: the whole transcript.
        segments: file-relative segments.
        duration: audio seconds.
        language: language code (reported as its English name).
        task: ``transcribe`` or ``translate``.
        words: add the top-level ``words`` list to ``verbose_json``.
        line_chars: SRT/VTT cue line wrap (0 = none).

    Raises: ValueError for a format not in :data:`RESPONSE_FORMATS`.
    """
    if response_format == "json":
        return JSONResponse({"text": text, "usage": usage(duration)})
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "srt":
        return PlainTextResponse(to_srt(segments, line_chars), media_type="application/x-subrip")
    if response_format == "vtt":
        return PlainTextResponse(to_vtt(segments, line_chars), media_type="text/vtt")
    if response_format == "verbose_json":
        body: dict[str, object] = {
            "task": task,
            "language": language_name(language),
            "duration": round(duration, 3),
            "text": text,
            "segments": [
                {
                    "id": i,
                    "seek": s.seek,
                    "start": round(s.start, 3),
                    "end": round(s.end, 3),
                    "text": s.text,
                    "tokens": s.tokens,
                    "temperature": s.temperature,
                    "avg_logprob": _r(s.avg_logprob),
                    "compression_ratio": _r(s.compression_ratio),
                    "no_speech_prob": _r(s.no_speech_prob),
                }
                for i, s in enumerate(segments)
            ],
            "usage": usage(duration),
        }
        if words:
            body["words"] = [
                {"word": w.word.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
                for s in segments
                for w in s.words
            ]
        return JSONResponse(body)
    raise ValueError(f"unknown response_format {response_format!r}: use one of {', '.join(RESPONSE_FORMATS)}")
