"""The transcript's typed result schema: file-relative segments and words with their quality signals.

Dependency-free (standard library only): the window pipeline
(:mod:`whisper_build.serving.gateway.transcriber`) builds these, the HTTP formats
(:mod:`whisper_build.serving.gateway.formats`) render them, and a bulk worker can keep them
without importing the web framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Segment", "Word"]


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
