"""What the engine's in-flight scheduler takes: a window, its priority and deadline, and its queue entry.

No torch here: a serving front (Triton's decoupled model) builds :class:`Window` objects and reads
:data:`PRIORITY_LEVELS` without loading an engine. Docs: docs/engines.md, "In-flight batching (`torch` engine)".
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from whisper_build.serving.engines.base import Hypothesis
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["PRIORITY_LEVELS", "DeadlineExceeded", "Entry", "Priority", "Window"]

Priority = Literal["live", "sync", "bulk"]
PRIORITY_LEVELS: tuple[Priority, ...] = ("live", "sync", "bulk")
"""Waiting-queue order, first served first; FIFO within a level."""


class DeadlineExceeded(TimeoutError):
    """A window waited past its deadline before a row was free; it was not decoded."""


@dataclass(frozen=True)
class Window:
    """One 30 s window to decode.

    Attributes:
        audio: float32 16 kHz samples, 1-D, ≤ 30 s (zero-padded to 30 s).
        prompt: the decoder prompt (previous text, language, task).
        temperature: 0 = greedy; > 0 one sample (a fallback re-decode is a new submission).
        max_new: most new tokens (``None`` = the engine's; cut to Whisper's 448-token context).
        priority: one of :data:`PRIORITY_LEVELS`.
        deadline: ``time.monotonic()`` seconds by which it must have started decoding (``None`` = none).
        timestamps: predict timestamp tokens.
        repetition_penalty: 1 = off.
        words: align the decoded text before the row is freed (:attr:`Hypothesis.words`, from the
            row's cross-attention keys/values; ``torch`` engine).
    """

    audio: npt.NDArray[np.float32]
    prompt: DecodePrompt
    temperature: float = 0.0
    max_new: int | None = None
    priority: Priority = "sync"
    deadline: float | None = None
    timestamps: bool = False
    repetition_penalty: float = 1.0
    words: bool = False

    def check(self) -> None:
        """Raises ValueError: unknown priority, audio not 1-D, or ``max_new`` < 1."""
        if self.priority not in PRIORITY_LEVELS:
            raise ValueError(f"priority: one of {', '.join(PRIORITY_LEVELS)}, got {self.priority!r}")
        if np.ndim(self.audio) != 1:
            raise ValueError(f"audio window must be 1-D, got shape {np.shape(self.audio)}")
        if self.max_new is not None and self.max_new < 1:
            raise ValueError(f"max_new: at least 1, got {self.max_new}")


@dataclass(eq=False)
class Entry:
    """A submitted window, its future and, once it decodes, its row's bookkeeping."""

    window: Window
    future: Future[Hypothesis]
    language: str | None = None
    fed: int = 0  # the position the next step feeds
    joined: int = 0  # steps launched before this row joined
    full: bool = False
