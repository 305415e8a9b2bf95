"""Smoke test of fresh engines: transcribe a known clip and compare with its transcript.

The transcription loads the engine as the Triton model does (``load_engine``) and decodes through
the served path (:func:`whisper_build.serving.triton_model.decoding.window_texts` over
``decode_windows``: scores, no-speech probability, fallback), so an engine that fails
``generate(..., scores=True)`` in a pod fails here. The verdict is a word error rate (Levenshtein distance over words, divided by
the reference length) on lower-cased text without punctuation.
Docs: docs/engines.md, "The pieces".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from whisper_build.serving.engines.params import EngineParams

DEFAULT_MAX_WER = 0.25
"""Loose on purpose: it catches broken engines (garbage, empty output, wrong mel bins), not accuracy."""

_WORD = re.compile(r"[\w']+")


class SmokeTestError(RuntimeError):
    """The fresh engine transcribed the clip wrongly (message shows both texts and the WER)."""


@dataclass(frozen=True)
class SmokeResult:
    """Outcome: ``transcript`` produced, ``expected`` text and their word error rate."""

    transcript: str
    expected: str
    wer: float


def normalize_words(text: str) -> list[str]:
    """Lower-case words without punctuation: ``"Hello, World!"`` → ``["hello", "world"]``."""
    return _WORD.findall(text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word error rate of ``hypothesis`` against ``reference`` (jiwer).

    On lower-cased words without punctuation; ``len(hyp)`` when the reference is empty (0.0 when both
    are empty).
    """
    import jiwer

    ref, hyp = " ".join(normalize_words(reference)), " ".join(normalize_words(hypothesis))
    if not ref:
        return float(len(hyp.split()))
    return float(jiwer.wer(ref, hyp)) if hyp else 1.0


def judge(transcript: str, expected: str, max_wer: float = DEFAULT_MAX_WER) -> SmokeResult:
    """Compare a transcript with the expected text.

    Raises:
        SmokeTestError: WER above ``max_wer`` (an empty transcript always fails).
    """
    wer = word_error_rate(expected, transcript)
    if not normalize_words(transcript) or wer > max_wer:
        raise SmokeTestError(
            f"smoke test failed: WER {wer:.2f} > {max_wer:.2f}\n"
            f"  expected:   {expected!r}\n  transcript: {transcript!r}"
        )
    return SmokeResult(transcript, expected, wer)


def transcribe_clip(params: EngineParams, clip: Path) -> str:
    """Transcribe the first 30 s of ``clip`` with the engine ``params`` describe (absolute ``model_path``).

    Decoded as the served model decodes (:func:`~whisper_build.serving.triton_model.decoding.window_texts`,
    thresholds from ``params``). Needs the engine's runtime (a GPU and ``tensorrt_llm`` for engine builds).

    Raises:
        ImportError: the TensorRT-LLM engine class or runtime is not available.
        whisper_build.serving.audio.errors.AudioError: the clip cannot be decoded.
    """
    from whisper_build.serving.audio.decode import SAMPLE_RATE, decode_audio
    from whisper_build.serving.engines.factory import load_engine
    from whisper_build.serving.triton_model.decoding import DecodingPolicy, window_texts

    engine = load_engine(params)
    audio = decode_audio(clip.read_bytes())
    window = audio.samples[: 30 * SAMPLE_RATE]
    return window_texts(engine, [window], DecodingPolicy.from_params(params))[0]
