"""SageMaker-style API: ``POST /invocations`` (JSON, base64 audio) and ``GET /ping``.

Request/response contract: docs/gateway.md; errors keep the ``{"code", "message"}`` shape.
"""

from __future__ import annotations

import asyncio
import difflib
import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.audio import decode_base64
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.gateway.pipeline import PipelineDep, bad_request, parse_prompt_or_400
from whisper_build.serving.transcription.windows import WindowRequest

INVOCATIONS = "/invocations"
PING = "/ping"

router = APIRouter()


class InvocationRequest(BaseModel):
    """``POST /invocations`` body. An unknown field is a 400 naming the closest known one (:func:`unknown_field`)."""

    model_config = ConfigDict(extra="forbid")

    audio_data: StrictStr = Field(description="audio file bytes, base64 (data URI prefix allowed)")
    whisper_prompt: StrictStr | None = Field("", description="context text or special-token prompt")
    repetition_penalty: float = Field(1.0, gt=0, le=10, allow_inf_nan=False)
    language: StrictStr | None = None
    timestamps: StrictBool = Field(False, description="answer the segments (from Whisper's timestamp tokens) too")


def unknown_field(name: str) -> ApiError:
    """400 ``invalid_field`` for a body key :class:`InvocationRequest` lacks, with the closest known one if any.

    ``prompt`` → "unknown field 'prompt': did you mean whisper_prompt? known fields: audio_data, …".
    """
    known = list(InvocationRequest.model_fields)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    return bad_request(f"unknown field {name!r}: {hint}known fields: {', '.join(known)}", param=name)


def _field_errors(exc: ValidationError) -> str:
    """``field: problem; ...`` for a pydantic error (e.g. ``language: Input should be a valid string``)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())


async def _parse_body(request: Request) -> InvocationRequest:
    """The JSON body as :class:`InvocationRequest`; 400 :class:`ApiError` saying what to fix."""
    body = await request.body()
    if not body:
        raise bad_request("request body is empty: send a JSON object with audio_data", ErrorCode.INVALID_JSON)
    try:
        payload = await asyncio.to_thread(json.loads, body)
    except (ValueError, RecursionError) as exc:
        raise bad_request(
            f"request body is not valid JSON ({exc}); send "
            '{"audio_data": "<base64 audio>"} with Content-Type: application/json',
            ErrorCode.INVALID_JSON,
        ) from None
    if not isinstance(payload, dict):
        raise bad_request(
            f"request body must be a JSON object, got {type(payload).__name__}; send "
            '{"audio_data": "<base64 audio>"}',
            ErrorCode.INVALID_REQUEST,
        )
    for name in payload:
        if name not in InvocationRequest.model_fields:
            raise unknown_field(str(name))
    try:
        return InvocationRequest.model_validate(payload)
    except ValidationError as exc:
        locs = [str(e["loc"][0]) for e in exc.errors() if e["loc"]]
        raise bad_request(f"invalid request: {_field_errors(exc)}", param=locs[0] if locs else None) from None


@router.post(INVOCATIONS)
async def invocations(request: Request, pipeline: PipelineDep) -> JSONResponse:
    """SageMaker-style JSON transcription (see docs/gateway.md)."""
    req = await _parse_body(request)
    prompt = parse_prompt_or_400(req.whisper_prompt, req.language, prompt_field="whisper_prompt")

    async def audio_bytes() -> bytes:
        return await asyncio.to_thread(decode_base64, req.audio_data)

    window_request = WindowRequest(prompt, req.repetition_penalty, DecodeOptions.transcript())
    result = await pipeline.run(INVOCATIONS, audio_bytes, window_request)
    body: dict[str, object] = {
        "code": 0,
        "message": "Success",
        "transcribe_text": result.text,
        "duration": round(result.duration, 3),
        "language": result.language,
    }
    if req.timestamps:
        body["segments"] = [
            {"start": round(s.start, 3), "end": round(s.end, 3), "text": s.text} for s in result.segments
        ]
    return JSONResponse(body)


@router.get(PING)
async def ping(pipeline: PipelineDep) -> JSONResponse:
    """200 while the model serves; 503 while it loads, after it stopped answering, or while draining.

    The model serves while its canary inference and client requests succeed
    (:mod:`whisper_build.serving.transcription.health`). Answers from memory: health checks put no load
    on the model server.
    """
    settings = pipeline.settings
    if pipeline.service.admission.draining:
        raise ApiError(503, ErrorCode.UNAVAILABLE, "the server is shutting down", pipeline.retry_headers())
    problem = pipeline.service.health.pod_problem()  # the same answer from every worker of the pod
    if problem is not None:
        raise ApiError(
            503,
            ErrorCode.UNAVAILABLE,
            f"model {settings.model_name!r} at {settings.triton_url} cannot serve: {problem}",
            pipeline.retry_headers(),
        )
    speakers = pipeline.service.health.speaker_failure  # the pod transcribes: still ready, the detail says what not
    return JSONResponse(
        {"status": "ok"} if speakers is None else {"status": "ok", "detail": f"model 'speaker': {speakers}"}
    )
