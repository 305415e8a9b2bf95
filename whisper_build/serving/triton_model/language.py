"""One language per request, for every engine: detected once, on the request's first non-silent window.

A request is consecutive windows of one file (the gateway's window group). Where its prompt names
no language and the model is multilingual, the first window that is not silent (by the
decoding layer's ``silence_dbfs`` gate) is given to :meth:`WhisperEngine.detect_language`, and
its language goes into the prompt of EVERY window of the request before any decoding: a file's
windows are decoded in one language, as openai/whisper ``transcribe()`` detects once on the first
30 s (``decode_options["language"]`` is set from the first segment) rather than per window, which
would let a noisy or music window flip the language mid-file. The gateway sends the language it got
back with every later group of the file. The detections of all requests of one Triton batch are
ONE engine call. Where the engine cannot tell (``None``), ``default_language`` is used; English-only
models are never asked.
Docs: docs/gateway.md, "Languages (multilingual models)".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from whisper_build.serving.engines.base import WhisperEngine
from whisper_build.serving.engines.features import is_silent
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["assign_languages"]

Windows = tuple[Sequence[np.ndarray], Sequence[DecodePrompt]]
"""One request's windows (16 kHz float32) and their prompts."""


def _detection_window(windows: Windows, silence_dbfs: float) -> int | None:
    """Index of the request's first non-silent window when some prompt needs a language, else ``None``."""
    audio, prompts = windows
    if all(p.language is not None for p in prompts):
        return None
    return next((i for i, a in enumerate(audio) if not is_silent(a, silence_dbfs)), None)


def assign_languages(
    engine: WhisperEngine,
    requests: Sequence[Windows],
    silence_dbfs: float,
    default_language: str,
) -> list[list[DecodePrompt]]:
    """Each request's prompts with the language set (multilingual engines); unchanged otherwise.

    Args:
        engine: the loaded engine.
        requests: per valid request of one batch, its windows and prompts.
        silence_dbfs: windows quieter than this are not used for detection (nor decoded).
        default_language: the language where the engine cannot detect one.

    Returns:
        Per request, in order, its prompts; a request whose windows are all silent keeps
        ``None`` (nothing is decoded, so nothing needs a language).

    Raises:
        RuntimeError: the engine returned a different number of languages than windows.
    """
    out = [list(prompts) for _, prompts in requests]
    if not engine.multilingual:
        return out
    todo = [(k, w) for k, r in enumerate(requests) if (w := _detection_window(r, silence_dbfs)) is not None]
    if not todo:
        return out
    detected = engine.detect_language([requests[k][0][w] for k, w in todo])
    if len(detected) != len(todo):
        raise RuntimeError(f"engine detected {len(detected)} languages for {len(todo)} windows")
    for (k, _), language in zip(todo, detected, strict=True):
        code = language or default_language
        out[k] = [p if p.language is not None else replace(p, language=code) for p in out[k]]
    return out
