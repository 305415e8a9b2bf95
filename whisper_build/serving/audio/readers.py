"""The two decoders behind :class:`~.decode.AudioStream`: libsndfile for WAV and FLAC, PyAV (FFmpeg) for the rest.

Each is a :class:`Reader`: the header's facts (rate, channels, codec, declared length), then mono float32
blocks at the source rate. :func:`sndfile_reader` takes a WAV or FLAC whose header states its length (10-50x
less CPU than FFmpeg frame by frame), else :func:`av_reader` opens it with FFmpeg; :class:`FileReader` also
closes the file a reader reads. Docs: docs/gateway.md, "What happens to a request".
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO, Protocol

import av
import numpy as np
import numpy.typing as npt
import soundfile

from whisper_build.serving.audio.errors import NotAudioError

__all__ = ["SNDFILE_BLOCK_SECONDS", "FileReader", "Reader", "av_reader", "sndfile_reader"]

SNDFILE_BLOCK_SECONDS = 10.0
"""Longest block libsndfile reads at once, in seconds of the source (bounds a WAV/FLAC's decode buffer)."""

_UNKNOWN_LENGTH_SECONDS = 2.0**40  # libsndfile's frame count when a header states none (SF_COUNT_MAX-like)

_NOT_AUDIO = "the bytes are not a decodable audio file (supported: WAV, FLAC, MP3, OGG/Vorbis, OGG/Opus, M4A/AAC, WebM)"


class Reader(Protocol):
    """One decoder behind :class:`~.decode.AudioStream`: header facts, then mono float32 blocks at the source rate."""

    source_rate: int
    source_channels: int
    codec: str
    declared_seconds: float | None

    def blocks(self) -> Iterator[npt.NDArray[np.float32]]:
        """Mono float32 ``[n]`` blocks in order at ``source_rate``; a damaged tail ends them quietly.

        Raises: NotAudioError when nothing decodes.
        """
        ...

    def close(self) -> None:
        """Release the decoder."""
        ...


class _AvReader:
    """PyAV (FFmpeg): any container/codec; frames converted to planar float and averaged to mono."""

    def __init__(self, container: av.container.InputContainer) -> None:
        self._container = container
        stream = container.streams.audio[0]
        self._stream = stream
        self.source_rate = int(stream.codec_context.sample_rate or stream.rate or 0)
        self.source_channels = int(stream.codec_context.channels)
        self.codec = str(stream.codec_context.name)
        self.declared_seconds = _declared_seconds(container, stream)

    def blocks(self) -> Iterator[npt.NDArray[np.float32]]:
        """See :meth:`Reader.blocks`."""
        converter = av.AudioResampler(format="fltp")  # planar float whatever the source format
        decoded = 0
        frames = self._container.decode(self._stream)
        while True:
            try:
                frame = next(frames, None)
                converted = converter.resample(frame)
            except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
                if decoded == 0:
                    raise NotAudioError(_NOT_AUDIO) from exc
                converted, frame = converter.resample(None), None
            for out in converted:
                decoded += out.samples
                yield out.to_ndarray().mean(axis=0, dtype=np.float32)
            if frame is None:
                return

    def close(self) -> None:
        """See :meth:`Reader.close`."""
        self._container.close()


class _SndfileReader:
    """libsndfile (``soundfile``) for WAV and FLAC: blocks of :data:`SNDFILE_BLOCK_SECONDS` read as float32 in C.

    Raises (constructor): ``soundfile.LibsndfileError`` (a ``RuntimeError``) when libsndfile cannot
    open the bytes; the caller then falls back to PyAV.
    """

    def __init__(self, data: bytes | BinaryIO) -> None:
        self._file = soundfile.SoundFile(io.BytesIO(data) if isinstance(data, bytes) else data)
        self.source_rate = int(self._file.samplerate)
        self.source_channels = int(self._file.channels)
        self.codec = f"{self._file.format}/{self._file.subtype}".lower()  # e.g. wav/pcm_16
        self.declared_seconds = self._file.frames / self.source_rate if self.source_rate else None
        self._block = max(1, int(SNDFILE_BLOCK_SECONDS * self.source_rate))

    def blocks(self) -> Iterator[npt.NDArray[np.float32]]:
        """See :meth:`Reader.blocks`."""
        decoded = 0
        while True:
            try:
                block = self._file.read(self._block, dtype="float32", always_2d=True)
            except (RuntimeError, ValueError) as exc:  # libsndfile read error: a damaged file
                if decoded == 0:
                    raise NotAudioError(_NOT_AUDIO) from exc
                return
            if not len(block):
                return
            decoded += len(block)
            yield block.reshape(-1) if block.shape[1] == 1 else block.mean(axis=1, dtype=np.float32)

    def close(self) -> None:
        """See :meth:`Reader.close`."""
        self._file.close()


class FileReader:
    """A reader that also closes the file it reads from."""

    def __init__(self, reader: Reader, file: BinaryIO) -> None:
        self._reader, self._file = reader, file
        self.source_rate, self.source_channels = reader.source_rate, reader.source_channels
        self.codec, self.declared_seconds = reader.codec, reader.declared_seconds

    def blocks(self) -> Iterator[npt.NDArray[np.float32]]:
        """See :meth:`Reader.blocks`."""
        return self._reader.blocks()

    def close(self) -> None:
        """Close the reader, then the file."""
        self._reader.close()
        self._file.close()


def sndfile_reader(data: bytes | BinaryIO, header: bytes | None = None) -> _SndfileReader | None:
    """The libsndfile reader for a WAV or FLAC whose header states its length, else ``None`` (PyAV then)."""
    head = header if header is not None else data[:12] if isinstance(data, bytes) else b""
    if not (head[:4] == b"fLaC" or (head[:4] in (b"RIFF", b"RF64") and head[8:12] == b"WAVE")):
        return None
    try:
        reader = _SndfileReader(data)
    except (RuntimeError, ValueError, TypeError):  # libsndfile refused it: FFmpeg may still read it
        return None
    declared = reader.declared_seconds
    if reader.source_rate > 0 and declared is not None and 0 < declared < _UNKNOWN_LENGTH_SECONDS:
        return reader
    reader.close()  # no stated length (e.g. a FLAC without STREAMINFO total): PyAV stops at the limit
    return None


def av_reader(data: bytes | BinaryIO) -> _AvReader:
    """PyAV's reader; NotAudioError when FFmpeg cannot open the bytes or finds no audio stream."""
    try:
        container = av.open(io.BytesIO(data) if isinstance(data, bytes) else data, mode="r", metadata_errors="ignore")
    except (av.FFmpegError, UnicodeDecodeError, IndexError) as exc:
        raise NotAudioError(_NOT_AUDIO) from exc
    if not container.streams.audio:
        container.close()
        raise NotAudioError("the file has no audio stream: send a WAV/FLAC/MP3/OGG/M4A audio file")
    if container.streams.audio[0].codec_context is None:  # a codec FFmpeg does not know
        container.close()
        raise NotAudioError(_NOT_AUDIO)
    try:
        return _AvReader(container)
    except BaseException:
        container.close()
        raise


def _declared_seconds(container: av.container.InputContainer, stream: av.AudioStream) -> float | None:
    """The duration the header states, in seconds; ``None`` when FFmpeg has none."""
    if stream.duration is not None and stream.time_base is not None and stream.duration > 0:
        return float(stream.duration * stream.time_base)
    if container.duration is not None and container.duration > 0:
        return container.duration / av.time_base
    return None
