"""Shared pieces of the live-session unit tests: a health recorder that ignores outcomes, speech as 24 kHz PCM16."""

from __future__ import annotations

from pathlib import Path

import soundfile
import speech_samples as samples


class NullHealth:
    """The session's health recorder (``realtime.ports.HealthRecorder``), told of outcomes and keeping none."""

    def record_success(self) -> None: ...

    def record_failure(self, source: str, error: Exception) -> None: ...


def speech_pcm24k(text: str, wav: Path) -> bytes:
    """``text`` spoken by espeak-ng (written to ``wav``) as 24 kHz mono PCM16 bytes, the Realtime API's ``audio/pcm``."""
    samples.speak(text, wav, rate=24000)
    return (soundfile.read(str(wav), dtype="float32")[0] * 32767).astype("<i2").tobytes()
