"""The speaker fields of ``POST /v1/audio/transcriptions``: when diarization runs, and what it is given.

Speakers are on for ``response_format=diarized_json`` (or ``rttm``), and with a ``<model>-diarize``
alias for ``verbose_json``, ``srt`` and ``vtt`` too (``json``/``text``: not diarized). OpenAI's fields:
``known_speaker_names[]`` + ``known_speaker_references[]``, ``chunking_strategy`` (validated, not
applied: the gateway cuts its own windows); its refusals for the diarizing model (``prompt``,
``include[]=logprobs``, ``timestamp_granularities[]``) answer 400 for the alias (words stay allowed
with ``verbose_json``, which OpenAI's diarizing model does not offer). Extensions:
``min_speakers``/``max_speakers``. A server without the speaker model answers :data:`SPEAKERS_OFF` (400).
Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from fastapi import Request
from starlette.datastructures import FormData

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.diarization.speakers import MAX_SPEAKERS
from whisper_build.serving.diarization.weights import SPEAKERS_SET_HINT
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.transcription import formats

__all__ = ["DIARIZE_SUFFIX", "SPEAKERS_OFF", "SpeakerRequest", "base_model", "speaker_fields"]

DIARIZE_SUFFIX = "-diarize"
"""``<served id>-diarize`` is the served model with speakers on (OpenAI: ``gpt-4o-transcribe-diarize``)."""
VAD_KEYS = {"prefix_padding_ms", "silence_duration_ms", "threshold"}
SPEAKERS_OFF = (
    "speakers (diarized_json, rttm, a -diarize model, speaker options) are off on this server: it runs without "
    f"the speaker model; locally, {SPEAKERS_SET_HINT}; a deployment serves them unless "
    "WHISPER_TRITON_SPEAKER__ENABLED=false"
)
"""The 400 for a request with speakers on when the model server has no speaker model: how to turn them on."""


@dataclass(frozen=True)
class SpeakerRequest:
    """What one transcription asks of diarization.

    Attributes: ``on`` (diarize), ``alias`` (the model named was a ``-diarize`` alias), ``names`` and
    ``references`` (known speakers, data URLs, in order), ``min_speakers``/``max_speakers``.
    """

    on: bool = False
    alias: bool = False
    names: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    min_speakers: int = 1
    max_speakers: int = MAX_SPEAKERS


def base_model(model: str | None) -> str | None:
    """The served id a model name stands for: ``whisper-1-diarize`` → ``whisper-1``."""
    return None if model is None else model.removesuffix(DIARIZE_SUFFIX)


def _bad(message: str, param: str) -> ApiError:
    return ApiError(400, ErrorCode.INVALID_FIELD, message, param=param)


def _texts(form: FormData, name: str) -> list[str]:
    values = [*form.getlist(f"{name}[]"), *form.getlist(name)]
    if any(not isinstance(v, str) for v in values):
        raise _bad(f"{name}[] takes text form fields (data URLs for references), not files", name)
    return [str(v) for v in values]


def _count(form: FormData, name: str, default: int) -> tuple[int, bool]:
    value = form.get(name)
    if value is None:
        return default, False
    try:
        number = int(str(value))
    except ValueError:
        raise _bad(f"{name} must be a whole number from 1 to {MAX_SPEAKERS}, got {value!r}", name) from None
    if not 1 <= number <= MAX_SPEAKERS:
        raise _bad(f"{name} must be from 1 to {MAX_SPEAKERS}, got {number}", name)
    return number, True


def check_chunking_strategy(form: FormData) -> None:
    """400 unless ``chunking_strategy`` is absent, ``auto``, or a ``server_vad`` object (JSON or ``[key]`` fields)."""
    value = form.get("chunking_strategy")
    parts = {
        k[len("chunking_strategy[") : -1]: str(v) for k, v in form.multi_items() if k.startswith("chunking_strategy[")
    }
    if value is None and not parts:
        return
    if value is not None and str(value).strip() == "auto":
        return
    if value is not None:
        try:
            parts = json.loads(str(value))
        except json.JSONDecodeError:
            parts = {}
        if not isinstance(parts, dict):
            parts = {}
    if parts.get("type") != "server_vad" or set(parts) - VAD_KEYS - {"type"}:
        raise _bad(
            'chunking_strategy must be "auto" or {"type": "server_vad"} with optional prefix_padding_ms, '
            "silence_duration_ms, threshold",
            "chunking_strategy",
        )
    for key in VAD_KEYS & set(parts):
        try:
            number = float(parts[key])
        except (TypeError, ValueError):
            number = -1.0
        if number < 0 or (key == "threshold" and number > 1):
            raise _bad(f"chunking_strategy {key} must be a number ≥ 0 (threshold: 0 to 1)", "chunking_strategy")


async def speaker_fields(request: Request) -> SpeakerRequest:
    """Route dependency: the request's :class:`SpeakerRequest`, or 400 ``invalid_field`` with what to fix.

    Raises:
        ApiError: 400 for a bad ``chunking_strategy``, ``min_speakers``/``max_speakers``, speaker fields
            without speakers on, or a field OpenAI refuses for the diarizing model sent with the alias.
    """
    form = await request.form()
    check_chunking_strategy(form)
    model = form.get("model")
    alias = isinstance(model, str) and model.endswith(DIARIZE_SUFFIX)
    chosen = formats.FORMATS.get(str(form.get("response_format", "json")))
    # the alias tags formats with times (verbose_json, srt, vtt); json and text have nowhere to show speakers
    on = chosen is not None and (chosen.speakers or (alias and chosen.needs_timestamps))
    names, references = _texts(form, "known_speaker_names"), _texts(form, "known_speaker_references")
    low, low_sent = _count(form, "min_speakers", 1)
    high, high_sent = _count(form, "max_speakers", MAX_SPEAKERS)
    if high < low:
        raise _bad(
            f"max_speakers ({high}) is below min_speakers ({low}): send max_speakers ≥ min_speakers", "max_speakers"
        )
    if not on and not alias and (low_sent or high_sent):  # known speakers without speakers on stay ignored, as before
        raise _bad(
            "min_speakers/max_speakers need speakers on: send response_format=diarized_json or a <model>-diarize model",
            "response_format",
        )
    if alias:
        if str(form.get("prompt", "")).strip():
            raise _bad("prompt is not supported for diarization models", "prompt")
        if "logprobs" in _texts(form, "include"):
            raise _bad("include[]=logprobs is not supported for diarization models", "include")
        if _texts(form, "timestamp_granularities") and (chosen is None or chosen.name != "verbose_json"):
            raise _bad("timestamp_granularities[] is not supported for diarization models", "timestamp_granularities")
    return SpeakerRequest(on, alias, names, references, low, high)
