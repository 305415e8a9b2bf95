"""A live session's audio on its timeline: the samples it holds, and whether the client sends ahead of real time.

:class:`SessionBuffer` holds the session audio not yet committed or trimmed, indexed by session sample
(:mod:`.timeline`); :class:`ClientPace` compares the audio received with the wall time since the first
append's audio was captured. Used by :class:`~.session.TranscriptionSession`.
Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from whisper_build.serving.realtime.limits import AHEAD_TOLERANCE
from whisper_build.serving.realtime.timeline import samples_to_seconds

__all__ = ["ClientPace", "SessionBuffer"]


class SessionBuffer:
    """Session audio (16 kHz float32) from session sample :attr:`start` on, not yet committed or trimmed."""

    def __init__(self) -> None:
        self.samples: npt.NDArray[np.float32] = np.zeros(0, dtype=np.float32)
        self.start = 0

    @property
    def end(self) -> int:
        """The session sample after the last one held."""
        return self.start + len(self.samples)

    def extend(self, samples: npt.NDArray[np.float32]) -> None:
        """Append ``samples`` (the session's next audio)."""
        self.samples = np.concatenate([self.samples, samples])

    def span(self, start: int, end: int) -> npt.NDArray[np.float32]:
        """A copy of session samples ``start`` to ``end`` (exclusive), both within the buffer."""
        return self.samples[start - self.start : end - self.start].copy()

    def keep_last(self, count: int) -> None:
        """Drop all but the last ``count`` samples."""
        if len(self.samples) > count:
            self.start += len(self.samples) - count
            self.samples = self.samples[-count:]

    def drop_before(self, end: int) -> None:
        """Drop the samples before session sample ``end`` (a committed turn's)."""
        self.samples = self.samples[end - self.start :]
        self.start = end

    def clear(self) -> None:
        """Drop every sample held; session samples go on counting from :attr:`end`."""
        self.start = self.end
        self.samples = np.zeros(0, dtype=np.float32)


class ClientPace:
    """Whether the client is ahead: the audio it sent runs ahead of the wall time since its first append.

    The first append's audio was captured over its own length before it arrived; a lead above
    :data:`~.limits.AHEAD_TOLERANCE` seconds (chunking, network jitter) is ahead.
    """

    def __init__(self) -> None:
        self.received = 0  # samples of every append so far
        self.first_received: float | None = None  # clock when the first append's audio had been captured
        self.ahead = False

    def note(self, count: int, received_at: float) -> None:
        """An append of ``count`` samples arrived at ``received_at`` (clock seconds): update :attr:`ahead`."""
        self.received += count
        if self.first_received is None:
            self.first_received = received_at - samples_to_seconds(count)
        lead = samples_to_seconds(self.received) - (received_at - self.first_received)
        self.ahead = lead > AHEAD_TOLERANCE
