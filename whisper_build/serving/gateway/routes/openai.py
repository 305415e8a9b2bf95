"""OpenAI-compatible audio API.

``POST /v1/audio/transcriptions`` and ``/v1/audio/translations`` (multipart form), ``GET
/v1/models`` and ``/v1/models/{id}``. Field support and differences from OpenAI's API:
docs/gateway.md ("OpenAI API parity"). Errors on every ``/v1/`` path use OpenAI's shape
(:mod:`whisper_build.serving.gateway.errors`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, Form, UploadFile
from fastapi.responses import JSONResponse, Response

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.audio import AudioError
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.diarization.assign import label_segments
from whisper_build.serving.diarization.references import SpeakerReferenceError, known_speakers
from whisper_build.serving.diarization.speakers import SpeakerOptions
from whisper_build.serving.gateway.diarize import PendingTurns
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.gateway.pipeline import Pipeline, PipelineDep, parse_prompt_or_400
from whisper_build.serving.gateway.routes.form_fields import transcription_fields, translation_fields
from whisper_build.serving.gateway.routes.multipart_form import ExtendedFilenameRoute
from whisper_build.serving.gateway.routes.speaker_fields import SPEAKERS_OFF, SpeakerRequest, base_model, speaker_fields
from whisper_build.serving.gateway.streaming import parse_stream_flag, transcript_stream
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.transcription import formats
from whisper_build.serving.transcription.backend import BackendError, ServedModel
from whisper_build.serving.transcription.formats import ResponseFormat
from whisper_build.serving.transcription.request import WindowRequest

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
MODELS = "/v1/models"
MODEL = "/v1/models/{model_id}"
GRANULARITIES = ("segment", "word")
OWNER = "whisper-hyperpod"

router = APIRouter(route_class=ExtendedFilenameRoute)

FileField = Annotated[UploadFile, File(description="audio file")]
ModelField = Annotated[str | None, Form()]
PromptField = Annotated[str, Form()]
FormatField = Annotated[str, Form()]
TemperatureField = Annotated[float, Form(ge=0, le=1)]
GranularityField = Annotated[list[str] | None, Form(alias="timestamp_granularities[]")]
GranularityPlainField = Annotated[list[str] | None, Form(alias="timestamp_granularities")]


def served_ids(pipeline: Pipeline) -> list[str]:
    """Model ids this gateway answers to: the served model name, then its aliases."""
    return pipeline.settings.served_ids


def _check_model(pipeline: Pipeline, model: str | None) -> None:
    model = base_model(model)  # ``<id>-diarize``: the served model with speakers on
    if model is not None and model not in served_ids(pipeline):
        raise ApiError(
            404,
            ErrorCode.MODEL_NOT_FOUND,
            f"model {model!r} is not served here; use one of {', '.join(served_ids(pipeline))} (GET /v1/models)",
            param="model",
        )


@dataclass(frozen=True)
class AudioRequest:
    """One OpenAI audio request, its form fields parsed once; the route's only value past the form.

    Attributes:
        route: the path (metrics label). task: ``transcribe`` or ``translate``.
        file: the upload (read once, by the pipeline). model: the ``model`` field, ``None`` if absent.
        prompt: prompt, language and task for the decoder. response_format: the field as sent.
        chosen: its entry of :data:`~whisper_build.serving.transcription.formats.FORMATS`, resolved once;
            ``None`` for an unknown name (400 after the model check).
        temperature: 0-1. granularities: ``timestamp_granularities`` as sent, both spellings.
        stream: ``stream=true``. speakers: the speaker fields (transcriptions only).
    """

    route: str
    task: Literal["transcribe", "translate"]
    file: UploadFile
    model: str | None
    prompt: DecodePrompt
    response_format: str
    chosen: ResponseFormat | None
    temperature: float
    granularities: tuple[str, ...] = ()
    stream: bool = False
    speakers: SpeakerRequest | None = None


def _response_format_or_400(request: AudioRequest) -> ResponseFormat:
    """The request's format. Raises: ApiError 400 naming ``response_format`` and the formats there are."""
    if request.chosen is None:
        raise ApiError(
            400, ErrorCode.INVALID_FIELD, str(formats.unknown_format(request.response_format)), param="response_format"
        )
    return request.chosen


def _options(request: AudioRequest, chosen: ResponseFormat) -> DecodeOptions:
    """Decoding options for a request in format ``chosen``, the same for every format (:meth:`DecodeOptions.transcript`).

    Raises: ApiError 400 for an unknown granularity, or granularities with a format without words.
    """
    granularities = request.granularities
    unknown = [g for g in granularities if g not in GRANULARITIES]
    if unknown:
        raise ApiError(
            400,
            ErrorCode.INVALID_FIELD,
            f"unknown timestamp_granularities {unknown}: use segment and/or word",
            param="timestamp_granularities",
        )
    if granularities and not chosen.words:
        raise ApiError(
            400,
            ErrorCode.INVALID_FIELD,
            f"timestamp_granularities needs response_format {' or '.join(formats.names(lambda f: f.words))} "
            f"(got {request.response_format!r})",
            param="timestamp_granularities",
        )
    return DecodeOptions.transcript(word_timestamps="word" in granularities, temperature=request.temperature)


