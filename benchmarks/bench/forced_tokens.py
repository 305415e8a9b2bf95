"""Forcing each window's decode length on an OpenAI-compatible server that takes vLLM's fields.

The ``openai`` target's form key :data:`FORCED_TOKENS` (``bench --target 'vllm=http://host:port/v1/audio/
transcriptions?forced_tokens=100'``) becomes per-window fields (:func:`forced_fields`), so vLLM decodes
the token count the ``torch`` engine's random-weight benchmark mode decodes for the same window
(benchmarks/vllm_fixed_tokens.py holds end-of-text back). Docs: docs/benchmarks.md, "Side by side with vLLM".
"""

from __future__ import annotations

import json

from benchmarks.bench.audio import AudioSample, BenchInputError

FORCED_TOKENS = "forced_tokens"
"""Form key of an ``openai`` target (not sent): each window's decode length, ``N`` or ``mixed``
(:func:`forced_fields`); for a server that takes vLLM's fields (benchmarks/vllm_fixed_tokens.py)."""


def forced_fields(rule: str, sample: AudioSample) -> dict[str, str]:
    """Form fields that make vLLM decode exactly the rule's token count for ``sample``'s one window.

    ``rule``: a count, or ``mixed`` (the count the ``torch`` engine's mixed workload draws for the same
    window, :func:`whisper_build.serving.engines.random_lengths.mixed_window_tokens`). vLLM caps the
    length with ``max_completion_tokens``; ``vllm_xargs`` ``min_tokens`` holds end-of-text back until then.

    Raises:
        BenchInputError: the rule is neither, or the sample has more than one window.
    """
    from whisper_build.serving.engines.random_lengths import mixed_window_tokens

    if len(sample.windows) != 1:
        raise BenchInputError(f"{sample.name}: {FORCED_TOKENS} needs single-window files, got {len(sample.windows)}")
    if rule == "mixed":
        count = mixed_window_tokens(sample.windows[0])
    elif rule.isdigit() and int(rule) > 0:
        count = int(rule)
    else:
        raise BenchInputError(f"{FORCED_TOKENS}={rule!r}: give a token count or 'mixed'")
    return {"max_completion_tokens": str(count), "vllm_xargs": json.dumps({"min_tokens": count})}
