"""Audio windows → Whisper log-Mel features, and the energy check that keeps silence from decoding.

The silence threshold and level are :mod:`whisper_build.serving.silence` (rule 2).

Features are computed on the CPU with faster-whisper's numpy ``FeatureExtractor`` (the same STFT,
Mel filters and ``log10 / max-8 / (x+4)/4`` normalisation as openai/whisper ``audio.py``), so both
engines see identical inputs. Each window is zero-padded *as audio* to 30 s before the Mel
transform, as openai/whisper does (``log_mel_spectrogram(audio, padding=N_SAMPLES)`` then
``pad_or_trim(mel, N_FRAMES)``), which is what the released models were trained on.
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving.silence import SILENCE_DBFS, window_dbfs

__all__ = [
    "N_FRAMES",
    "N_SAMPLES",
    "SAMPLE_RATE",
    "SILENCE_DBFS",
    "is_silent",
    "log_mel_batch",
    "pad_or_trim_audio",
    "rms_dbfs",
]

SAMPLE_RATE = 16_000
"""Whisper's input sample rate in Hz (openai/whisper ``audio.py`` ``SAMPLE_RATE``)."""

N_SAMPLES = 30 * SAMPLE_RATE
"""Samples in one 30 s window (``N_SAMPLES = 480000``)."""

N_FRAMES = 3000
"""Mel frames per window: ``N_SAMPLES // HOP_LENGTH`` with a 160-sample (10 ms) hop."""


def pad_or_trim_audio(audio: npt.NDArray[np.floating[Any]], length: int = N_SAMPLES) -> npt.NDArray[np.float32]:
    """Zero-pad at the end or cut a 1-D float32 window to ``length`` samples.

    Raises:
        ValueError: ``audio`` is not 1-D.
    """
    if audio.ndim != 1:
        raise ValueError(f"audio window must be 1-D, got shape {audio.shape}")
    if audio.shape[0] >= length:
        return np.ascontiguousarray(audio[:length], dtype=np.float32)
    return np.pad(audio.astype(np.float32, copy=False), (0, length - audio.shape[0]))


def rms_dbfs(audio: npt.NDArray[np.floating[Any]]) -> float:
    """RMS level of a window in dBFS (full scale = 1.0); ``-inf`` for an empty or all-zero window."""
    return window_dbfs(audio)


def is_silent(audio: npt.NDArray[np.floating[Any]], threshold_dbfs: float = SILENCE_DBFS) -> bool:
    """True when the window's RMS level is below ``threshold_dbfs`` (rule 2 of :mod:`whisper_build.serving.silence`)."""
    return rms_dbfs(audio) < threshold_dbfs


@lru_cache(maxsize=4)
def _extractor(n_mels: int) -> Any:  # faster_whisper.feature_extractor.FeatureExtractor, imported lazily
    from faster_whisper.feature_extractor import FeatureExtractor

    return FeatureExtractor(feature_size=n_mels)


def log_mel_batch(audio: Sequence[npt.NDArray[np.float32]], n_mels: int) -> npt.NDArray[np.float32]:
    """Log-Mel features of a batch of ≤ 30 s windows, each padded to exactly 30 s.

    Args:
        audio: 1-D float32 arrays, 16 kHz mono, values in [-1, 1]; longer than 30 s is cut.
        n_mels: 80 (tiny … large-v2) or 128 (large-v3, large-v3-turbo), from the model config.

    Returns:
        float32 array of shape ``[len(audio), n_mels, 3000]``.

    Raises:
        ValueError: ``n_mels`` is not 80 or 128, or a window is not 1-D.
    """
    if n_mels not in (80, 128):
        raise ValueError(f"n_mels must be 80 or 128 (Whisper models), got {n_mels}")
    extractor = _extractor(n_mels)
    batch = np.empty((len(audio), n_mels, N_FRAMES), dtype=np.float32)
    for i, window in enumerate(audio):
        # padding=0: the window is already 30 s; the STFT yields N_FRAMES + 1 frames, drop the last.
        batch[i] = extractor(pad_or_trim_audio(window), padding=0)[:, :N_FRAMES]
    return batch
