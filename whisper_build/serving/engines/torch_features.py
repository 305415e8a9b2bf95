"""Whisper log-Mel features in PyTorch, on the audio's device (the ``torch`` engine's GPU log-Mel).

openai/whisper ``audio.py`` ``log_mel_spectrogram``: 400-sample Hann STFT, 160-sample hop, Slaney
Mel filters, ``log10`` floored at the window maximum − 8, ``(x + 4) / 4``.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

__all__ = ["HOP_LENGTH", "N_FFT", "fill_windows", "log_mel_torch"]

N_FFT = 400
"""STFT size (25 ms at 16 kHz), openai/whisper ``audio.py``."""
HOP_LENGTH = 160
"""STFT hop (10 ms), openai/whisper ``audio.py``."""


def log_mel_torch(audio: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """Whisper log-Mel features of 30 s windows, on ``audio``'s device.

    Args:
        audio: float32 ``[B, 480000]`` (16 kHz, zero-padded to 30 s).
        filters: float32 ``[n_mels, 201]`` Slaney Mel filters.

    Returns:
        float32 ``[B, n_mels, 3000]``: ``log10`` power, floored at its window maximum − 8, then
        ``(x + 4) / 4`` (openai/whisper ``log_mel_spectrogram``).
    """
    window = torch.hann_window(N_FFT, device=audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.amax(dim=(1, 2), keepdim=True) - 8.0)
    return (log_spec + 4.0) / 4.0


def fill_windows(host: torch.Tensor, audio: list[npt.NDArray[np.float32]]) -> torch.Tensor:
    """``audio`` (1-D float32 windows) into ``host`` (``[len(audio), N]`` float32 CPU), cut or zero-padded to ``N``.

    Returns ``host``. Raises ValueError: a window that is not 1-D.
    """
    for row, window in zip(host.numpy(), audio, strict=True):
        if window.ndim != 1:
            raise ValueError(f"audio window must be 1-D, got shape {window.shape}")
        n = min(len(window), row.shape[0])
        row[:n] = window[:n]
        row[n:] = 0.0
    return host
