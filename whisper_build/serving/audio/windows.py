"""Split long audio into ≤ 30 s windows as it streams in, cutting at the quietest point near each boundary.

Whisper's encoder sees at most 30 s (``N_SAMPLES = 480000`` at 16 kHz, openai/whisper audio.py);
longer audio must be cut. Cutting mid-word loses or garbles that word, so each cut is placed at
the lowest-energy point of the last ``search_seconds`` before the limit (the same idea as vLLM
PR #19597, which cuts at the lowest-energy point of the last second of each chunk).
Docs: docs/serving.md, "One transcript per audio".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio.decode import SAMPLE_RATE
from whisper_build.serving.contract import WINDOW_SECONDS
from whisper_build.serving.silence import CUT_FRAME, CUT_HOP, GATEWAY_SILENCE_RMS, frame_rms, gateway_is_silent

_SMOOTH_FRAMES = 20  # 200 ms moving average: prefer the middle of a pause, not a stop consonant


@dataclass(frozen=True)
class Window:
    """A slice ``[start, end)`` of the 16 kHz samples; ``start_s``/``end_s`` in seconds."""

    start: int
    end: int

    @property
    def start_s(self) -> float:
        """Start time in seconds."""
        return self.start / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        """End time in seconds."""
        return self.end / SAMPLE_RATE


def _quietest_cut(samples: npt.NDArray[np.float32], lo: int, hi: int) -> int:
    """Sample index in ``[lo, hi]`` at the centre of the quietest 200 ms stretch."""
    rms = frame_rms(samples[lo:hi])
    k = min(_SMOOTH_FRAMES, len(rms))
    smooth = np.convolve(rms, np.ones(k) / k, mode="valid")
    # Ties (e.g. digital silence, a steady tone) go to the latest candidate: longer windows, fewer cuts.
    # Levels within 1e-6 of the quietest count as ties: they differ only by float rounding, which
    # differs between CPUs' SIMD paths, so every machine cuts a steady tone at the same sample.
    quietest = float(smooth.min())
    best = int(np.flatnonzero(smooth <= quietest + 1e-6 * quietest)[-1])
    return lo + best * CUT_HOP + (k - 1) * CUT_HOP // 2 + CUT_FRAME // 2


def iter_windows(
    chunks: Iterable[npt.NDArray[np.float32]],
    window_seconds: float = WINDOW_SECONDS,
    search_seconds: float = 5.0,
) -> Iterator[tuple[Window, npt.NDArray[np.float32]]]:
    """Cut a stream of 16 kHz mono chunks into consecutive, non-overlapping windows as it flows.

    Every window is at most ``window_seconds`` long; when more audio follows, each cut is placed
    at the quietest point of the last ``search_seconds`` of the window. The windows tile the
    input exactly (no sample is lost or repeated), and the cuts are the same whatever the chunk
    sizes. At most one window plus one chunk is buffered, so memory does not grow with the
    stream's length.

    Args:
        chunks: float32 ``[n_i]`` arrays at 16 kHz, in order (e.g. :meth:`AudioStream.chunks`).
        window_seconds: maximum window length in seconds (> 0, Whisper: 30).
        search_seconds: how far back from the limit a cut may move (0 ≤ x < window_seconds).

    Yields:
        ``(window, samples)``: the window's absolute sample range in the stream (its start offset
        is the true start time of its text) and its samples, float32 ``[window.end - window.start]``
        (a view; copy it to keep it beyond the next window).

    Raises:
        ValueError: invalid ``window_seconds`` / ``search_seconds``.
    """
    if window_seconds <= 0:
        raise ValueError(f"window_seconds must be > 0, got {window_seconds}")
    if not 0 <= search_seconds < window_seconds:
        raise ValueError(f"search_seconds must be in [0, window_seconds), got {search_seconds}")
    limit = int(window_seconds * SAMPLE_RATE)
    search = int(search_seconds * SAMPLE_RATE)
    offset = 0  # stream index of buffer[0]
    buffer = np.zeros(0, dtype=np.float32)
    pending: list[npt.NDArray[np.float32]] = []
    pending_n = 0
    for chunk in chunks:
        pending.append(chunk)
        pending_n += len(chunk)
        if len(buffer) + pending_n <= limit:
            continue  # not yet a full window: keep the chunks, copy nothing
        buffer = np.concatenate([buffer, *pending])
        pending, pending_n = [], 0
        start = 0
        while len(buffer) - start > limit:
            hi = start + limit
            lo = hi - search
            cut = _quietest_cut(buffer, lo, hi) if search >= CUT_FRAME else hi
            cut = min(max(cut, lo + 1), hi)
            yield Window(offset + start, offset + cut), buffer[start:cut]
            start = cut
        offset += start
        buffer = buffer[start:].copy()  # ≤ one window: release the concatenation
    if pending:  # a clip shorter than a window in one chunk (the common request) is not copied
        buffer = pending[0] if len(pending) == 1 and not len(buffer) else np.concatenate([buffer, *pending])
    if len(buffer):
        yield Window(offset, offset + len(buffer)), buffer


def split_windows(
    samples: npt.NDArray[np.float32],
    window_seconds: float = WINDOW_SECONDS,
    search_seconds: float = 5.0,
) -> list[Window]:
    """Cover ``samples`` (16 kHz mono, all in memory) with windows; see :func:`iter_windows`.

    Args:
        samples: shape ``[n]``, 16 kHz.
        window_seconds: maximum window length in seconds (> 0, Whisper: 30).
        search_seconds: how far back from the limit a cut may move (0 ≤ x < window_seconds).

    Returns: windows in order; ``[]`` for empty input.

    Raises:
        ValueError: invalid ``window_seconds`` / ``search_seconds``.
    """
    return [window for window, _ in iter_windows([samples], window_seconds, search_seconds)]


def is_silent(samples: npt.NDArray[np.float32], threshold_rms: float = GATEWAY_SILENCE_RMS) -> bool:
    """True when no 25 ms frame of ``samples`` is louder than ``threshold_rms`` (rule 1 of :mod:`whisper_build.serving.silence`).

    Windows that are silent by this test are not sent to the model.
    """
    return gateway_is_silent(samples, threshold_rms)
