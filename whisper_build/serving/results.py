"""The transcript's typed result schema, on both sides of the gRPC hop (docs/contracts.md §5 ``RESULT``).

Dependency-free (standard library only). The Triton model's decoding layer builds one
:class:`WindowResult` per window and serializes it once (:meth:`WindowResult.to_json`, the
``RESULT`` element); the gateway parses it once (:meth:`WindowResult.from_json`), and the window
pipeline (:mod:`whisper_build.serving.transcription.windows`) turns it into file-relative
:class:`Segment` s and :class:`Word` s, which the HTTP formats render and a bulk worker can keep.

Times in :class:`WindowResult` are seconds from the window's start; in :class:`Segment` and
:class:`Word`, seconds from the file's start.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ResultError", "Segment", "SegmentResult", "WindowResult", "Word", "WordResult"]


class ResultError(ValueError):
    """A ``RESULT`` element is not the JSON object :meth:`WindowResult.to_json` writes."""


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(float(x), digits)


def _float_or_none(x: Any) -> float | None:
    return None if x is None else float(x)


@dataclass(frozen=True)
class WordResult:
    """One word of a window; times in seconds from the window's start.

    Attributes: ``word`` with its leading space, ``start``/``end``, ``probability`` the mean
    probability of its tokens (``None`` when unknown).
    """

    word: str
    start: float
    end: float
    probability: float | None = None


@dataclass(frozen=True)
class SegmentResult:
    """One segment of a window; times in seconds from the window's start.

    Attributes:
        start: start time.
        end: end time (``>= start``).
        text: the segment's text, stripped, never empty.
        tokens: its text token ids.
        words: word timings inside ``[start, end]`` when asked, else empty.
    """

    start: float
    end: float
    text: str
    tokens: list[int]
    words: list[WordResult] = field(default_factory=list)


@dataclass(frozen=True)
class WindowResult:
    """What one window decodes to (the Triton ``RESULT`` output).

    Attributes:
        text: the window's text, stripped (``""`` for silence).
        segments: its segments (none for silence).
        avg_logprob: average log-prob of the kept decode (``None`` when not decoded).
        compression_ratio: zlib compression ratio of ``text`` (``None`` when not decoded).
        no_speech_prob: ``<|nospeech|>`` probability (``None`` when unknown or not decoded).
        temperature: temperature of the kept decode.
        temperatures: every temperature this window was decoded at, in order (for metrics).
        language: language of the decode (multilingual models).
    """

    text: str
    segments: list[SegmentResult] = field(default_factory=list)
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None
    temperature: float = 0.0
    temperatures: list[float] = field(default_factory=list)
    language: str | None = None

    def to_json(self) -> str:
        """The ``RESULT`` element: one JSON object, times rounded to 1 ms, signals to 4 digits."""

        def segment(s: SegmentResult) -> dict[str, object]:
            out: dict[str, object] = {
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text,
                "tokens": s.tokens,
            }
            if s.words:
                out["words"] = [
                    {
                        "word": w.word,
                        "start": round(w.start, 3),
                        "end": round(w.end, 3),
                        "probability": _round(w.probability, 4),
                    }
                    for w in s.words
                ]
            return out

        return json.dumps(
            {
                "text": self.text,
                "segments": [segment(s) for s in self.segments],
                "avg_logprob": _round(self.avg_logprob, 4),
                "compression_ratio": _round(self.compression_ratio, 4),
                "no_speech_prob": _round(self.no_speech_prob, 4),
                "temperature": self.temperature,
                "temperatures": self.temperatures,
                "language": self.language,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, raw: str | bytes) -> WindowResult:
        """Parse one ``RESULT`` element.

        Raises:
            ResultError: not the JSON object :meth:`to_json` writes (names what is wrong).
        """
        try:
            data = json.loads(raw)
            return cls(
                text=str(data["text"]),
                segments=[
                    SegmentResult(
                        float(s["start"]),
                        float(s["end"]),
                        str(s.get("text", "")),
                        [int(t) for t in s.get("tokens") or []],
                        [
                            WordResult(
                                str(w["word"]), float(w["start"]), float(w["end"]), _float_or_none(w.get("probability"))
                            )
                            for w in s.get("words") or []
                        ],
                    )
                    for s in data.get("segments") or []
                ],
                avg_logprob=_float_or_none(data.get("avg_logprob")),
                compression_ratio=_float_or_none(data.get("compression_ratio")),
                no_speech_prob=_float_or_none(data.get("no_speech_prob")),
                temperature=float(data.get("temperature") or 0.0),
                temperatures=[float(t) for t in data.get("temperatures") or []],
                language=data.get("language"),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ResultError(str(exc)) from exc


@dataclass(frozen=True)
class Word:
    """One word: ``word`` text (leading space kept), ``start``/``end`` in seconds of the file."""

    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Segment:
    """Transcribed span: ``start``/``end`` in seconds of the file, ``text`` stripped.

    The quality fields are the window's decode (openai/whisper reports them per decode window
    too); ``None`` when the model did not decode (silence) or cannot report them.
    """

    start: float
    end: float
    text: str
    seek: int = 0
    tokens: list[int] = field(default_factory=list)
    temperature: float | None = None
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None
    words: list[Word] = field(default_factory=list)
