"""Pure token-level helpers shared by the engines: decoder prompt ids, grouping, output cleanup.

Special-token strings and order follow openai/whisper ``tokenizer.py`` (``sot_sequence``):
``[<|startofprev|> + previous-text ids] <|startoftranscript|> [<|LANG|> <|TASK|>] <|notimestamps|> [prefix ids]``.
English-only (``.en``) models take neither a language nor a task token
(``get_tokenizer(multilingual=False)`` sets both to ``None``).
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from whisper_build.serving.prompt import LANGUAGE_CODES, DecodePrompt, truncate_prompt_tokens

__all__ = [
    "MULTILINGUAL_VOCAB_SIZE",
    "SpecialTokens",
    "best_language",
    "build_prompt_ids",
    "clean_output_ids",
    "generated_ids",
    "group_indices",
    "ctranslate2_max_length",
    "is_multilingual",
    "language_token_ids",
    "max_length_for",
    "prefix_ids",
    "vocabulary_size",
]

N_TEXT_CTX = 448
"""Decoder context length of every Whisper model (``n_text_ctx``, openai/whisper ``model.py``)."""

MULTILINGUAL_VOCAB_SIZE = 51865
"""Vocabulary size from which a Whisper model is multilingual (openai/whisper ``model.py``:
``is_multilingual = n_vocab >= 51865``; TensorRT-LLM ``run.py`` uses the same test)."""


def is_multilingual(vocab_size: int) -> bool:
    """Whether a Whisper model with this vocabulary size takes language and task tokens.

    openai/whisper ``model.py``: ``is_multilingual = n_vocab >= 51865`` (tiny.en 51864 → False,
    large-v3 51866 → True). Every engine and the model repository decide with this one rule.
    """
    return vocab_size >= MULTILINGUAL_VOCAB_SIZE


N_TIMESTAMP_TOKENS = 1501
"""``<|0.00|>`` … ``<|30.00|>``, the last ids of every Whisper vocabulary (openai/whisper ``tokenizer.py``)."""

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class SpecialTokens:
    """Ids of the special tokens a prompt is built from, read from the model's tokenizer.

    Attributes:
        sot_prev: ``<|startofprev|>``.
        sot: ``<|startoftranscript|>``.
        no_timestamps: ``<|notimestamps|>``.
        eot: ``<|endoftext|>``; every id ``>= eot`` is a special or timestamp token in Whisper
            vocabularies (openai/whisper ``tokenizer.py``: specials are appended after the BPE ranks).
        multilingual: whether the model takes language and task tokens.
        timestamp_begin: ``<|0.00|>``; id ``timestamp_begin + k`` is the time ``k × 0.02`` s
            (openai/whisper ``tokenizer.py``).
    """

    sot_prev: int
    sot: int
    no_timestamps: int
    eot: int
    multilingual: bool
    timestamp_begin: int = -1

    @classmethod
    def from_lookup(cls, token_to_id: Callable[[str], int | None], multilingual: bool) -> SpecialTokens:
        """Read the ids with ``token_to_id`` (e.g. ``tokenizers.Tokenizer.token_to_id``).

        Raises:
            ValueError: a required special token is missing from the vocabulary.
        """
        names = {
            "sot_prev": "<|startofprev|>",
            "sot": "<|startoftranscript|>",
            "no_timestamps": "<|notimestamps|>",
            "eot": "<|endoftext|>",
        }
        ids = {field: _lookup(token_to_id, token) for field, token in names.items()}
        # Some tokenizer.json files lack the timestamp tokens; <|0.00|> follows <|notimestamps|>
        # in every Whisper vocabulary (faster-whisper ``Tokenizer.timestamp_begin``).
        timestamp_begin = token_to_id("<|0.00|>") or ids["no_timestamps"] + 1
        return cls(multilingual=multilingual, timestamp_begin=timestamp_begin, **ids)


def vocabulary_size(token_to_id: Callable[[str], int | None]) -> int:
    """Whisper vocabulary size from a tokenizer: id of ``<|0.00|>`` + 1501 timestamp tokens.

    tiny.en gives 51864, tiny 51865, large-v3 51866 (their ``n_vocab``); compare with
    :data:`MULTILINGUAL_VOCAB_SIZE`. Works for ``tokenizer.json`` files without timestamp tokens.

    Raises:
        ValueError: a required special token is missing from the vocabulary.
    """
    return SpecialTokens.from_lookup(token_to_id, False).timestamp_begin + N_TIMESTAMP_TOKENS


def _lookup(token_to_id: Callable[[str], int | None], token: str) -> int:
    token_id = token_to_id(token)
    if token_id is None:
        raise ValueError(f"tokenizer has no {token} token; is this a Whisper tokenizer.json?")
    return token_id


def build_prompt_ids(
    prompt: DecodePrompt,
    specials: SpecialTokens,
    encode: Callable[[str], list[int]],
    token_to_id: Callable[[str], int | None],
    language: str | None,
    timestamps: bool = False,
) -> list[int]:
    """Decoder prompt ids for one window.

    Args:
        prompt: parsed prompt (previous text, task).
        specials: the model's special token ids.
        encode: text → BPE ids without special tokens (``tokenizer.encode(t, add_special_tokens=False).ids``).
        token_to_id: special-token string → id.
        language: language code to put in the prompt for multilingual models (``prompt.language``,
            a detected one, or a default); ignored for English-only models.
        timestamps: leave out ``<|notimestamps|>`` so that the model predicts timestamp tokens
            (openai/whisper ``DecodingTask._get_initial_tokens`` with ``without_timestamps=False``).

    Returns:
        ``[<|startofprev|>, *prev[-223:]] + [<|startoftranscript|>, (<|lang|>, <|task|>)] +
        [<|notimestamps|> unless timestamps] + prefix[-223:]``. Previous text and the forced prefix are
        encoded as ``" " + text`` like openai/whisper ``decoding.py`` and cut from the left to
        :data:`whisper_build.serving.prompt.MAX_PROMPT_TOKENS`; the model continues after the prefix, so
        the engines' new tokens are the continuation only (openai/whisper: ``tokens[sample_begin:]``).

    Raises:
        ValueError: a multilingual model got no language, or the tokenizer lacks a token.
    """
    ids: list[int] = []
    if prompt.previous_text:
        ids = [specials.sot_prev, *truncate_prompt_tokens(encode(" " + prompt.previous_text))]
    ids.append(specials.sot)
    if specials.multilingual:
        if language is None:
            raise ValueError("a multilingual model needs a language (detected or default)")
        ids += [_lookup(token_to_id, f"<|{language}|>"), _lookup(token_to_id, f"<|{prompt.task}|>")]
    if not timestamps:
        ids.append(specials.no_timestamps)
    return ids + prefix_ids(prompt, encode)


def prefix_ids(prompt: DecodePrompt, encode: Callable[[str], list[int]]) -> list[int]:
    """The forced prefix's ids (the last :data:`~whisper_build.serving.prompt.MAX_PROMPT_TOKENS`), ``[]`` for none."""
    return truncate_prompt_tokens(encode(" " + prompt.prefix)) if prompt.prefix else []


