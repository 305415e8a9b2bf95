"""Test audio: synthetic signals encoded with PyAV, and real speech made with espeak-ng + sox.

Helpers for tests only; nothing here is shipped. ``espeak-ng`` and ``sox`` are Debian packages
(listed in .ci/apt-packages.txt).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import av
import jiwer
import numpy as np

# container, codec, PyAV sample format for each encoded format used by the tests.
FORMATS: dict[str, tuple[str, str, str]] = {
    "wav_u8": ("wav", "pcm_u8", "u8"),
    "wav_s16": ("wav", "pcm_s16le", "s16"),
    "wav_s24": ("wav", "pcm_s24le", "s32"),
    "wav_f32": ("wav", "pcm_f32le", "flt"),
    "flac": ("flac", "flac", "s16"),
    "mp3": ("mp3", "libmp3lame", "fltp"),
    "ogg_opus": ("ogg", "libopus", "flt"),
    "m4a_aac": ("ipod", "aac", "fltp"),
}
_LAYOUTS = {1: "mono", 2: "stereo", 6: "5.1"}

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "My neighbor walks his small white dog every morning.",
    "Scientists found a new species of frog in the forest.",
    "Please turn off the lights when you leave tonight.",
    "The train was late because of heavy snow.",
    "She bought fresh bread and cheese at the market.",
    "Our team finished the project two weeks early.",
    "The old library has thousands of books about art.",
    "We watched the sunset from the top of the hill.",
    "The children played football in the park after school.",
    "He forgot his umbrella and got wet in the rain.",
    "The museum opens at nine o'clock on Sundays.",
    "Fresh coffee smells wonderful early in the morning.",
    "The pilot announced that we would land in ten minutes.",
    "Farmers harvest the wheat at the end of summer.",
    "A gentle wind moved the leaves of the tall trees.",
]
"""Sixteen everyday English sentences: the transcript tests' corpus (also read by benchmarks/timestamp_mode.py)."""


def tone(seconds: float, rate: int, freq: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    """Sine wave, float32 ``[n]``."""
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def encode(samples: np.ndarray, rate: int, fmt: str) -> bytes:
    """Encode float samples (``[n]`` mono or ``[channels, n]``) as ``fmt`` (a key of FORMATS)."""
    container_name, codec, sample_format = FORMATS[fmt]
    planes = samples[None, :] if samples.ndim == 1 else samples
    channels = planes.shape[0]
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format=container_name) as container:
        stream = container.add_stream(codec, rate=rate, layout=_LAYOUTS[channels])
        stream.format = sample_format
        frame_size = 960 * rate // 48000 if codec == "libopus" else 1024
        for start in range(0, planes.shape[1], frame_size):
            chunk = np.ascontiguousarray(planes[:, start : start + frame_size], dtype=np.float32)
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=_LAYOUTS[channels])
            frame.sample_rate = rate
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return buffer.getvalue()


def speech_tools_available() -> bool:
    """True when espeak-ng and sox are installed.

    Raises:
        RuntimeError: in CI (``CI`` set), where a missing tool must fail the run instead of
            silently skipping the speech tests (``.ci/run`` installs both).
    """
    available = bool(shutil.which("espeak-ng") and shutil.which("sox"))
    if not available and os.environ.get("CI"):
        raise RuntimeError("espeak-ng and sox are required in CI (.ci/apt-packages.txt)")
    return available


def speak(text: str, path: Path, rate: int = 16000, channels: int = 1, words_per_minute: int = 130) -> Path:
    """Say ``text`` with espeak-ng and convert with sox to ``path`` (format from its suffix).

    Returns ``path``. Raises ``subprocess.CalledProcessError`` when a tool fails.
    """
    raw = path.with_suffix(".espeak.wav")
    subprocess.run(
        ["espeak-ng", "-v", "en-us", "-s", str(words_per_minute), "-w", str(raw), text],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        ["sox", str(raw), "-r", str(rate), "-c", str(channels), str(path)],
        check=True,
        capture_output=True,
    )
    raw.unlink()
    return path


def concatenate_with_pauses(parts: list[Path], path: Path, pause_seconds: float = 0.6) -> Path:
    """Join WAV files with ``pause_seconds`` of silence between them (sox)."""
    padded = []
    for part in parts:
        out = part.with_name(f"{part.stem}.padded.wav")
        subprocess.run(["sox", str(part), str(out), "pad", "0", str(pause_seconds)], check=True, capture_output=True)
        padded.append(out)
    subprocess.run(["sox", *map(str, padded), str(path)], check=True, capture_output=True)
    for out in padded:
        out.unlink()
    return path


_NORMALIZE = jiwer.Compose(
    [
        jiwer.ToLowerCase(),
        jiwer.RemovePunctuation(),
        jiwer.RemoveMultipleSpaces(),
        jiwer.Strip(),
        jiwer.ReduceToListOfListOfWords(),
    ]
)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate (jiwer) after lower-casing and removing punctuation."""
    return jiwer.wer(reference, hypothesis, reference_transform=_NORMALIZE, hypothesis_transform=_NORMALIZE)
