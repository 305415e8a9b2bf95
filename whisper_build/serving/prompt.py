"""Whisper decoder prompts: parse what users send, render the canonical ``TEXT_PREFIX`` for Triton.

Entry point: :class:`DecodePrompt` (the details, in its docstring).
Docs: docs/gateway.md, "OpenAI API parity".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "LANGUAGE_CODES",
    "LANGUAGE_NAMES",
    "MAX_PREVIOUS_TEXT_CHARS",
    "MAX_PROMPT_TOKENS",
    "DecodePrompt",
    "english_only_refusal",
    "normalize_language",
    "parse_prompt",
    "truncate_prompt_tokens",
]

MAX_PROMPT_TOKENS = 223
"""Most previous-text tokens Whisper conditions on: ``n_text_ctx // 2 - 1`` with ``n_text_ctx = 448``
(openai/whisper ``decoding.py``, ``DecodingTask._get_initial_tokens``)."""

MAX_PREVIOUS_TEXT_CHARS = 4096
"""Characters of previous text kept by :func:`parse_prompt` (from the right). 223 tokens of
ordinary text are about 1 000 characters, so this bound never removes text the token-level cut
would keep for normal prose; it only bounds request size."""

LANGUAGE_CODES: tuple[str, ...] = (
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
    "it", "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
    "th", "ur", "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
    "az", "sl", "kn", "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
    "gl", "mr", "pa", "si", "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
    "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
    "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue",
)  # fmt: skip
"""Whisper's language codes in token order (openai/whisper ``tokenizer.py`` ``LANGUAGES``; ``yue``
was added with large-v3). ``tests/serving/test_prompt.py`` checks this against faster-whisper's (sorted) copy."""

LANGUAGE_NAMES: dict[str, str] = dict(zip(LANGUAGE_CODES, (
    "english", "chinese", "german", "spanish", "russian", "korean", "french", "japanese", "portuguese",
    "turkish", "polish", "catalan", "dutch", "arabic", "swedish", "italian", "indonesian", "hindi",
    "finnish", "vietnamese", "hebrew", "ukrainian", "greek", "malay", "czech", "romanian", "danish",
    "hungarian", "tamil", "norwegian", "thai", "urdu", "croatian", "bulgarian", "lithuanian", "latin",
    "maori", "malayalam", "welsh", "slovak", "telugu", "persian", "latvian", "bengali", "serbian",
    "azerbaijani", "slovenian", "kannada", "estonian", "macedonian", "breton", "basque", "icelandic",
    "armenian", "nepali", "mongolian", "bosnian", "kazakh", "albanian", "swahili", "galician", "marathi",
    "punjabi", "sinhala", "khmer", "shona", "yoruba", "somali", "afrikaans", "occitan", "georgian",
    "belarusian", "tajik", "sindhi", "gujarati", "amharic", "yiddish", "lao", "uzbek", "faroese",
    "haitian creole", "pashto", "turkmen", "nynorsk", "maltese", "sanskrit", "luxembourgish", "myanmar",
    "tibetan", "tagalog", "malagasy", "assamese", "tatar", "hawaiian", "lingala", "hausa", "bashkir",
    "javanese", "sundanese", "cantonese",
), strict=True))  # fmt: skip
"""Lowercase English name per language code (openai/whisper ``tokenizer.py`` ``LANGUAGES``), as
OpenAI's API reports ``language`` in ``verbose_json``."""

Task = Literal["transcribe", "translate"]
_TASKS: tuple[Task, ...] = ("transcribe", "translate")

_SPECIAL_TOKEN = re.compile(r"<\|([^|<>]*)\|>")
_SOT_PREV = "startofprev"
_SOT = "startoftranscript"
_NO_TIMESTAMPS = "notimestamps"


def english_only_refusal(language: str | None, task: str = "transcribe") -> str | None:
    """What an English-only (``.en``) model cannot do with this ``language`` and ``task``, or ``None``.

    Returns:
        the refusal (it ends with "serve a multilingual model", so callers may say where one comes
        from), or ``None`` when the model can serve it (``None`` or ``"en"``, transcription).
    """
    if task == "translate":
        return "this model is English-only (.en): it cannot translate; serve a multilingual model"
    if language not in (None, "en"):
        return (
            f"this model is English-only (.en): language {language!r} is not supported; "
            "send 'en' or no language, or serve a multilingual model"
        )
    return None


