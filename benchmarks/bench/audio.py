"""Benchmark inputs: real audio files, decoded once, ready for every kind of target.

Each file is kept as its original bytes (what the gateway receives) and as the ≤ 30 s, 16 kHz
windows the gateway would send to Triton (what a Triton target sends), cut with the serving
path's own :func:`whisper_build.serving.audio.split_windows` and silence test.
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from whisper_build.serving.audio import AudioError, decode_audio, is_silent, split_windows
from whisper_build.serving.contract import WINDOW_SECONDS

AUDIO_SUFFIXES = frozenset({".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".webm"})


class BenchInputError(ValueError):
    """The benchmark's input (audio files, target specs) is unusable; the message names it."""


@dataclass(frozen=True)
class AudioSample:
    """One input file and its non-silent windows.

    Fields: ``name``, container ``data``, ``duration_s`` and the non-silent float32 16 kHz ``windows``
    (each ≤ 30 s, Whisper's input length).
    """

    name: str
    data: bytes
    duration_s: float
    windows: tuple[np.ndarray, ...]
    path: str = ""
    """The file it was read from, as given (recorded in ``bench.json``)."""


@dataclass(frozen=True)
class Skipped:
    """A file of an ``--audio`` folder that the benchmark did not use: its ``path`` and the ``reason``."""

    path: str
    reason: str


@dataclass(frozen=True)
class Inputs:
    """What :func:`load_inputs` found: the ``samples`` used and the folder entries ``skipped``."""

    samples: list[AudioSample]
    skipped: list[Skipped]


def _expand(paths: Iterable[Path]) -> tuple[list[tuple[Path, bool]], list[Skipped]]:
    """Files to load, each with whether it came from a folder (then a bad file is skipped, not fatal)."""
    files: list[tuple[Path, bool]] = []
    skipped: list[Skipped] = []
    for path in paths:
        if path.is_dir():
            for entry in sorted(path.iterdir()):
                if entry.is_file() and entry.suffix.lower() in AUDIO_SUFFIXES:
                    files.append((entry, True))
                elif entry.is_file():
                    skipped.append(Skipped(str(entry), f"not an audio file name ({', '.join(sorted(AUDIO_SUFFIXES))})"))
                else:
                    skipped.append(Skipped(str(entry), "not a file (folders are not searched recursively)"))
        elif path.is_file():
            files.append((path, False))
        else:
            raise BenchInputError(f"audio path {path} does not exist")
    return files, skipped


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
    return AudioSample(path.name, data, audio.duration, windows, str(path))


def load_inputs(paths: Iterable[Path | str]) -> Inputs:
    """Load every file; folder entries that are not usable audio are skipped and reported.

    Folders are expanded to their files sorted by name; an entry with another suffix, that cannot be
    decoded or that is silent is listed in ``Inputs.skipped`` rather than stopping the run.

    Raises:
        BenchInputError: a path is missing, a file named directly is not usable audio, or no usable
            file was found (the message lists what was skipped and why).
    """
    files, skipped = _expand(Path(p) for p in paths)
    samples: list[AudioSample] = []
    for path, from_folder in files:
        try:
            samples.append(load_sample(path))
        except BenchInputError as err:
            if not from_folder:
                raise
            skipped.append(Skipped(str(path), str(err).removeprefix(f"audio file {path}").lstrip(": ")))
    if not samples:
        listing = "".join(f"\n  skipped {s.path}: {s.reason}" for s in skipped)
        raise BenchInputError(
            "no usable audio files: pass --audio FILE or a folder of .wav/.flac/.mp3 speech files "
            f"(make bench-audio writes some){listing}"
        )
    return Inputs(samples, skipped)


def load_samples(paths: Iterable[Path | str]) -> list[AudioSample]:
    """:func:`load_inputs` without the skipped list.

    Raises:
        BenchInputError: as :func:`load_inputs`.
    """
    return load_inputs(paths).samples
