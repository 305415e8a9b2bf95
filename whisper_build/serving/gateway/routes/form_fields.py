"""The multipart fields of ``/v1/audio/*``: OpenAI's, each once where it takes one value; anything else is a 400.

FastAPI binds only the fields a route declares and binds a repeated field to its last value, so
a misspelled field (``response-format``) was dropped and a second ``file`` silently won. The route
dependencies :func:`transcription_fields` and :func:`translation_fields` read the parsed form
(Starlette caches it on the request, so it is parsed once) and refuse, in OpenAI's words, a field
its API does not accept for the endpoint (:data:`TRANSCRIPTION_FIELDS`, :data:`TRANSLATION_FIELDS`),
then a repeat of a :data:`SINGLE` field. Arrays come as ``name[]`` (openai-python's multipart
form) or ``name``; ``chunking_strategy`` as ``chunking_strategy`` or ``chunking_strategy[key]``.
Which accepted fields are applied and which are ignored, and why: docs/gateway.md ("OpenAI API parity").
"""

from __future__ import annotations

import re

from fastapi import Request

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.errors import ApiError

__all__ = [
    "SINGLE",
    "TRANSCRIPTION_FIELDS",
    "TRANSLATION_FIELDS",
    "field_name",
    "transcription_fields",
    "translation_fields",
    "unrecognized",
]

SINGLE = (
    "file", "model", "language", "prompt", "response_format", "temperature", "stream", "min_speakers", "max_speakers",
)  # fmt: skip
"""Fields of OpenAI's audio API that take one value (``timestamp_granularities[]`` may repeat)."""
ARRAYS = frozenset(
    {"include", "keywords", "known_speaker_names", "known_speaker_references", "languages", "timestamp_granularities"}
)
"""Fields OpenAI takes as arrays (sent as ``name[]``, one part per item)."""
OBJECTS = frozenset({"chunking_strategy"})
"""Fields OpenAI takes as a string or an object (``name[key]`` parts)."""
TRANSCRIPTION_FIELDS = frozenset(
    {"file", "model", "language", "prompt", "response_format", "stream", "temperature", "min_speakers", "max_speakers"}
    | ARRAYS
    | OBJECTS
)
"""``audio.transcriptions.create``'s parameters (openai-python ``TranscriptionCreateParams``), plus our
speaker-count extensions ``min_speakers``/``max_speakers``."""
TRANSLATION_FIELDS = frozenset({"file", "model", "prompt", "response_format", "temperature"})
"""``audio.translations.create``'s parameters (openai-python ``TranslationCreateParams``)."""
_KEY = re.compile(r"(?P<name>[^\[\]]+)(?P<suffix>\[\]|\[[^\[\]]+\])?")


def field_name(key: str) -> str | None:
    """The OpenAI parameter a form key sends, or None when the key's shape fits no parameter.

    ``include[]`` → ``include``; ``chunking_strategy[type]`` → ``chunking_strategy``; ``prompt`` →
    ``prompt``; ``prompt[]`` → None (a scalar sent as an array).
    """
    match = _KEY.fullmatch(key)
    if match is None:
        return None
    name, suffix = match["name"], match["suffix"]
    if suffix is None:
        return name
    if (suffix == "[]" and name in ARRAYS) or (suffix != "[]" and name in OBJECTS):
        return name
    return None


def unrecognized(key: str) -> ApiError:
    """OpenAI's 400 for a request argument it does not accept, ``param`` = the key as sent."""
    return ApiError(400, ErrorCode.INVALID_FIELD, f"Unrecognized request argument supplied: {key}", param=key)


async def _check(request: Request, accepted: frozenset[str]) -> None:
    form = await request.form()
    for key in form:
        if field_name(key) not in accepted:
            raise unrecognized(key)
    for name in SINGLE:
        count = len(form.getlist(name))
        if count > 1:
            raise ApiError(400, ErrorCode.INVALID_FIELD, f"{name}: sent {count} times; send it once", param=name)


async def transcription_fields(request: Request) -> None:
    """Route dependency: 400 ``invalid_field`` for a field outside :data:`TRANSCRIPTION_FIELDS` or a repeat.

    Raises:
        ApiError: 400 with ``param`` = the field ("Unrecognized request argument supplied: <key>").
    """
    await _check(request, TRANSCRIPTION_FIELDS)


async def translation_fields(request: Request) -> None:
    """Route dependency: 400 ``invalid_field`` for a field outside :data:`TRANSLATION_FIELDS` or a repeat.

    Raises:
        ApiError: 400 with ``param`` = the field ("Unrecognized request argument supplied: <key>").
    """
    await _check(request, TRANSLATION_FIELDS)
