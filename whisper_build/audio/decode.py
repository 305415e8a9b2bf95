"""Decode any audio container FFmpeg knows into 16 kHz mono float32 samples.

Decoding uses PyAV (FFmpeg): WAV (8/16/24/32-bit int, 32/64-bit float), FLAC, OGG/Vorbis,
OGG/Opus, MP3, M4A/AAC, WebM... Channels are averaged to mono and the rate is converted with
soxr (a real band-limited resampler, "HQ" quality).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np
import soxr

from whisper_build.audio.errors import AudioTooLongError, EmptyAudioError, NotAudioError

SAMPLE_RATE = 16_000
"""Whisper's input rate in Hz (openai/whisper audio.py ``SAMPLE_RATE``)."""


@dataclass(frozen=True)
class Audio:
    """Decoded audio.

    Attributes:
        samples: float32 array, shape ``[n]``, mono, :data:`SAMPLE_RATE` Hz, nominally in [-1, 1].
        source_rate: the sample rate of the input stream in Hz.
        source_channels: the channel count of the input stream.
        codec: FFmpeg codec name of the input stream (e.g. ``pcm_s16le``, ``mp3``).
    """

    samples: np.ndarray
    source_rate: int
    source_channels: int
    codec: str

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.samples) / SAMPLE_RATE


def decode_audio(data: bytes, max_seconds: float | None = None) -> Audio:
    """Decode container bytes to :class:`Audio` (16 kHz mono float32).

    Args:
        data: the file's bytes (any container/codec FFmpeg can demux and decode).
        max_seconds: stop and raise once more than this many seconds were decoded
            (so a 10-hour upload is rejected without decoding all of it); ``None`` = no limit.

    Raises:
        EmptyAudioError: ``data`` is empty or decodes to zero samples.
        NotAudioError: FFmpeg cannot open/decode it, or it has no audio stream.
        AudioTooLongError: longer than ``max_seconds``.
    """
    if not data:
        raise EmptyAudioError("the audio is empty (0 bytes): send a WAV/FLAC/MP3/OGG/M4A file")
    chunks: list[np.ndarray] = []
    total = 0
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise NotAudioError(
                    "the file has no audio stream: send a WAV/FLAC/MP3/OGG/M4A audio file"
                )
            stream = container.streams.audio[0]
            rate = stream.codec_context.sample_rate or stream.rate
            if not rate:
                raise NotAudioError("the audio stream has no sample rate: the file is damaged")
            channels = stream.codec_context.channels
            codec = stream.codec_context.name
            # Planar float keeps every channel separate whatever the source sample format.
            converter = av.AudioResampler(format="fltp")
            limit = None if max_seconds is None else int(max_seconds * rate)
            for frame in container.decode(stream):
                for out in converter.resample(frame):
                    planes = out.to_ndarray()  # [channels, n] float32
                    chunks.append(planes.mean(axis=0, dtype=np.float32))
                    total += planes.shape[1]
                if limit is not None and total > limit:
                    raise AudioTooLongError(
                        f"the audio is longer than the limit of {max_seconds:g} s: "
                        "split it or raise the server's max audio duration",
                        limit_seconds=float(max_seconds),
                    )
            for out in converter.resample(None):
                chunks.append(out.to_ndarray().mean(axis=0, dtype=np.float32))
                total += out.samples
    except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
        if total == 0:
            raise NotAudioError(
                "the bytes are not a decodable audio file (supported: WAV, FLAC, MP3, "
                "OGG/Vorbis, OGG/Opus, M4A/AAC, WebM)"
            ) from exc
        # A damaged tail after decodable audio: keep what decoded (like ffmpeg -i does).
    if total == 0:
        raise EmptyAudioError("the audio has zero length: it decodes to no samples")
    samples = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    if rate != SAMPLE_RATE:
        samples = soxr.resample(samples, rate, SAMPLE_RATE, quality="HQ")
    samples = np.nan_to_num(samples.astype(np.float32, copy=False), nan=0.0, posinf=1.0, neginf=-1.0)
    return Audio(samples=samples, source_rate=int(rate), source_channels=int(channels), codec=codec)
