"""Decode any audio container FFmpeg knows into 16 kHz mono float32, as a stream of chunks.

Decoding uses PyAV (FFmpeg): WAV (8/16/24/32-bit int, 32/64-bit float), FLAC, OGG/Vorbis,
OGG/Opus, MP3, M4A/AAC, WebM... Channels are averaged to mono and the rate is converted with
soxr (a real band-limited resampler, "HQ" quality).

Memory does not grow with the audio's length: :func:`open_audio` reads only the container's
header (and refuses audio whose declared duration is over the limit before decoding anything),
then :meth:`AudioStream.chunks` decodes frame by frame, downmixing and resampling each frame as
it arrives (``soxr.ResampleStream``), and yields 16 kHz chunks of a few thousand samples. Callers
cut the chunks into windows as they come (:func:`whisper_build.serving.audio.iter_windows`), so
a one-hour upload never exists as one decoded array. :func:`decode_audio` concatenates the stream
for short clips and tools.

Where the duration comes from: FFmpeg's demuxers fill the stream's (or container's) duration
from the format's own header — the WAV ``data`` chunk size, FLAC ``STREAMINFO`` total samples,
the last Ogg page's granule position, the MP4 ``mvhd``/``mdhd`` boxes, an MP3 Xing/Info frame
(else an estimate from the bitrate). Formats without one (raw ADTS AAC, live WebM) are stopped
while decoding, as soon as the limit is passed.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType

import av
import numpy as np
import numpy.typing as npt
import soxr

from whisper_build.serving.audio.errors import AudioTooLongError, EmptyAudioError, NotAudioError

SAMPLE_RATE = 16_000
"""Whisper's input rate in Hz (openai/whisper audio.py ``SAMPLE_RATE``)."""

_NOT_AUDIO = "the bytes are not a decodable audio file (supported: WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, M4A/AAC, WebM)"


@dataclass(frozen=True)
class Audio:
    """Decoded audio.

    Attributes:
        samples: float32 array, shape ``[n]``, mono, :data:`SAMPLE_RATE` Hz, nominally in [-1, 1].
        source_rate: the sample rate of the input stream in Hz.
        source_channels: the channel count of the input stream.
        codec: FFmpeg codec name of the input stream (e.g. ``pcm_s16le``, ``mp3``).
    """

    samples: npt.NDArray[np.float32]
    source_rate: int
    source_channels: int
    codec: str

    @property
    def duration(self) -> float:
        """Length in seconds."""
        return len(self.samples) / SAMPLE_RATE


def _too_long(length: str, limit: float) -> AudioTooLongError:
    return AudioTooLongError(
        f"the audio is {length}, over the limit of {limit:g} s: "
        f"split it into parts of at most {limit:g} s, or raise the server's max audio duration",
        limit_seconds=float(limit),
    )