def normalize_language(language: str | None) -> str | None:
    """Return the Whisper language code for ``language`` (case and surrounding space ignored).

    Args:
        language: a Whisper language code such as ``"en"`` or ``"DE"``; ``None`` or ``""`` means
            "not given" (the engine detects it, or the model is English-only).

    Returns:
        The lower-case code, or ``None``.

    Raises:
        ValueError: the code is not one of :data:`LANGUAGE_CODES`; the message lists them.
    """
    if language is None or not language.strip():
        return None
    code = language.strip().lower()
    if code not in LANGUAGE_CODES:
        raise ValueError(
            f"unknown language {language!r}: use a Whisper language code (ISO 639-1 such as 'en', "
            f"'de', 'zh'); accepted: {', '.join(LANGUAGE_CODES)}"
        )
    return code


@dataclass(frozen=True)
class DecodePrompt:
    """What the decoder is told before it transcribes one 30 s window.

    Attributes:
        previous_text: context text the decoder is conditioned on (``<|startofprev|>``), stripped
            of surrounding space; ``""`` for none. Engines keep its last
            :data:`MAX_PROMPT_TOKENS` tokens.
        language: Whisper language code, or ``None`` to let the engine decide (detect it, or use
            none for English-only ``.en`` models, which never get a language token).
        task: ``"transcribe"`` (default) or ``"translate"`` (to English; multilingual models only).
        prefix: text the transcript is forced to start with (openai/whisper ``DecodingOptions.prefix``),
            stripped; ``""`` for none. Engines put its tokens after ``<|notimestamps|>`` and return only
            the continuation. A live turn sends the previous turn's text plus its confirmed words here.

    Raises:
        ValueError: unknown language or task, or ``previous_text`` or ``prefix`` containing a special token.

    Users send a prompt in one of two forms, and both are accepted:

    * plain context text (``"Kubernetes, HyperPod and Triton."``), which becomes the previous-text
      prompt that conditions the decoder (OpenAI's ``initial_prompt``);
    * the raw special-token form existing clients of the TensorRT-LLM Whisper examples send, e.g.
      ``<|startofprev|>previous text<|startoftranscript|><|en|><|transcribe|><|notimestamps|>``.

    :meth:`DecodePrompt.to_text_prefix` renders the canonical special-token string the gateway sends
    to Triton as ``TEXT_PREFIX``; the Triton model parses it back with :func:`parse_prompt`, so
    ``parse_prompt(p.to_text_prefix(), None) == p`` for every valid prompt.

    Length: Whisper keeps at most ``n_text_ctx // 2 - 1 = 223`` previous-text tokens and drops the
    oldest ones (openai/whisper ``decoding.py``: ``prompt_tokens[-(self.n_ctx // 2 - 1):]``;
    faster-whisper ``get_prompt`` does the same). The exact cut is made on tokens by the engine that
    tokenizes (:func:`truncate_prompt_tokens`); :func:`parse_prompt` only pre-cuts the text from the
    left to :data:`MAX_PREVIOUS_TEXT_CHARS` characters so that requests stay small. A long prompt is
    never an error.
    """

    previous_text: str = ""
    language: str | None = None
    task: Task = "transcribe"
    prefix: str = ""

    def __post_init__(self) -> None:
        if self.task not in _TASKS:
            raise ValueError(f"unknown task {self.task!r}: accepted tasks are {', '.join(_TASKS)}")
        if normalize_language(self.language) != self.language:
            raise ValueError(f"language {self.language!r} is not a normalized Whisper language code")
        for name, text in (("previous_text", self.previous_text), ("prefix", self.prefix)):
            if text != text.strip():
                raise ValueError(f"{name} must not start or end with whitespace")
            if _SPECIAL_TOKEN.search(text):
                raise ValueError(f"{name} must not contain Whisper special tokens like <|en|>")

    def to_text_prefix(self) -> str:
        """Render the canonical special-token string sent to Triton as ``TEXT_PREFIX``.

        Form: ``[<|startofprev|>TEXT]<|startoftranscript|>[<|LANG|>]<|TASK|><|notimestamps|>[PREFIX]``.
        Engines decide which of these tokens their model takes (``.en`` models drop language and
        task, as openai/whisper ``get_tokenizer(multilingual=False)`` does).
        """
        parts = [f"<|{_SOT_PREV}|>{self.previous_text}"] if self.previous_text else []
        parts.append(f"<|{_SOT}|>")
        if self.language:
            parts.append(f"<|{self.language}|>")
        parts.append(f"<|{self.task}|><|{_NO_TIMESTAMPS}|>{self.prefix}")
        return "".join(parts)


