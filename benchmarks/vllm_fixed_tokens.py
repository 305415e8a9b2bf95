"""A vLLM logits processor that makes a transcription decode exactly the tokens asked for (benchmarks only).

vLLM 0.24.0's ``/v1/audio/transcriptions`` takes ``max_completion_tokens`` but neither ``min_tokens``
nor ``ignore_eos``: ``TranscriptionRequest`` (vllm/entrypoints/speech_to_text/transcription/protocol.py)
has no such fields and its base model ignores unknown ones with a debug log. It does pass
``vllm_xargs`` (a JSON form field) to ``SamplingParams.extra_args``, which custom logits processors
read. :class:`FixedTokens` is vLLM's own ``MinTokensLogitsProcessor`` (vllm/v1/sample/logits_processor/
builtin.py: end-of-text and every stop token set to -inf until the count is reached) reading the count
from ``vllm_xargs={"min_tokens": n}`` instead of ``SamplingParams.min_tokens``; with
``max_completion_tokens = n`` every window then decodes exactly n tokens, as the ``torch`` engine's
``random_weights_fixed_tokens`` does. Loaded in vLLM's processes only:
``vllm serve ... --logits-processors benchmarks.vllm_fixed_tokens:FixedTokens``.
Docs: docs/benchmarks.md, "Side by side with vLLM".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vllm.v1.sample.logits_processor import MinTokensLogitsProcessor

KEY = "min_tokens"
"""The ``vllm_xargs`` key read for the count."""


def requested_tokens(extra_args: Mapping[str, Any] | None) -> int | None:
    """The count asked for in ``extra_args`` (``None`` when absent).

    Raises:
        ValueError: not a whole number ≥ 1 (vLLM answers the request 400).
    """
    if not extra_args or KEY not in extra_args:
        return None
    value = extra_args[KEY]
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 1:
        raise ValueError(f"vllm_xargs {KEY}={value!r}: give a whole number of tokens ≥ 1")
    return int(value)


class FixedTokens(MinTokensLogitsProcessor):
    """``MinTokensLogitsProcessor`` whose count comes from ``vllm_xargs`` (see the module docstring)."""

    @classmethod
    def validate_params(cls, sampling_params: Any) -> None:
        """Refuse a ``min_tokens`` that is not a whole number ≥ 1 (vLLM answers 400)."""
        requested_tokens(sampling_params.extra_args)

    @staticmethod
    def add_request(
        params: Any, _prompt: list[int] | None, output_tok_ids: Sequence[int]
    ) -> tuple[int, Sequence[int], set[int]] | None:
        """A new request's state: (count, its output ids so far, the ids held back), or ``None`` when none is asked."""
        count = requested_tokens(params.extra_args)
        if not count or len(output_tok_ids) >= count:
            return None
        return count, output_tok_ids, params.all_stop_token_ids
