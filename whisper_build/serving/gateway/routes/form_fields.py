"""Multipart fields that must appear once: a second ``file`` or ``model`` is a 400 naming it, not "last wins".

FastAPI binds a repeated form field to the last value silently, so a client that sends two files
(or two models) gets one of them transcribed without being told. :func:`single_fields` is a route
dependency that reads the parsed form (Starlette caches it on the request, so it is parsed once)
and refuses repeats of :data:`SINGLE` fields.
"""

from __future__ import annotations

from fastapi import Request

from whisper_build.serving.gateway.errors import ApiError, ErrorCode

__all__ = ["SINGLE", "single_fields"]

SINGLE = ("file", "model", "language", "prompt", "response_format", "temperature", "stream")
"""Fields of OpenAI's audio API that take one value (``timestamp_granularities[]`` may repeat)."""


async def single_fields(request: Request) -> None:
    """Raise a 400 ``invalid_field`` naming the first field of :data:`SINGLE` sent more than once.

    Raises:
        ApiError: 400 with ``param`` = the field.
    """
    form = await request.form()
    for name in SINGLE:
        count = len(form.getlist(name))
        if count > 1:
            raise ApiError(400, ErrorCode.INVALID_FIELD, f"{name}: sent {count} times; send it once", param=name)
