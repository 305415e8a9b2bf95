"""Whisper log-Mel features in PyTorch, on the audio's device (the ``torch`` engine's GPU log-Mel).

openai/whisper ``audio.py`` ``log_mel_spectrogram``: 400-sample Hann STFT, 160-sample hop, Slaney
Mel filters, ``log10`` floored at the window maximum − 8, ``(x + 4) / 4``; :class:`PinnedMel` moves
host windows to the device through two pinned slots.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch
from transformers.audio_utils import mel_filter_bank

from whisper_build.serving.engines.features import N_SAMPLES, SAMPLE_RATE

__all__ = ["HOP_LENGTH", "N_FFT", "PinnedMel", "fill_windows", "log_mel_torch"]

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


class PinnedMel:
    """Log-Mel features ``[b, n_mels, 3000]`` on ``device`` (in ``dtype``) from host windows of 16 kHz audio.

    The windows go through pinned host memory for up to ``max_batch`` windows, in two slots: the host
    fills one while the other's copy to the device may still run (:meth:`staged`). Slaney Mel filters
    of ``num_mel_bins`` bands (openai/whisper ``mel_filters``).
    """

    def __init__(self, num_mel_bins: int, max_batch: int, device: torch.device, dtype: torch.dtype) -> None:
        filters = mel_filter_bank(
            num_frequency_bins=1 + N_FFT // 2, num_mel_filters=num_mel_bins, min_frequency=0.0,
            max_frequency=SAMPLE_RATE / 2, sampling_rate=SAMPLE_RATE, norm="slaney", mel_scale="slaney",
        )  # fmt: skip
        self.filters = torch.from_numpy(np.ascontiguousarray(filters.T, dtype=np.float32)).to(device)
        self._device = device
        self._dtype = dtype
        cuda = device.type == "cuda"
        # two pinned slots: the host fills one while the other's copy to the device may still run
        self._host_audio = torch.zeros((2, max_batch, N_SAMPLES), dtype=torch.float32, pin_memory=cuda)
        self._slot = 0
        self._copied: list[torch.cuda.Event | None] = [None, None]

    def _fill(self, slot: int, audio: list[npt.NDArray[np.float32]]) -> torch.Tensor:
        """``audio`` zero-padded to 30 s into pinned slot ``slot`` (``[b, 480000]`` float32 view)."""
        return fill_windows(self._host_audio[slot, : len(audio)], audio)

    def staged(self, audio: list[npt.NDArray[np.float32]]) -> torch.Tensor:
        """Features on the current stream (GPU), no host wait on the copy: the next slot in turn."""
        slot = self._slot = 1 - self._slot
        copied = self._copied[slot]
        if copied is not None:
            copied.synchronize()  # the slot's last copy to the device has finished reading it
        batch = self._fill(slot, audio).to(self._device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        self._copied[slot] = event
        return log_mel_torch(batch, self.filters).to(self._dtype)

    def features(self, audio: list[npt.NDArray[np.float32]]) -> torch.Tensor:
        """Features on the current stream, blocking on the copy."""
        if self._copied[0] is not None:
            self._copied[0].synchronize()
        batch = self._fill(0, audio).to(self._device)  # blocking: the slot is refilled by the next call
        return log_mel_torch(batch, self.filters).to(self._dtype)
