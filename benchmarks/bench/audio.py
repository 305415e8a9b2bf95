"""Benchmark inputs: real audio files, decoded once, ready for every kind of target.

Each file is kept as its original bytes (what the gateway receives) and as the ≤ 30 s, 16 kHz
windows the gateway would send to Triton (what a Triton target sends), cut with the serving
path's own :func:`whisper_build.serving.audio.split_windows` and silence test.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whisper_build.serving.audio import AudioError, decode_audio, is_silent, split_windows
from whisper_build.serving.audio.windows import WINDOW_SECONDS

AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".webm"})


class BenchInputError(ValueError):
    """The benchmark's input (audio files, target specs) is unusable; the message names it."""


@dataclass(frozen=True)
class AudioSample:
    """One input file: ``name``, container ``data``, ``duration_s`` and the non-silent
    float32 16 kHz ``windows`` (each ≤ 30 s, Whisper's input length).
    """

    name: str
    data: bytes
    duration_s: float
    windows: tuple[np.ndarray, ...]


def _expand(paths: Iterable[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix.lower() in AUDIO_SUFFIXES)
        elif path.is_file():
            files.append(path)
        else:
            raise BenchInputError(f"audio path {path} does not exist")
    if not files:
        raise BenchInputError("no audio files given: pass --audio FILE or a folder of .wav/.flac/.mp3 files")
    return files


def load_sample(path: Path, window_seconds: float = WINDOW_SECONDS, search_seconds: float = 5.0) -> AudioSample:
    """Read and decode one file.

    Raises:
        BenchInputError: unreadable, not audio, or silent throughout.
    """
    try:
        data = path.read_bytes()
        audio = decode_audio(data)
    except (OSError, AudioError) as exc:
        raise BenchInputError(f"audio file {path}: {exc}") from exc
    windows = tuple(
        np.ascontiguousarray(audio.samples[w.start : w.end])
        for w in split_windows(audio.samples, window_seconds, search_seconds)
        if not is_silent(audio.samples[w.start : w.end])
    )
    if not windows:
        raise BenchInputError(f"audio file {path} is silent: benchmark with speech")
    return AudioSample(path.name, data, audio.duration, windows)


def load_samples(paths: Iterable[Path | str]) -> list[AudioSample]:
    """Load every file (folders are expanded to their audio files, sorted by name).

    Raises:
        BenchInputError: a path is missing, no file was found, or a file is not usable audio.
    """
    return [load_sample(p) for p in _expand(Path(p) for p in paths)]