class AudioStream:
    """An opened audio file that decodes on demand; build it with :func:`open_audio`.

    Attributes:
        declared_seconds: the duration the container's header states, in seconds, or ``None``
            when the format does not say (an estimate for MP3 without a Xing/Info frame).
        source_rate: the sample rate of the input stream in Hz.
        source_channels: the channel count of the input stream.
        codec: FFmpeg codec name of the input stream (e.g. ``flac``).
        max_seconds: decoding stops with :class:`AudioTooLongError` past this many seconds
            (``None`` = no limit).
    """

    def __init__(self, container: av.container.InputContainer, max_seconds: float | None) -> None:
        self._container = container
        stream = container.streams.audio[0]
        self._stream = stream
        self.source_rate = int(stream.codec_context.sample_rate or stream.rate or 0)
        self.source_channels = int(stream.codec_context.channels)
        self.codec = str(stream.codec_context.name)
        self.max_seconds = max_seconds
        self.declared_seconds = _declared_seconds(container, stream)
        self._samples_out = 0
        self._started = False
        self._closed = False
        self._lock = threading.Lock()  # close() from another thread waits for the frame being decoded

    @property
    def seconds(self) -> float:
        """Seconds of 16 kHz output yielded so far (the full duration once :meth:`chunks` is exhausted)."""
        return self._samples_out / SAMPLE_RATE

    def chunks(self) -> Iterator[npt.NDArray[np.float32]]:
        """Decode, yielding float32 ``[n]`` chunks of 16 kHz mono audio in order (single use).

        A damaged tail after decodable audio ends the stream quietly (as ``ffmpeg -i`` does), and
        so does :meth:`close` from another thread (after the frame being decoded).

        Raises:
            NotAudioError: nothing decodes.
            EmptyAudioError: the stream decodes to zero samples.
            AudioTooLongError: more than ``max_seconds`` were decoded.
            RuntimeError: called twice.
        """
        if self._started:
            raise RuntimeError("AudioStream.chunks() can be iterated once")
        self._started = True
        converter = av.AudioResampler(format="fltp")  # planar float whatever the source format
        to_16k = _Mono16k(self.source_rate)
        limit = None if self.max_seconds is None else int(self.max_seconds * self.source_rate)
        decoded = 0  # samples per channel at the source rate
        frames = self._container.decode(self._stream)
        while True:
            with self._lock:
                if self._closed:
                    return
                try:
                    frame = next(frames, None)
                    converted = converter.resample(frame)
                except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
                    if decoded == 0:
                        raise NotAudioError(_NOT_AUDIO) from exc
                    converted, frame = converter.resample(None), None
            for out in converted:
                decoded += out.samples
                chunk = to_16k.add(out)
                if len(chunk):
                    self._samples_out += len(chunk)
                    yield chunk
            if limit is not None and decoded > limit:
                assert self.max_seconds is not None
                raise _too_long(f"longer than {self.max_seconds:g} s", self.max_seconds)
            if frame is None:
                break
        tail = to_16k.finish()
        if len(tail):
            self._samples_out += len(tail)
            yield tail
        if self._samples_out == 0:
            raise EmptyAudioError("the audio has zero length: it decodes to no samples")

    def close(self) -> None:
        """Release the demuxer and decoder (idempotent; safe while another thread iterates :meth:`chunks`)."""
        with self._lock:
            self._closed = True
            self._container.close()

    def __enter__(self) -> AudioStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_audio(data: bytes, max_seconds: float | None = None) -> AudioStream:
    """Open container bytes for streaming decode, reading only the header.

    Args:
        data: the file's bytes (any container/codec FFmpeg can demux and decode); not copied.
        max_seconds: longest audio accepted in seconds; ``None`` = no limit.

    Returns: an :class:`AudioStream` (close it, or use it as a context manager).

    Raises:
        EmptyAudioError: ``data`` is empty.
        NotAudioError: FFmpeg cannot open it, or it has no audio stream or no sample rate.
        AudioTooLongError: the header declares a duration over ``max_seconds`` (nothing is decoded).
    """
    if not data:
        raise EmptyAudioError("the audio is empty (0 bytes): send a WAV/FLAC/MP3/OGG/M4A file")
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
        raise NotAudioError(_NOT_AUDIO) from exc
    try:
        if not container.streams.audio:
            raise NotAudioError("the file has no audio stream: send a WAV/FLAC/MP3/OGG/M4A audio file")
        stream = AudioStream(container, max_seconds)
        if not stream.source_rate:
            raise NotAudioError("the audio stream has no sample rate: the file is damaged")
        declared = stream.declared_seconds
        if max_seconds is not None and declared is not None and declared > max_seconds:
            raise _too_long(f"{declared:.1f} s long by its header", max_seconds)
    except BaseException:
        container.close()
        raise
    return stream


def decode_audio(data: bytes, max_seconds: float | None = None) -> Audio:
    """Decode container bytes to one :class:`Audio` array (16 kHz mono float32).

    For short clips and tools; the serving path streams with :func:`open_audio` instead, since
    this holds the whole decoded audio (4 bytes × 16 000 per second).

    Args:
        data: the file's bytes.
        max_seconds: refuse audio longer than this (from the header, else while decoding).

    Raises:
        EmptyAudioError: ``data`` is empty or decodes to zero samples.
        NotAudioError: FFmpeg cannot open/decode it, or it has no audio stream.
        AudioTooLongError: longer than ``max_seconds``.
    """
    with open_audio(data, max_seconds) as stream:
        chunks = list(stream.chunks())
    samples = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
    return Audio(samples, stream.source_rate, stream.source_channels, stream.codec)


def _declared_seconds(container: av.container.InputContainer, stream: av.AudioStream) -> float | None:
    """The duration the header states, in seconds; ``None`` when FFmpeg has none."""
    if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
        return float(stream.duration * stream.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / av.time_base
    return None


class _Mono16k:
    """Converts decoded frames to 16 kHz mono float32 as they arrive.

    Args:
        rate: the source sample rate in Hz; at :data:`SAMPLE_RATE` no resampler is used.
    """

    def __init__(self, rate: int) -> None:
        self._stream = (
            None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        )

    def add(self, frame: av.AudioFrame) -> npt.NDArray[np.float32]:
        """Downmix a planar-float frame (``[channels, n]``) and resample it; returns float32 ``[m]``."""
        mono = frame.to_ndarray().mean(axis=0, dtype=np.float32)
        out = mono if self._stream is None else self._stream.resample_chunk(mono, last=False)
        return _finite(out)

    def finish(self) -> npt.NDArray[np.float32]:
        """Flush the resampler; returns its last samples (float32 ``[m]``, possibly empty)."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        out = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._stream = None
        return _finite(out)


def _finite(chunk: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    return np.nan_to_num(chunk, copy=False, nan=0.0, posinf=1.0, neginf=-1.0)
