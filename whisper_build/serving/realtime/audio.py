"""Session audio formats → 16 kHz mono float32, streamed (docs/gateway.md, "Live transcription").

``audio/pcm`` is 16-bit little-endian mono at 24 kHz (OpenAI accepts no other rate); ``audio/pcmu`` and
``audio/pcma`` are G.711 μ-law / A-law at 8 kHz (ITU-T G.711), decoded with 256-entry tables (no
``audioop``, removed in Python 3.13). Resampling to Whisper's 16 kHz uses one ``soxr.ResampleStream`` per
session, so chunk boundaries leave no seams.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt
import soxr

from whisper_build.serving.realtime.timeline import RATE

__all__ = ["FORMAT_RATES", "AudioFormat", "SessionAudio", "alaw_table", "ulaw_table"]

AudioFormat = Literal["audio/pcm", "audio/pcmu", "audio/pcma"]
FORMAT_RATES: dict[str, int] = {"audio/pcm": 24_000, "audio/pcmu": 8_000, "audio/pcma": 8_000}
"""Sample rate of each format, Hz."""


def ulaw_table() -> npt.NDArray[np.float32]:
    """G.711 μ-law byte → linear sample in [-1, 1) (float32 ``[256]``)."""
    u = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = (((u & 0x0F) << 3) + 0x84) << ((u & 0x70) >> 4)
    linear = np.where(u & 0x80, 0x84 - magnitude, magnitude - 0x84)
    return (linear / 32768.0).astype(np.float32)


def alaw_table() -> npt.NDArray[np.float32]:
    """G.711 A-law byte → linear sample in [-1, 1) (float32 ``[256]``)."""
    a = np.arange(256, dtype=np.int32) ^ 0x55
    exponent = (a & 0x70) >> 4
    mantissa = a & 0x0F
    magnitude = np.where(exponent == 0, (mantissa << 4) + 8, ((mantissa << 4) + 0x108) << np.maximum(exponent - 1, 0))
    linear = np.where(a & 0x80, magnitude, -magnitude)
    return (linear / 32768.0).astype(np.float32)


_TABLES = {"audio/pcmu": ulaw_table(), "audio/pcma": alaw_table()}


class SessionAudio:
    """Decode one session's appended bytes in ``audio_format`` and resample them to 16 kHz.

    :meth:`decode` takes any byte count: an odd trailing byte of PCM16 is kept for the next append.
    :meth:`flush` returns what the resampler still holds (call it at a turn's end).
    """

    def __init__(self, audio_format: AudioFormat) -> None:
        self.format = audio_format
        self.rate = FORMAT_RATES[audio_format]
        self._carry = b""
        self._resampler = soxr.ResampleStream(self.rate, RATE, 1, dtype="float32", quality="HQ")

    def decode(self, data: bytes) -> npt.NDArray[np.float32]:
        """16 kHz float32 samples of ``data`` (bytes in the session's format)."""
        if self.format == "audio/pcm":
            data = self._carry + data
            even = len(data) - len(data) % 2
            self._carry = data[even:]
            samples = np.frombuffer(data[:even], dtype="<i2").astype(np.float32) / 32768.0
        else:
            samples = _TABLES[self.format][np.frombuffer(data, dtype=np.uint8)]
        return self._resampler.resample_chunk(samples)

    def reset(self) -> None:
        """Drop what the resampler and the odd-byte carry still hold (``input_audio_buffer.clear``)."""
        self._carry = b""
        self._resampler.clear()

    def flush(self) -> npt.NDArray[np.float32]:
        """The resampler's remaining output (the stream goes on afterwards)."""
        out = self._resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._resampler.clear()
        return out