def parse_prompt(text: str | None, language: str | None = None) -> DecodePrompt:
    """Parse a user prompt (plain context text or the special-token form) into a :class:`DecodePrompt`.

    Args:
        text: ``""``/``None`` (no prompt), plain context text, or the special-token form
            ``[<|startofprev|>TEXT]<|startoftranscript|>[<|LANG|>][<|transcribe|>|<|translate|>]
            [<|notimestamps|>][PREFIX]``. ``<|notimestamps|>`` is implied (the request's options say
            whether timestamps are produced); text after the last token is the forced prefix.
        language: explicit language code (e.g. the request's ``language`` field); when given it
            wins over a language token inside ``text``.

    Returns:
        The prompt, with previous text cut from the left to :data:`MAX_PREVIOUS_TEXT_CHARS`.

    Raises:
        ValueError: unknown language code, unknown or misplaced special token, more than one
            language token, or text between the tokens after ``<|startoftranscript|>``. Messages say what to change.
    """
    explicit_language = normalize_language(language)
    text = text or ""
    if not _SPECIAL_TOKEN.search(text):
        return DecodePrompt(_cut_left(text), explicit_language)

    previous_text, sot_tokens, prefix = _split_special_form(text)
    token_language, task = _read_sot_tokens(sot_tokens)
    return DecodePrompt(_cut_left(previous_text), explicit_language or token_language, task, _cut_left(prefix))


def truncate_prompt_tokens(tokens: Sequence[int], limit: int = MAX_PROMPT_TOKENS) -> list[int]:
    """Keep the last ``limit`` previous-text token ids (Whisper drops the oldest context first).

    Args:
        tokens: previous-text token ids, oldest first (without ``<|startofprev|>``).
        limit: most tokens to keep; :data:`MAX_PROMPT_TOKENS` per openai/whisper ``decoding.py``.

    Raises:
        ValueError: ``limit`` is negative.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    return list(tokens[len(tokens) - limit :]) if len(tokens) > limit else list(tokens)


def _cut_left(text: str) -> str:
    text = text.strip()
    return text[-MAX_PREVIOUS_TEXT_CHARS:].lstrip()


def _split_special_form(text: str) -> tuple[str, list[str], str]:
    """Split a prompt into previous text, the token names after ``<|startoftranscript|>`` and the prefix.

    The prompt has the form ``[<|startofprev|>]TEXT<|startoftranscript|>...[PREFIX]``.
    """
    sot_tag = f"<|{_SOT}|>"
    if text.count(sot_tag) != 1:
        raise ValueError(
            "a prompt with special tokens must contain <|startoftranscript|> exactly once, e.g. "
            "'<|startofprev|>previous text<|startoftranscript|><|en|><|transcribe|><|notimestamps|>'"
            "; or send plain context text without <|...|> tokens"
        )
    head, tail = text.split(sot_tag)
    prev_tag = f"<|{_SOT_PREV}|>"
    head = head.strip()
    if head.startswith(prev_tag):
        head = head[len(prev_tag) :]
    for name in _SPECIAL_TOKEN.findall(head):
        raise ValueError(
            f"special token <|{name}|> is not allowed in the previous text before <|startoftranscript|>; remove it"
        )
    pieces = _SPECIAL_TOKEN.split(tail)  # [text, name, text, name, ..., text (the prefix)]
    stray = "".join(pieces[0:-1:2]).strip()
    if stray:
        raise ValueError(
            f"text between the tokens after <|startoftranscript|> is not supported ({stray[:40]!r}); put "
            "context text before <|startoftranscript|> (after <|startofprev|>) and a forced prefix last"
        )
    return head, pieces[1::2], pieces[-1]


def _read_sot_tokens(names: list[str]) -> tuple[str | None, Task]:
    """Read ``[LANG][TASK][notimestamps]`` token names in that order."""
    language: str | None = None
    task: Task = "transcribe"
    stage = 0  # 0: language allowed, 1: task allowed, 2: notimestamps allowed, 3: done
    for name in names:
        if stage == 0 and name.lower() in LANGUAGE_CODES:
            language, stage = name.lower(), 1
        elif stage <= 1 and name in _TASKS:
            task, stage = name, 2
        elif stage <= 2 and name == _NO_TIMESTAMPS:
            stage = 3
        elif stage == 0 and name.isalpha() and len(name) <= 3:
            normalize_language(name)  # raises the "unknown language" error listing the codes
        else:
            raise ValueError(
                f"unexpected special token <|{name}|> after <|startoftranscript|>: the accepted "
                "order is <|LANGUAGE|> (one Whisper language code), <|transcribe|> or "
                "<|translate|>, <|notimestamps|>"
            )
    return language, task
