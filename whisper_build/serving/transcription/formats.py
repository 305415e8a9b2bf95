"""The response formats: one table entry per format, every front end reads it (HTTP, stream, bulk files).

Formats follow the OpenAI API reference (``response_format``: json, text, srt, verbose_json, vtt,
diarized_json); ``rttm`` (NIST speaker turns) is ours.
Every format renders the same decode (timestamp tokens on, docs/serving.md "One transcript per
audio"). An entry of :data:`FORMATS` says how to render a :class:`Transcript`, its media type,
whether it needs timestamps or carries words, whether ``stream=true`` may ask for it, and the file
a bulk job writes for it. A new format is one entry, its renderer and its test (docs/gateway.md,
"OpenAI audio API").
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from whisper_build.serving.diarization.assign import Speakers
from whisper_build.serving.prompt import LANGUAGE_NAMES
from whisper_build.serving.results import Segment

__all__ = [
    "FORMATS",
    "BulkFile",
    "ResponseFormat",
    "Transcript",
    "bulk_files",
    "lookup",
    "names",
    "render",
    "rttm_file_id",
]


@dataclass(frozen=True)
class Transcript:
    """What a format renders: one upload's transcription and how it was asked for.

    Attributes:
        text: the whole transcript (segments joined by one space).
        segments: file-relative segments, in order.
        duration: audio seconds.
        language: language code, if known (reported as its English name).
        task: ``transcribe`` or ``translate``.
        words: the request asked for word timestamps.
        line_chars: SRT/VTT cue line wrap in characters (0 = one line per cue).
        speakers: who said what, when the request asked for speakers (else ``None``).
        file_id: the input's name in RTTM lines (:func:`rttm_file_id`).
    """

    text: str
    segments: list[Segment]
    duration: float
    language: str | None
    task: str = "transcribe"
    words: bool = False
    line_chars: int = 0
    speakers: Speakers | None = None
    file_id: str = "audio"


@dataclass(frozen=True)
class BulkFile:
    """The file a bulk job writes for a format: ``key`` in ``status.json``'s outputs, ``name`` in the job folder.

    ``trailing_newline``: the file ends with a newline (plain text), unlike the HTTP body.
    """

    key: str
    name: str
    trailing_newline: bool = False

    @property
    def suffix(self) -> str:
        """The file name's suffixes (``make fetch`` names the local copy ``<input><suffix>``): ``.diarized.json``."""
        return "".join(PurePosixPath(self.name).suffixes)


@dataclass(frozen=True)
class ResponseFormat:
    """One ``response_format``.

    Attributes:
        name: the ``response_format`` value.
        render: the body of a :class:`Transcript` in this format.
        media_type: the body's media type (HTTP ``Content-Type``, the bulk object's content type).
        needs_timestamps: the body shows segment times.
        words: the body can carry word timestamps (``timestamp_granularities[]=word``).
        streamable: ``stream=true`` may ask for it (the events carry plain text, and speaker
            segments for a format with speakers).
        bulk: the file a bulk job writes for it, or ``None``.
        speakers: the body needs speaker labels (asking for it turns diarization on).
    """

    name: str
    render: Callable[[Transcript], str | bytes] = field(repr=False)
    media_type: str
    needs_timestamps: bool = False
    words: bool = False
    streamable: bool = False
    bulk: BulkFile | None = None
    speakers: bool = False

    def body(self, transcript: Transcript) -> bytes:
        """The rendered body as UTF-8 bytes."""
        rendered = self.render(transcript)
        return rendered.encode() if isinstance(rendered, str) else rendered

    def bulk_body(self, transcript: Transcript) -> bytes:
        """The bulk file's bytes (:attr:`BulkFile.trailing_newline` applied).

        Raises: ValueError for a format bulk does not write.
        """
        if self.bulk is None:
            raise ValueError(f"bulk jobs do not write response_format {self.name!r}")
        return self.body(transcript) + (b"\n" if self.bulk.trailing_newline else b"")


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


def _cues(segments: list[Segment], speakers: Speakers | None) -> list[tuple[float, float, str, str | None]]:
    """``(start, end, text, speaker)`` per cue: the segments, or their speaker pieces when speakers are known."""
    if speakers is None:
        return [(s.start, s.end, s.text, None) for s in segments if s.text.strip()]
    return [(p.start, p.end, p.text, p.speaker) for p in speakers.pieces if p.text.strip()]


