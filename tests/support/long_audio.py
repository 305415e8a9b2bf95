"""Long audio fixtures (minutes to an hour), built once per machine and cached in the temp dir
(written under a per-process name, then renamed: parallel test workers never read half a file).

Long files are written block by block with soundfile, so building them needs little memory; the
cache key holds every parameter, so a changed recipe builds a new file.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np
import soundfile

CACHE_DIR = Path(tempfile.gettempdir()) / "whisper-hyperpod-test-audio"


def _cached(name: str) -> tuple[Path, bool]:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = CACHE_DIR / name
    return path, path.exists()


def _write_flac(path: Path, rate: int, blocks: object) -> Path:
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")  # one per writer: xdist workers build in parallel
    with soundfile.SoundFile(partial, "w", rate, 1, format="FLAC", subtype="PCM_16") as out:
        for block in blocks:  # type: ignore[attr-defined]
            out.write(block)
    partial.replace(path)  # atomic: an interrupted build never leaves a short file behind
    return path


def tone_flac(minutes: int, rate: int = 22050) -> Path:
    """``minutes`` of a 440 Hz tone at -23 dBFS RMS, mono FLAC (every 30 s window is non-silent)."""
    path, ready = _cached(f"tone-{minutes}min-{rate}hz.flac")
    if ready:
        return path
    t = np.arange(rate * 60) / rate  # a whole number of 440 Hz periods per minute: seamless blocks
    minute = (0.1 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    return _write_flac(path, rate, (minute for _ in range(minutes)))


def sparse_speech_flac(speech: Path, minutes: int, every_minutes: int, noise_rms: float = 3e-4) -> Path:
    """``minutes`` of a quiet noise floor (``noise_rms``, below the gateway's 1e-3 silence threshold)
    with the clip ``speech`` (mono, any rate soundfile reads) at the start of every ``every_minutes``-th
    minute; mono FLAC at the clip's rate.

    The noise floor makes the file as large and as costly to decode as speech of the same length
    (a FLAC of digital silence would be a few hundred kB), while the model only sees the windows
    that hold the clip.
    """
    clip, rate = soundfile.read(speech, dtype="float32")
    digest = hashlib.sha256(clip.tobytes()).hexdigest()[:12]  # a changed clip builds a new file
    path, ready = _cached(f"speech-{digest}-{minutes}min-every{every_minutes}-{noise_rms:g}-{rate}hz.flac")
    if ready:
        return path
    rng = np.random.default_rng(0)
    half_width = noise_rms * np.sqrt(3.0)  # uniform noise on [-a, a] has RMS a / sqrt(3)

    def blocks():  # noqa: ANN202
        for i in range(minutes):
            block = rng.uniform(-half_width, half_width, rate * 60).astype(np.float32)
            if i % every_minutes == 0:
                block[: len(clip)] += clip[: len(block)]
            yield block

    return _write_flac(path, rate, blocks())


def without_total_samples(flac: bytes) -> bytes:
    """The FLAC with STREAMINFO's 36-bit total-samples field zeroed: "unknown" (RFC 9639 §8.2), as
    streaming encoders write it, so the container declares no duration."""
    out = bytearray(flac)
    assert out[:4] == b"fLaC" and out[4] & 0x7F == 0  # the first metadata block is STREAMINFO
    out[8 + 13] &= 0xF0
    out[8 + 14 : 8 + 18] = b"\0\0\0\0"
    return bytes(out)
