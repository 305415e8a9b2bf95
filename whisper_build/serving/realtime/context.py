"""What a live decode hears and reads before the current turn (docs/gateway.md, "Live transcription").

Every decode of a turn (updates and the final one) is one window: as many whole earlier turns as fit in
Whisper's 30 s, then the turn so far. Their transcripts and the turn's confirmed words are the forced
decoder prefix (``DecodePrompt.prefix``), so the model hears and reads what came before, as in the file
endpoint's 30 s windows, and returns only the turn's next words; older text is the previous-text prompt.
Earlier turns' audio is used only where the decode language is fixed (the session's ``language``, or an
English-only model): a detector hearing an earlier turn could otherwise take its language.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.realtime.timeline import RATE, seconds_to_samples

__all__ = ["CONTEXT_SECONDS", "WINDOW_SAMPLES", "TurnContext"]

WINDOW_SAMPLES = 30 * RATE
"""Whisper's window: earlier turns and the current one together stay within it."""
CONTEXT_SECONDS = 30.0
"""Most earlier turns' audio in front of a decode (updates and final alike; measured in docs/benchmarks.md, "Live
sessions": 10 s in front of updates, or none, gave 13.3 % and 13.6 % WER against 12.0 % with all that fits)."""
PROMPT_CHARS = 400
"""Characters of older text (the client's prompt, then earlier transcripts) sent as the previous-text prompt."""
KEPT_TURNS = 32
"""Earlier turns remembered (a 30 s window holds fewer: turns keep at least the VAD's 100 ms of speech)."""


@dataclass(frozen=True)
class _Turn:
    audio: npt.NDArray[np.float32]  # [samples] at 16 kHz
    text: str


class TurnContext:
    """The session's completed turns with text, newest last, and the window each decode is given."""

    def __init__(self) -> None:
        self.turns: list[_Turn] = []

    def add(self, audio: npt.NDArray[np.float32], text: str) -> None:
        """Remember a completed turn (``audio``: its 16 kHz samples); a turn without text is left out."""
        if text.strip():
            self.turns = [*self.turns, _Turn(audio, text.strip())][-KEPT_TURNS:]

    def window(
        self, turn: npt.NDArray[np.float32], confirmed: list[str], prompt: str | None, language: str | None,
        context_seconds: float,
    ) -> tuple[npt.NDArray[np.float32], DecodePrompt]:  # fmt: skip
        """The audio and prompt of one decode of the current turn.

        Args:
            turn: the turn's audio so far, 16 kHz (≤ ``max_turn_seconds`` < 30 s).
            confirmed: its words sent as deltas; forced, so the decode returns the words after them.
            prompt: the client's ``transcription.prompt``.
            language: the decode language (``None``: the engine detects it).
            context_seconds: most earlier turns' audio in front (0 where the decode language is not fixed).

        Returns:
            ``(audio, prompt)``: the earlier turns that fit (whole) and ``turn``, and a prompt whose
            prefix is their transcripts and ``confirmed``, its previous text the client's prompt and the
            transcripts before them (the last :data:`PROMPT_CHARS` characters).
        """
        room, heard = min(WINDOW_SAMPLES - len(turn), seconds_to_samples(context_seconds)), 0
        while heard < len(self.turns) and len(self.turns[-1 - heard].audio) <= room:
            room -= len(self.turns[-1 - heard].audio)
            heard += 1
        earlier, context = self.turns[: len(self.turns) - heard], self.turns[len(self.turns) - heard :]
        older = " ".join([(prompt or "").strip(), *(t.text for t in earlier)])[-PROMPT_CHARS:].strip()
        prefix = " ".join([*(t.text for t in context), *confirmed]).strip()
        audio = np.concatenate([*(t.audio for t in context), turn]) if context else turn
        return audio, DecodePrompt(previous_text=older, language=language, prefix=prefix)