def to_srt(segments: list[Segment], line_chars: int = 0, speakers: Speakers | None = None) -> str:
    """SubRip text: cues numbered from 1, ``HH:MM:SS,mmm --> HH:MM:SS,mmm``, no empty cues.

    With ``speakers``: one cue per speaker piece, its text prefixed ``<speaker>: ``.
    """
    cues = [
        f"{i}\n{_timestamp(start, ',')} --> {_timestamp(end, ',')}\n"
        f"{_cue_text(text if who is None else f'{who}: {text}', line_chars)}\n"
        for i, (start, end, text, who) in enumerate(_cues(segments, speakers), start=1)
    ]
    return "\n".join(cues)


def to_vtt(segments: list[Segment], line_chars: int = 0, speakers: Speakers | None = None) -> str:
    """WebVTT text: ``WEBVTT`` header then ``HH:MM:SS.mmm --> HH:MM:SS.mmm`` cues, no empty cues.

    With ``speakers``: one cue per speaker piece in a WebVTT voice span ``<v A>…</v>``.
    """
    cues = []
    for start, end, text, who in _cues(segments, speakers):
        body = _cue_text(text, line_chars)
        if who is not None:
            body = f"<v {_vtt_escape(who)}>{_vtt_escape(body)}</v>"
        cues.append(f"{_timestamp(start, '.')} --> {_timestamp(end, '.')}\n{body}\n")
    return "WEBVTT\n\n" + "\n".join(cues)


def _vtt_escape(text: str) -> str:
    """WebVTT cue text escapes (``&``, ``<``, ``>``) for text inside a voice span."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def language_name(code: str | None) -> str | None:
    """OpenAI's ``language`` value: the lowercase English name (``en`` → ``english``)."""
    return None if code is None else LANGUAGE_NAMES.get(code, code)


def usage(duration: float) -> dict[str, object]:
    """OpenAI's ``usage`` for audio billed by duration: whole seconds, rounded up."""
    return {"type": "duration", "seconds": math.ceil(duration)}


def to_json_bytes(body: object) -> bytes:
    """Compact UTF-8 JSON, as Starlette's ``JSONResponse`` renders it (no NaN, no ASCII escaping)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def to_verbose_json(t: Transcript) -> bytes:
    """OpenAI's ``verbose_json``: task, language, duration, text, segments, usage (and ``words`` when asked).

    With speakers (extension): ``speaker`` on every segment (the one saying most of it) and word.
    """
    who = t.speakers
    segments: list[dict[str, object]] = [
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
            **({} if who is None else {"speaker": who.segments[i]}),
        }
        for i, s in enumerate(t.segments)
    ]
    body: dict[str, object] = {
        "task": t.task,
        "language": language_name(t.language),
        "duration": round(t.duration, 3),
        "text": t.text,
        "segments": segments,
        "usage": usage(t.duration),
    }
    if t.words:
        body["words"] = [
            {
                "word": w.word.strip(),
                "start": round(w.start, 3),
                "end": round(w.end, 3),
                **({} if who is None else {"speaker": who.words[i][j]}),
            }
            for i, s in enumerate(t.segments)
            for j, w in enumerate(s.words)
        ]
    return to_json_bytes(body)


def _speakers(t: Transcript) -> Speakers:
    if t.speakers is None:
        raise ValueError("this format needs speakers: the transcript was made without diarization")
    return t.speakers


def to_diarized_json(t: Transcript) -> bytes:
    """OpenAI's ``diarized_json`` (``TranscriptionDiarized``): task, duration, text, speaker segments, usage.

    Segments are the transcript cut at speaker changes, ids ``seg_0``, ``seg_1``, …, texts with a
    leading space as OpenAI sends them.
    """
    return to_json_bytes(
        {
            "task": "transcribe",
            "duration": round(t.duration, 3),
            "text": t.text,
            "segments": diarized_segments(_speakers(t)),
            "usage": usage(t.duration),
        }
    )


def diarized_segments(speakers: Speakers) -> list[dict[str, object]]:
    """OpenAI's ``transcript.text.segment`` objects (``diarized_json``'s segments and the stream's events)."""
    return [
        {
            "type": "transcript.text.segment",
            "id": f"seg_{i}",
            "start": round(p.start, 3),
            "end": round(p.end, 3),
            "speaker": p.speaker,
            "text": " " + p.text,
        }
        for i, p in enumerate(speakers.pieces)
    ]