async def _audio(pipeline: Pipeline, request: AudioRequest) -> Response:
    """Transcribe (or stream) one request and answer in its format, with speakers when asked."""
    _check_model(pipeline, request.model)
    chosen = _response_format_or_400(request)
    options = _options(request, chosen)
    speaker_options = await _speaker_options(pipeline, request.speakers)
    decoded = options
    if speaker_options is not None:  # speakers word by word where the engine has word times, else by segment
        words = options.word_timestamps or (await pipeline.served_model()).word_timings
        decoded = DecodeOptions.transcript(words, temperature=request.temperature)
    diarized = None if speaker_options is None else PendingTurns(pipeline, speaker_options)

    async def audio_bytes() -> bytes:
        data = await request.file.read()
        if diarized is not None:  # the speaker model runs concurrently with the windows' transcription
            diarized.start(data)
        return data

    window_request = WindowRequest(request.prompt, 1.0, decoded)
    if request.stream:
        return await transcript_stream(pipeline, request.route, audio_bytes, window_request, diarized)
    try:
        result = await pipeline.run(request.route, audio_bytes, window_request)
    except BaseException:
        if diarized is not None:
            diarized.cancel()
        raise
    labelled = None
    if diarized is not None:
        try:
            labelled = label_segments(result.segments, await diarized.turns())
        except (AudioError, BackendError) as exc:  # answered as the windows' errors are
            raise pipeline.failure(exc) from exc
    transcript = formats.Transcript(
        result.text,
        result.segments,
        result.duration,
        result.language or ("en" if request.task == "translate" else None),
        task=request.task,
        words=options.word_timestamps,
        line_chars=pipeline.settings.subtitle_line_chars,
        speakers=labelled,
        file_id=formats.rttm_file_id(request.file.filename),
    )
    return Response(chosen.body(transcript), media_type=chosen.media_type)


async def _speaker_options(pipeline: Pipeline, speakers: SpeakerRequest | None) -> SpeakerOptions | None:
    """The clustering options of a request with speakers on (known references decoded), else None.

    Raises: ApiError 400 naming the known-speaker field to fix, or saying how to turn speakers on when
    this server has no speaker model (:data:`SPEAKERS_OFF`); 503/504 when the model server cannot tell.
    """
    if speakers is None or not speakers.on:
        return None
    try:
        served = await pipeline.service.transcriber.backend.speakers_served(
            pipeline.settings.requests.request_timeout_seconds
        )
    except BackendError as exc:
        raise pipeline.to_api_error(exc) from exc
    if not served:
        raise ApiError(
            400, ErrorCode.INVALID_FIELD, SPEAKERS_OFF, param="model" if speakers.alias else "response_format"
        )
    try:
        known = await asyncio.to_thread(known_speakers, speakers.names, speakers.references)
    except SpeakerReferenceError as exc:
        raise ApiError(400, ErrorCode.INVALID_FIELD, str(exc), param=exc.param) from exc
    return SpeakerOptions(speakers.min_speakers, speakers.max_speakers, known)


@router.post(TRANSCRIPTIONS, dependencies=[Depends(transcription_fields)])
async def transcriptions(
    pipeline: PipelineDep,
    speakers: Annotated[SpeakerRequest, Depends(speaker_fields)],
    file: FileField,
    model: ModelField = None,
    prompt: PromptField = "",
    language: Annotated[str | None, Form()] = None,
    temperature: TemperatureField = 0.0,
    response_format: FormatField = "json",
    granularities: GranularityField = None,
    granularities_plain: GranularityPlainField = None,
    stream: Annotated[str | None, Form()] = None,
) -> Response:
    """OpenAI-compatible transcription (``model`` must be a served id; see docs/gateway.md).

    ``stream=true`` answers OpenAI's transcript events (:mod:`whisper_build.serving.gateway.streaming`),
    for every served id, ``whisper-1`` included (OpenAI ignores ``stream`` for ``whisper-1``).
    """
    decode_prompt = parse_prompt_or_400(prompt, language)
    chosen = formats.FORMATS.get(response_format)  # the request's one format lookup
    request = AudioRequest(
        TRANSCRIPTIONS, "transcribe", file, model, decode_prompt, response_format, chosen, temperature,
        granularities=(*(granularities or []), *(granularities_plain or [])),
        stream=parse_stream_flag(stream, response_format, chosen),
        speakers=speakers,
    )  # fmt: skip
    return await _audio(pipeline, request)


@router.post(TRANSLATIONS, dependencies=[Depends(translation_fields)])
async def translations(
    pipeline: PipelineDep,
    file: FileField,
    model: ModelField = None,
    prompt: PromptField = "",
    temperature: TemperatureField = 0.0,
    response_format: FormatField = "json",
) -> Response:
    """OpenAI-compatible translation to English (multilingual models; English-only models answer 400)."""
    base = parse_prompt_or_400(prompt, None)
    decode_prompt = DecodePrompt(base.previous_text, base.language, "translate", base.prefix)
    chosen = formats.FORMATS.get(response_format)  # the request's one format lookup
    request = AudioRequest(
        TRANSLATIONS, "translate", file, model, decode_prompt, response_format, chosen, temperature
    )  # fmt: skip
    return await _audio(pipeline, request)


def _model_object(model_id: str, served: ServedModel) -> dict[str, object]:
    """OpenAI's model object, plus what the Triton model config says (``multilingual``, ``engine``)."""
    return {
        "id": model_id,
        "object": "model",
        "created": 0,
        "owned_by": OWNER,
        "multilingual": served.multilingual,
        "engine": served.engine,
    }


@router.get(MODELS)
async def models(pipeline: PipelineDep) -> JSONResponse:
    """OpenAI ``models.list``: the served model and its aliases (503 while Triton cannot be reached)."""
    served = await pipeline.served_model()
    return JSONResponse({"object": "list", "data": [_model_object(m, served) for m in served_ids(pipeline)]})


@router.get(MODEL)
async def model(model_id: str, pipeline: PipelineDep) -> JSONResponse:
    """OpenAI ``models.retrieve``; 404 in OpenAI's shape for an id not served here."""
    _check_model(pipeline, model_id)
    return JSONResponse(_model_object(model_id, await pipeline.served_model()))
