"""Decode any audio container FFmpeg knows into 16 kHz mono float32, as a stream of chunks.

Two readers behind one API (:mod:`.readers`): WAV and FLAC by libsndfile (``soundfile``; 10-50x less CPU
than frame by frame), everything else — or what libsndfile refuses — by PyAV (FFmpeg). Channels are averaged,
the rate converted with soxr ("HQ"). Memory does not grow with the audio's length: the header is
read first (over-long audio refused before decoding), then chunks are decoded as they are asked
for. Entry points: :func:`open_audio` / :func:`open_audio_file` → :class:`AudioStream` (where the
duration comes from, in its docstring), :func:`decode_audio` for short clips and tools.
Docs: docs/gateway.md, "What happens to a request".
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import numpy.typing as npt
import soxr

from whisper_build.serving.audio.errors import AudioTooLongError, AudioTooShortError, EmptyAudioError, NotAudioError
from whisper_build.serving.audio.readers import FileReader, Reader, av_reader, sndfile_reader

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
        codec: the input's codec: FFmpeg's name (e.g. ``mp3``, ``pcm_s16le``) or, for WAV/FLAC
            read by libsndfile, ``<format>/<subtype>`` (e.g. ``wav/pcm_16``, ``flac/pcm_24``).
        max_seconds: decoding stops with :class:`AudioTooLongError` past this many seconds
            (``None`` = no limit).
        min_seconds: decoding ends with :class:`AudioTooShortError` when the whole stream is
            shorter than this, in source samples ÷ source rate (``None`` = no minimum).

    Memory does not grow with the audio's length: :func:`open_audio` reads only the container's
    header (and refuses audio whose declared duration is over the limit before decoding anything),
    then :meth:`AudioStream.chunks` decodes block by block (FFmpeg frames, or libsndfile blocks of
    at most :data:`~.readers.SNDFILE_BLOCK_SECONDS`), downmixing and resampling each as it arrives
    (``soxr.ResampleStream``), and yields 16 kHz chunks. Callers
    cut the chunks into windows as they come (:func:`whisper_build.serving.audio.iter_windows`), so
    a one-hour upload never exists as one decoded array. :func:`decode_audio` concatenates the stream
    for short clips and tools.

    Where the duration comes from: FFmpeg's demuxers fill the stream's (or container's) duration
    from the format's own header — the WAV ``data`` chunk size, FLAC ``STREAMINFO`` total samples,
    the last Ogg page's granule position, the MP4 ``mvhd``/``mdhd`` boxes, an MP3 Xing/Info frame
    (else an estimate from the bitrate). Formats without one (raw ADTS AAC, live WebM) are stopped
    while decoding, as soon as the limit is passed. libsndfile reads the WAV ``data`` size and the
    FLAC ``STREAMINFO`` total too; a FLAC without a total goes to PyAV.
    """

    def __init__(self, reader: Reader, max_seconds: float | None, min_seconds: float | None = None) -> None:
        self._reader = reader
        self.source_rate = reader.source_rate
        self.source_channels = reader.source_channels
        self.codec = reader.codec
        self.declared_seconds = reader.declared_seconds
        self.max_seconds = max_seconds
        self.min_seconds = min_seconds
        self._samples_out = 0
        self._started = False
        self._closed = False
        self._lock = threading.Lock()  # close() from another thread waits for the block being decoded

    @property
    def seconds(self) -> float:
        """Seconds of 16 kHz output yielded so far (the full duration once :meth:`chunks` is exhausted)."""
        return self._samples_out / SAMPLE_RATE

    def chunks(self) -> Iterator[npt.NDArray[np.float32]]:
        """Decode, yielding float32 ``[n]`` chunks of 16 kHz mono audio in order (single use).

        A damaged tail after decodable audio ends the stream quietly (as ``ffmpeg -i`` does), and
        so does :meth:`close` from another thread (after the block being decoded).

        Raises:
            NotAudioError: nothing decodes.
            EmptyAudioError: the stream decodes to zero samples.
            AudioTooLongError: more than ``max_seconds`` were decoded.
            AudioTooShortError: the whole stream is shorter than ``min_seconds`` (raised after its
                last chunk, before a consumer that waits for the stream's end has used it).
            RuntimeError: called twice.
        """
        if self._started:
            raise RuntimeError("AudioStream.chunks() can be iterated once")
        self._started = True
        to_16k = _Mono16k(self.source_rate)
        limit = None if self.max_seconds is None else int(self.max_seconds * self.source_rate)
        decoded = 0  # samples per channel at the source rate
        blocks = self._reader.blocks()
        while True:
            with self._lock:
                if self._closed:
                    return
                block = next(blocks, None)
            if block is None:
                break
            decoded += len(block)
            chunk = to_16k.add(block)
            if len(chunk):
                self._samples_out += len(chunk)
                yield chunk
            if limit is not None and decoded > limit:
                assert self.max_seconds is not None
                raise _too_long(f"longer than {self.max_seconds:g} s", self.max_seconds)
        tail = to_16k.finish()
        if len(tail):
            self._samples_out += len(tail)
            yield tail
        if self._samples_out == 0:
            raise EmptyAudioError("the audio has zero length: it decodes to no samples")
        if self.min_seconds is not None and decoded / self.source_rate < self.min_seconds:
            raise AudioTooShortError(
                f"Audio file is too short ({decoded / self.source_rate:.3f} s). Minimum audio length is "
                f"{self.min_seconds:g} seconds.",
                self.min_seconds,
            )

    def close(self) -> None:
        """Release the decoder (idempotent; safe while another thread iterates :meth:`chunks`)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._reader.close()

    def __enter__(self) -> AudioStream:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_audio(data: bytes, max_seconds: float | None = None, min_seconds: float | None = None) -> AudioStream:
    """Open container bytes for streaming decode, reading only the header.

    Args:
        data: the file's bytes (any container/codec FFmpeg can demux and decode); not copied.
        max_seconds: longest audio accepted in seconds; ``None`` = no limit.
        min_seconds: shortest audio accepted in seconds, checked once decoded; ``None`` = no minimum.

    Returns: an :class:`AudioStream` (close it, or use it as a context manager).

    Raises:
        EmptyAudioError: ``data`` is empty.
        NotAudioError: FFmpeg cannot open it, or it has no audio stream or no sample rate.
        AudioTooLongError: the header declares a duration over ``max_seconds`` (nothing is decoded).
    """
    if not data:
        raise EmptyAudioError("the audio is empty (0 bytes): send a WAV/FLAC/MP3/OGG/M4A file")
    reader = sndfile_reader(data) or av_reader(data)
    return _checked_stream(reader, max_seconds, min_seconds)


def open_audio_file(path: str | Path, max_seconds: float | None = None) -> AudioStream:
    """:func:`open_audio` for a file on disk, read as it is decoded: the file is never held in memory.

    Raises: as :func:`open_audio`; ``OSError`` when the file cannot be opened.
    """
    file = open(path, "rb")  # noqa: SIM115 (owned by the stream: closed by AudioStream.close)
    try:
        header = file.read(12)
        if not header:
            raise EmptyAudioError("the audio is empty (0 bytes): send a WAV/FLAC/MP3/OGG/M4A file")
        file.seek(0)
        reader: Reader | None = sndfile_reader(file, header)
        if reader is None:
            file.seek(0)
            reader = av_reader(file)
        stream = _checked_stream(FileReader(reader, file), max_seconds)
    except BaseException:
        file.close()
        raise
    return stream


def _checked_stream(reader: Reader, max_seconds: float | None, min_seconds: float | None = None) -> AudioStream:
    """An :class:`AudioStream` over ``reader`` once its rate and declared length pass (reader closed if not)."""
    try:
        stream = AudioStream(reader, max_seconds, min_seconds)
        if not stream.source_rate:
            raise NotAudioError("the audio stream has no sample rate: the file is damaged")
        declared = stream.declared_seconds
        if max_seconds is not None and declared is not None and declared > max_seconds:
            raise _too_long(f"{declared:.1f} s long by its header", max_seconds)
    except BaseException:
        reader.close()
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


class _Mono16k:
    """Converts decoded mono blocks to 16 kHz float32 as they arrive.

    Args:
        rate: the source sample rate in Hz; at :data:`SAMPLE_RATE` no resampler is used.
    """

    def __init__(self, rate: int) -> None:
        self._stream = (
            None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        )

    def add(self, mono: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Resample a mono float32 block ``[n]`` (source rate); returns float32 ``[m]`` at 16 kHz."""
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
