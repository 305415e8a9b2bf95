"""OpenAI-compatible audio API: ``POST /v1/audio/transcriptions`` (multipart form).

Field support and differences from OpenAI's API: docs/gateway.md.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.responses import Response

from whisper_build.serving.gateway.formats import RESPONSE_FORMATS, render
from whisper_build.serving.gateway.pipeline import PipelineDep, bad_request, parse_prompt_or_400

TRANSCRIPTIONS = "/v1/audio/transcriptions"

router = APIRouter()


@router.post(TRANSCRIPTIONS)
async def transcriptions(
    pipeline: PipelineDep,
    file: Annotated[UploadFile, File(description="audio file")],
    model: Annotated[str, Form()] = "whisper",
    prompt: Annotated[str, Form()] = "",
    language: Annotated[str | None, Form()] = None,
    temperature: Annotated[float, Form(ge=0, le=1)] = 0.0,
    response_format: Annotated[str, Form()] = "json",
) -> Response:
    """OpenAI-compatible transcription.

    ``model`` and ``temperature`` are accepted and ignored: the served model decodes greedily.
    """
    if response_format not in RESPONSE_FORMATS:
        raise bad_request(f"unknown response_format {response_format!r}: use one of {', '.join(RESPONSE_FORMATS)}")
    decode_prompt = parse_prompt_or_400(prompt, language)

    async def audio_bytes() -> bytes:
        return await file.read()

    result = await pipeline.run(TRANSCRIPTIONS, audio_bytes, decode_prompt, 1.0)
    return render(response_format, result.text, result.segments, result.duration, result.language)