def rttm_file_id(name: str | None) -> str:
    """RTTM's file id of an input named ``name`` (upload filename, object key): its stem, blanks as ``_``.

    ``talks/day 1.flac`` → ``day_1``; no name → ``audio``.
    """
    stem = PurePosixPath((name or "").replace("\\", "/")).stem if name else ""
    return "_".join(stem.split()) or "audio"


def to_rttm(t: Transcript) -> str:
    """NIST RTTM: one ``SPEAKER <file> 1 <onset> <duration> <NA> <NA> <speaker> <NA> <NA>`` line per turn."""
    return "".join(
        f"SPEAKER {t.file_id} 1 {turn.start:.3f} {turn.end - turn.start:.3f} <NA> <NA> {turn.speaker} <NA> <NA>\n"
        for turn in _speakers(t).turns
    )


FORMATS: dict[str, ResponseFormat] = {
    f.name: f
    for f in (
        ResponseFormat(
            "json", lambda t: to_json_bytes({"text": t.text, "usage": usage(t.duration)}), "application/json",
            streamable=True,
        ),
        ResponseFormat(
            "text", lambda t: t.text, "text/plain; charset=utf-8", streamable=True,
            bulk=BulkFile("txt", "transcript.txt", trailing_newline=True),
        ),
        ResponseFormat(
            "srt", lambda t: to_srt(t.segments, t.line_chars, t.speakers), "application/x-subrip",
            needs_timestamps=True,
            bulk=BulkFile("srt", "transcript.srt"),
        ),
        ResponseFormat(
            "verbose_json", to_verbose_json, "application/json", needs_timestamps=True, words=True,
            bulk=BulkFile("verbose_json", "transcript.json"),
        ),
        ResponseFormat(
            "vtt", lambda t: to_vtt(t.segments, t.line_chars, t.speakers), "text/vtt", needs_timestamps=True,
            bulk=BulkFile("vtt", "transcript.vtt"),
        ),
        ResponseFormat(
            "diarized_json", to_diarized_json, "application/json", needs_timestamps=True, speakers=True,
            streamable=True,
            bulk=BulkFile("diarized_json", "transcript.diarized.json"),
        ),
        ResponseFormat(
            "rttm", to_rttm, "text/plain; charset=utf-8", speakers=True, bulk=BulkFile("rttm", "speakers.rttm"),
        ),
    )
}  # fmt: skip
"""Every ``response_format`` by name, in the order the API lists them."""


def names(selected: Callable[[ResponseFormat], bool] = lambda _: True) -> tuple[str, ...]:
    """The names of the formats ``selected`` keeps, in table order (all by default)."""
    return tuple(name for name, f in FORMATS.items() if selected(f))


def lookup(name: str) -> ResponseFormat:
    """The format called ``name``.

    Raises: ValueError naming the formats there are, for an unknown ``name``.
    """
    try:
        return FORMATS[name]
    except KeyError:
        raise unknown_format(name) from None


def unknown_format(name: str) -> ValueError:
    """The error for a format ``name`` that is not in :data:`FORMATS`, naming the formats there are."""
    return ValueError(f"unknown response_format {name!r}: use one of {', '.join(names())}")


def render(name: str, transcript: Transcript) -> bytes:
    """``transcript`` in format ``name`` (:func:`lookup`'s ValueError for an unknown one)."""
    return lookup(name).body(transcript)


def bulk_files(speakers: bool = True) -> dict[str, ResponseFormat]:
    """The formats a bulk job writes, by :attr:`BulkFile.key` (``status.json``'s outputs), in table order.

    ``speakers=False``: without the formats that need speakers (a job that did not ask for them).
    """
    return {f.bulk.key: f for f in FORMATS.values() if f.bulk is not None and (speakers or not f.speakers)}
