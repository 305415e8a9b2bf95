"""A live session's audio time: 16 kHz samples, and the milliseconds and seconds the events and limits use.

Session audio is counted in samples at :data:`RATE` from the session's first append; the protocol's
``audio_start_ms``/``audio_end_ms`` and the VAD's durations are milliseconds, the limits seconds. Every
conversion between them is one of the four functions here (milliseconds are whole: floor division).
Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

__all__ = ["RATE", "ms_to_samples", "samples_to_ms", "samples_to_seconds", "seconds_to_samples"]

RATE = 16_000
"""Samples per second of session audio (Whisper's rate)."""
_PER_MS = RATE // 1000


def ms_to_samples(ms: int) -> int:
    """Samples in ``ms`` milliseconds."""
    return ms * _PER_MS


def samples_to_ms(samples: int) -> int:
    """Whole milliseconds in ``samples`` (rounded down)."""
    return samples // _PER_MS


def seconds_to_samples(seconds: float) -> int:
    """Whole samples in ``seconds`` (rounded toward zero)."""
    return int(seconds * RATE)


def samples_to_seconds(samples: int) -> float:
    """Seconds in ``samples``."""
    return samples / RATE
