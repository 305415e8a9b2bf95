"""Silence, in one place: frame RMS levels in dBFS and the thresholds of the three rules that use them.

Levels are ``20 · log10(rms)`` relative to full scale (``1e-3`` RMS is -60 dBFS; speech sits around
-30 to -15, quiet speech down to -40, room noise below -60). Whisper invents text ("Thank you.") for
silence, hence: (1) the gateway drops a window none of whose 25 ms frames (:data:`CUT_FRAME` /
:data:`CUT_HOP`, the frames that also place cuts) is louder than :data:`GATEWAY_SILENCE_RMS`
(:func:`whisper_build.serving.audio.is_silent`); (2) an engine skips a window whose whole level is
below :data:`SILENCE_DBFS` (``silence_dbfs``; :func:`whisper_build.serving.engines.features.is_silent`);
(3) the decoding rules read 20 ms frames (:data:`TIMESTAMP_FRAME`) against the same ``silence_dbfs``
to move a segment's start past leading silence and to tell a window that ends mid-speech.
Entry points: :func:`frame_dbfs`, :func:`window_dbfs`, :func:`gateway_is_silent`.
Docs: docs/gateway.md, "Quality signals on audio that is not whole speech".
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CUT_FRAME",
    "CUT_HOP",
    "GATEWAY_SILENCE_RMS",
    "SILENCE_DBFS",
    "TIMESTAMP_FRAME",
    "frame_dbfs",
    "frame_rms",
    "gateway_is_silent",
    "level_dbfs",
    "window_dbfs",
]

CUT_FRAME = 400
"""25 ms at 16 kHz: the gateway's energy frames (rule 1 and the cut search)."""
CUT_HOP = 160
"""10 ms hop between the gateway's frames (Whisper's mel hop length)."""
TIMESTAMP_FRAME = 320
"""20 ms at 16 kHz (one Whisper timestamp step): the decoding rules' frames (rule 3)."""

GATEWAY_SILENCE_RMS = 1e-3
"""Rule 1's default threshold, RMS of a 25 ms frame (-60 dBFS)."""
SILENCE_DBFS = -55.0
"""Rules 2 and 3's default threshold in dBFS (model-config parameter ``silence_dbfs``)."""

_FLOOR_MEAN_SQUARE = 1e-20
"""Mean square that 20 ms frames of digital silence are given (-200 dBFS) so they have a level."""


def level_dbfs(rms: float) -> float:
    """``20 · log10(rms)``; ``-inf`` for 0."""
    return 20.0 * float(np.log10(rms)) if rms > 0 else float("-inf")


def frame_rms(
    samples: npt.NDArray[np.floating[Any]], frame: int = CUT_FRAME, hop: int = CUT_HOP
) -> npt.NDArray[np.float64]:
    """RMS of ``frame``-sample frames every ``hop`` samples, shape ``[max(1, 1 + (n - frame) // hop)]``.

    Audio shorter than one frame is one frame (``[0.0]`` when empty).
    """
    if len(samples) < frame:
        energy = np.mean(np.square(samples, dtype=np.float64)) if len(samples) else 0.0
        return np.array([np.sqrt(energy)])
    frames = np.lib.stride_tricks.sliding_window_view(samples, frame)[::hop]
    mean_square: npt.NDArray[np.float64] = np.mean(np.square(frames, dtype=np.float64), axis=1)
    return np.sqrt(mean_square)


def frame_dbfs(samples: npt.NDArray[np.floating[Any]], frame: int = TIMESTAMP_FRAME) -> npt.NDArray[np.float64]:
    """Level in dBFS of each whole, non-overlapping ``frame``-sample frame, shape ``[len(samples) // frame]``.

    A frame of digital silence is -200 dBFS; a partial last frame is left out.
    """
    frames = samples[: samples.size // frame * frame].reshape(-1, frame).astype(np.float64)
    return np.asarray(10 * np.log10(np.maximum((frames**2).mean(axis=1), _FLOOR_MEAN_SQUARE)))


def window_dbfs(samples: npt.NDArray[np.floating[Any]]) -> float:
    """Level of a whole window in dBFS; ``-inf`` for an empty or all-zero window."""
    if samples.size == 0:
        return float("-inf")
    return level_dbfs(float(np.sqrt(np.mean(np.square(samples, dtype=np.float64)))))


def gateway_is_silent(samples: npt.NDArray[np.floating[Any]], threshold_rms: float = GATEWAY_SILENCE_RMS) -> bool:
    """Rule 1: True when no 25 ms frame of ``samples`` is louder than ``threshold_rms`` (empty: True)."""
    if len(samples) == 0:
        return True
    return bool(np.max(frame_rms(samples)) < threshold_rms)
