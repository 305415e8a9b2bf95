"""Decode any audio container FFmpeg knows into 16 kHz mono float32 samples.

Decoding uses PyAV (FFmpeg): WAV (8/16/24/32-bit int, 32/64-bit float), FLAC, OGG/Vorbis,
OGG/Opus, MP3, M4A/AAC, WebM... Channels are averaged to mono and the rate is converted with
soxr (a real band-limited resampler, "HQ" quality).

Resampling is streamed (``soxr.ResampleStream``): each decoded frame is downmixed and converted
to 16 kHz as it arrives, so only 16 kHz mono float32 chunks are kept. Peak memory is about twice
the 16 kHz output (the chunks plus their concatenation) whatever the source rate or channel
count, instead of several copies of the audio at the source rate (a 2 h 48 kHz upload would
otherwise peak at ~3 GB).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import av
import numpy as np
import soxr

from whisper_build.serving.audio.errors import AudioTooLongError, EmptyAudioError, NotAudioError

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
    total = 0  # decoded samples per channel, at the source rate
    to_16k: _Mono16k | None = None
    try:
        with av.open(io.BytesIO(data), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise NotAudioError("the file has no audio stream: send a WAV/FLAC/MP3/OGG/M4A audio file")
            stream = container.streams.audio[0]
            rate = stream.codec_context.sample_rate or stream.rate
            if not rate:
                raise NotAudioError("the audio stream has no sample rate: the file is damaged")
            channels = stream.codec_context.channels
            codec = stream.codec_context.name
            # Planar float keeps every channel separate whatever the source sample format.
            converter = av.AudioResampler(format="fltp")
            to_16k = _Mono16k(rate)
            limit = None if max_seconds is None else int(max_seconds * rate)
            for frame in container.decode(stream):
                for out in converter.resample(frame):
                    total += to_16k.add(out)
                if limit is not None and total > limit:
                    raise AudioTooLongError(
                        f"the audio is longer than the limit of {max_seconds:g} s: "
                        "split it or raise the server's max audio duration",
                        limit_seconds=float(max_seconds),
                    )
            for out in converter.resample(None):
                total += to_16k.add(out)
    except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
        if total == 0:
            raise NotAudioError(
                "the bytes are not a decodable audio file (supported: WAV, FLAC, MP3, "
                "OGG/Vorbis, OGG/Opus, M4A/AAC, WebM)"
            ) from exc
        # A damaged tail after decodable audio: keep what decoded (like ffmpeg -i does).
    if total == 0:
        raise EmptyAudioError("the audio has zero length: it decodes to no samples")
    assert to_16k is not None  # total > 0 means frames were decoded
    samples = np.nan_to_num(to_16k.finish(), copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
    return Audio(samples=samples, source_rate=int(rate), source_channels=int(channels), codec=codec)


class _Mono16k:
    """Accumulates decoded frames as 16 kHz mono float32, resampling as they arrive.

    Args:
        rate: the source sample rate in Hz; at :data:`SAMPLE_RATE` no resampler is used.
    """

    def __init__(self, rate: int) -> None:
        self._stream = (
            None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        )
        self._chunks: list[np.ndarray] = []

    def add(self, frame: av.AudioFrame) -> int:
        """Downmix a planar-float frame (``[channels, n]``), resample it, keep it; returns ``n``."""
        planes = frame.to_ndarray()
        mono = planes.mean(axis=0, dtype=np.float32)
        self._keep(mono if self._stream is None else self._stream.resample_chunk(mono, last=False))
        return planes.shape[1]

    def finish(self) -> np.ndarray:
        """Flush the resampler; returns every sample so far, float32 ``[n]`` at 16 kHz."""
        if self._stream is not None:
            self._keep(self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
            self._stream = None
        chunks, self._chunks = self._chunks, []
        if not chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]

    def _keep(self, chunk: np.ndarray) -> None:
        if len(chunk):
            self._chunks.append(chunk)