def generated_ids(
    output_ids: Sequence[int], prompt_ids: Sequence[int], eot: int, forced: Sequence[int] = ()
) -> list[int]:
    """New token ids of one decoded sequence, timestamp tokens kept: prompt echo removed, cut at ``eot``.

    Like :func:`clean_output_ids` but keeps ids ``> eot`` (timestamps and other specials) for the
    decoding layer to parse. ``forced``: the prompt's forced prefix (:func:`prefix_ids`), removed too
    where the runtime returns it before the new tokens (CTranslate2 returns what follows
    ``<|notimestamps|>``, the prefix included).
    """
    ids = list(output_ids)
    if prompt_ids and ids[: len(prompt_ids)] == list(prompt_ids):
        ids = ids[len(prompt_ids) :]
    if forced and ids[: len(forced)] == list(forced):
        ids = ids[len(forced) :]
    if eot in ids:
        ids = ids[: ids.index(eot)]
    return ids


def max_length_for(prompt_len: int, max_new_tokens: int) -> int:
    """Total decoder length (prompt + new tokens) capped at Whisper's ``n_text_ctx`` = 448."""
    return min(N_TEXT_CTX, prompt_len + max_new_tokens)


def ctranslate2_max_length(max_new_tokens: int) -> int:
    """``max_length`` to pass to ``ctranslate2.models.Whisper.generate`` for ``max_new_tokens`` new tokens.

    CTranslate2's Whisper decodes at most ``max_length / 2`` new tokens (and never past the
    448-token context; CTranslate2 ``src/models/whisper.cc``, mirroring openai/whisper's
    ``sample_len = n_text_ctx // 2``), so ``prompt + new`` would cap a window at about 114 tokens.
    Returns ``min(448, 2 * max_new_tokens)``: 448 for the default 224.
    """
    return min(N_TEXT_CTX, 2 * max_new_tokens)


