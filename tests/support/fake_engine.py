"""In-memory :class:`whisper_build.serving.engines.base.WhisperEngine` for decoding-layer tests.

Text tokens are words: :meth:`ScriptedEngine.token` gives each distinct string an id below
``EOT``; ``TS(t)`` is the timestamp token of ``t`` seconds. A script decides what each window
decodes to, given its samples, prompt and temperature.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from whisper_build.serving.engines.base import EngineCapabilities, Hypothesis, WordTiming
from whisper_build.serving.prompt import DecodePrompt

EOT = 1000
TIMESTAMP_BEGIN = 1001


def ts(seconds: float) -> int:
    """Timestamp token id of ``seconds`` (0.02 s steps)."""
    return TIMESTAMP_BEGIN + round(seconds / 0.02)


@dataclass
class Decoded:
    """A scripted decode: ``pieces`` are strings (text tokens) or floats (timestamps)."""

    pieces: list[str | float]
    sum_logprob: float = 0.0
    no_speech_prob: float | None = 0.0


Script = Callable[[np.ndarray, DecodePrompt, float], Decoded]


@dataclass
class ScriptedEngine:
    """Records every ``generate`` call: ``(windows, prompts, penalties, timestamps, temperature)``."""

    script: Script
    capabilities: EngineCapabilities = field(default_factory=lambda: EngineCapabilities(True, True, True))
    multilingual: bool = True
    name: str = "fake"
    fail: Exception | None = None
    eot: int = EOT
    timestamp_begin: int = TIMESTAMP_BEGIN
    calls: list[tuple[int, list[DecodePrompt], list[float], bool, float]] = field(default_factory=list)
    vocab: list[str] = field(default_factory=list)
    detect: Callable[[np.ndarray], str | None] = lambda window: None
    """Language of a window for ``detect_language`` (default: cannot tell)."""
    detections: list[list[np.ndarray]] = field(default_factory=list)
    """The windows of every ``detect_language`` call."""

    def detect_language(self, audio: Sequence[np.ndarray]) -> list[str | None]:
        self.detections.append(list(audio))
        return [self.detect(window) for window in audio]

    def token(self, text: str) -> int:
        if text not in self.vocab:
            self.vocab.append(text)
        return self.vocab.index(text)

    def decode_text(self, tokens: Sequence[int]) -> str:
        return "".join(self.vocab[t] for t in tokens if t < EOT)

    def generate(
        self,
        audio: Sequence[np.ndarray],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
        *,
        timestamps: bool,
        temperature: float,
        words: bool = False,
    ) -> list[Hypothesis]:
        """``words`` (``capabilities.aligns_in_decode``): :meth:`align`'s words in ``Hypothesis.words``."""
        self.calls.append((len(audio), list(prompts), list(repetition_penalty), timestamps, temperature))
        if self.fail:
            raise self.fail
        out = []
        for window, prompt in zip(audio, prompts, strict=True):
            decoded = self.script(window, prompt, temperature)
            tokens = [ts(p) if isinstance(p, float) else self.token(p) for p in decoded.pieces]
            aligned = self.align([window], [prompt], [[t for t in tokens if t < EOT]])[0] if words else None
            out.append(Hypothesis(tokens, decoded.sum_logprob, decoded.no_speech_prob, prompt.language, aligned))
        return out

    def align(
        self, audio: Sequence[np.ndarray], prompts: Sequence[DecodePrompt], text_tokens: Sequence[Sequence[int]]
    ) -> list[list[WordTiming]]:
        """One word per token, 0.5 s each from 0 (so that clamping into segments is visible)."""
        return [
            [WordTiming(self.vocab[t], 0.5 * k, 0.5 * k + 0.4, 0.9, 1) for k, t in enumerate(tokens)]
            for tokens in text_tokens
        ]
