"""The one interface every Whisper engine implements (its parameters: :mod:`.params`).

The Triton model (``model_repository/whisper/1/model.py``) builds :class:`~.params.EngineParams` from the
``parameters`` of its ``config.pbtxt`` and calls :func:`whisper_build.serving.engines.factory.load_engine`;
the concrete runtime module (CTranslate2, TensorRT-LLM or PyTorch) is imported only then, so the others
need not be installed.
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt

from whisper_build.serving.contract import EngineKind
from whisper_build.serving.prompt import DecodePrompt

if TYPE_CHECKING:
    import tokenizers

__all__ = [
    "NoWordAlignment",
    "TokenizerText",
    "EngineCapabilities",
    "EngineKind",
    "Hypothesis",
    "WhisperEngine",
    "WordTiming",
]


@dataclass(frozen=True)
class Hypothesis:
    """One decoded window, as the decoding layer needs it.

    Attributes:
        tokens: generated ids after the prompt, up to (not including) ``<|endoftext|>``; text
            tokens (``< eot``) and, when timestamps were asked, timestamp tokens (``>= timestamp_begin``).
        sum_logprob: sum of the log-probabilities of ``tokens`` and the end-of-text token (natural log).
        no_speech_prob: probability of ``<|nospeech|>`` at the ``<|startoftranscript|>`` position;
            ``None`` when the engine cannot give it.
        language: language code the window was decoded in (multilingual models), else ``None``.
        words: word timings of the text tokens of ``tokens``, in order, from an engine that aligns
            while decoding (``capabilities.aligns_in_decode``, asked with ``generate(words=True)``);
            ``None`` when not aligned.
    """

    tokens: list[int]
    sum_logprob: float
    no_speech_prob: float | None
    language: str | None = None
    words: list[WordTiming] | None = None


@dataclass(frozen=True)
class WordTiming:
    """One word aligned to the audio (cross-attention alignment, as in openai/whisper ``timing.py``).

    Attributes:
        word: the word's text with its leading space (``" hello"``), punctuation merged in.
        start: start in seconds from the window's start.
        end: end in seconds from the window's start (``>= start``).
        probability: mean token probability of the word.
        tokens: how many text tokens the word spans (words cover the aligned tokens in order).
    """

    word: str
    start: float
    end: float
    probability: float
    tokens: int


@dataclass(frozen=True)
class EngineCapabilities:
    """What an engine can do beyond greedy/beam text decoding.

    Attributes:
        timestamps: predicts Whisper timestamp tokens (prompt without ``<|notimestamps|>``).
        word_timestamps: implements :meth:`WhisperEngine.align`.
        sampling: really samples at temperature > 0 (needed for the temperature fallback).
        aligns_in_decode: ``generate(words=True)`` fills :attr:`Hypothesis.words` from the decode's
            own cross-attention keys/values (no second encoder pass); the decoding layer then uses
            those words and does not call :meth:`WhisperEngine.align`.
    """

    timestamps: bool
    word_timestamps: bool
    sampling: bool
    aligns_in_decode: bool = False


class WhisperEngine(Protocol):
    """Decodes a batch of ≤ 30 s windows in one go.

    :meth:`generate` (and :meth:`align`) are what the decoding layer
    (:func:`whisper_build.serving.triton_model.decoding.decode_windows`) runs, for the Triton model,
    the benchmarks and the engine-build smoke test alike.
    """

    name: str
    """Engine kind (``ctranslate2``, ``tensorrt_llm``, ``torch``), for error messages."""
    capabilities: EngineCapabilities
    multilingual: bool
    eot: int
    """Id of ``<|endoftext|>``; ids ``< eot`` are text tokens."""
    timestamp_begin: int
    """Id of ``<|0.00|>``."""

    def generate(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
        *,
        timestamps: bool,
        temperature: float,
        words: bool = False,
    ) -> list[Hypothesis]:
        """Decode every window once (no silence gate, no fallback: the decoding layer does those).

        Args:
            audio: 1-D float32 arrays, 16 kHz mono, ≤ 480 000 samples each.
            prompts: one decoder prompt per window.
            repetition_penalty: one value > 0 per window (1.0 = off).
            timestamps: predict timestamp tokens (only when ``capabilities.timestamps``).
            temperature: 0 = the configured beam search / greedy; > 0 = sampling at this
                temperature (only when ``capabilities.sampling``).
            words: also align each decode's text tokens into :attr:`Hypothesis.words` (only when
                ``capabilities.aligns_in_decode``; other engines ignore it and leave ``words`` ``None``).

        Returns:
            One :class:`Hypothesis` per window, in order.
        """
        ...

    def detect_language(self, audio: Sequence[npt.NDArray[np.float32]]) -> list[str | None]:
        """Language code of each window, from the decoder's distribution after ``<|startoftranscript|>``.

        The decoding layer calls it once per request, on the request's first non-silent window
        (:mod:`whisper_build.serving.triton_model.language`). ``None`` where the engine cannot tell
        (English-only models; a runtime without the logits): the layer uses ``default_language``.

        Args:
            audio: 1-D float32 arrays, 16 kHz mono, ≤ 480 000 samples each.
        """
        ...

    def align(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        text_tokens: Sequence[Sequence[int]],
    ) -> list[list[WordTiming]]:
        """Word timings of already decoded text (only when ``capabilities.word_timestamps``).

        Args:
            audio: the windows, as given to :meth:`generate`.
            prompts: their prompts (language/task).
            text_tokens: per window, the text token ids (``< eot``) to align.

        Returns:
            Per window, its words in order, times relative to the window's start.
        """
        ...

    def decode_text(self, tokens: Sequence[int]) -> str:
        """Text of token ids; ids ``>= eot`` are ignored."""
        ...


class TokenizerText:
    """Mixin giving an engine :meth:`WhisperEngine.decode_text` from its Hugging Face tokenizer.

    The engine sets ``self._tokenizer`` (a ``tokenizers.Tokenizer``) and ``self.eot``.
    """

    _tokenizer: tokenizers.Tokenizer
    eot: int

    def decode_text(self, tokens: Sequence[int]) -> str:
        """See :meth:`WhisperEngine.decode_text`."""
        return str(self._tokenizer.decode([t for t in tokens if t < self.eot]))


class NoWordAlignment:
    """Mixin for engines without cross-attention output: :meth:`WhisperEngine.align` is refused.

    Such engines set ``capabilities.word_timestamps = False``, so the decoding layer answers a
    request for words with a 400 before it would call this.
    """

    name: str

    def align(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        text_tokens: Sequence[Sequence[int]],
    ) -> list[list[WordTiming]]:
        """Raises NotImplementedError: this engine exposes no cross-attention alignment."""
        raise NotImplementedError(f"engine {self.name} exposes no cross-attention alignment (no word timings)")