def clean_output_ids(output_ids: Sequence[int], prompt_ids: Sequence[int], eot: int) -> list[int]:
    """Text token ids of one decoded sequence: prompt echo, end-of-text padding and specials removed.

    Some runtimes (TensorRT-LLM ``ModelRunnerCpp``) return the decoder prompt followed by the new
    tokens and pad with ``end_id``; others (CTranslate2) return only new tokens. A leading copy of
    ``prompt_ids`` is removed, the sequence is cut at the first ``eot``, and every remaining id
    ``>= eot`` (special or timestamp token) is dropped.
    """
    ids = list(output_ids)
    if prompt_ids and ids[: len(prompt_ids)] == list(prompt_ids):
        ids = ids[len(prompt_ids) :]
    if eot in ids:
        ids = ids[: ids.index(eot)]
    return [i for i in ids if i < eot]


def group_indices(keys: Sequence[K]) -> dict[K, list[int]]:
    """Indices of equal keys, in first-seen order: ``["a", "b", "a"]`` → ``{"a": [0, 2], "b": [1]}``.

    Used to split one batch into the fewest runtime calls when a runtime needs a setting to be the
    same for all items of a call (CTranslate2: repetition penalty and ``<|startoftranscript|>``
    position).
    """
    groups: dict[K, list[int]] = {}
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    return groups


def language_token_ids(token_to_id: Callable[[str], int | None]) -> dict[int, str]:
    """Id of each language token the vocabulary has → its code (``<|de|>`` → ``"de"``).

    Every code of :data:`whisper_build.serving.prompt.LANGUAGE_CODES` present in the tokenizer
    (large-v3 has ``yue``, older multilingual models stop before it); empty for ``.en`` models'
    vocabularies, which carry the tokens but are never asked (engines check ``multilingual`` first).
    """
    ids = {code: token_to_id(f"<|{code}|>") for code in LANGUAGE_CODES}
    return {token_id: code for code, token_id in ids.items() if token_id is not None}


def best_language(logits: npt.NDArray[np.floating[Any]], language_ids: dict[int, str]) -> str:
    """Most likely language of one window from the decoder's logits after ``<|startoftranscript|>``.

    openai/whisper ``decoding.py`` ``detect_language``: the logits at the
    ``<|startoftranscript|>`` position, every non-language token masked out, argmax. The prompt's
    previous text is not part of this input, so a prompt in another language cannot steer it
    (faster-whisper#869 reports a filler-word prompt changing the detected language).

    Args:
        logits: ``[vocab]`` logits (or log-probs) of the position after ``<|startoftranscript|>``.
        language_ids: from :func:`language_token_ids`.
    """
    ids = list(language_ids)
    return language_ids[ids[int(np.argmax(np.asarray(logits, dtype=np.float64)[ids]))]]
