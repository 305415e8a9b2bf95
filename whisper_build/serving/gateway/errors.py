"""The gateway's error shapes.

``/invocations``, ``/ping`` and the rest answer ``{"code": <non-zero int>, "message": "<what to fix>"}``;
every path under ``/v1/`` answers OpenAI's shape ``{"error": {"message", "type", "param", "code"}}``
(https://platform.openai.com/docs/guides/error-codes), so that OpenAI clients raise their typed
errors. Both cover FastAPI's validation errors (normally 422), unknown routes (404/405),
unexpected exceptions (500) and the body-limit middleware's 413/429. The codes are
:class:`whisper_build.contracts.error_codes.ErrorCode` (docs/gateway.md, "Errors").
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.transcription.failures import openai_error_type

__all__ = [
    "OPENAI_PREFIX",
    "ApiError",
    "error_response",
    "install_error_handlers",
    "openai_error_body",
    "openai_error_type",
]

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered with ``status`` and ``{"code": code, "message": message}``.

    Args:
        status: HTTP status (4xx/5xx).
        code: :class:`~whisper_build.contracts.error_codes.ErrorCode`.
        message: what the caller should fix or do.
        headers: extra response headers (e.g. ``Retry-After``).
        param: the request field at fault (OpenAI's ``param``), if any.
    """

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        headers: dict[str, str] | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
        self.param = param


OPENAI_PREFIX = "/v1/"
"""Paths answered in OpenAI's error shape."""


def openai_error_body(
    status: int, code: ErrorCode, message: str, param: str | None = None, openai_code: str | None = None
) -> dict[str, object]:
    """OpenAI's error object ``{"error": {"message", "type", "param", "code"}}`` (HTTP answers and stream events)."""
    error = {"message": message, "type": openai_error_type(status), "param": param}
    return {"error": {**error, "code": openai_code or code.name.lower()}}


def error_response(
    status: int,
    code: ErrorCode,
    message: str,
    headers: dict[str, str] | None = None,
    path: str = "",
    param: str | None = None,
    openai_code: str | None = None,
) -> JSONResponse:
    """JSON error response: OpenAI's shape for ``path`` under ``/v1/``, else ``{code, message}``.

    ``openai_code`` replaces ``error.code`` (default: ``code``'s name in lower case) where OpenAI
    defines its own, e.g. ``invalid_api_key``.
    """
    if path.startswith(OPENAI_PREFIX):
        body: dict[str, object] = openai_error_body(status, code, message, param, openai_code)
    else:
        body = {"code": int(code), "message": message}
    return JSONResponse(body, status_code=status, headers=headers)


def _describe_validation(exc: RequestValidationError) -> str:
    """One line per pydantic error: ``field: problem``."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path")]
        field = ".".join(loc) or "body"
        parts.append(f"{field}: {err.get('msg', 'invalid value')}")
    return "invalid request: " + "; ".join(parts)


def install_error_handlers(app: FastAPI) -> None:
    """Register handlers so every error leaves in the error shape (never FastAPI's 422/500 body)."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, exc.headers, request.url.path, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = [str(p) for e in exc.errors() for p in e.get("loc", ())[1:2]]
        return error_response(
            400,
            ErrorCode.INVALID_FIELD,
            _describe_validation(exc),
            None,
            request.url.path,
            fields[0] if fields else None,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}
        code = codes.get(exc.status_code, ErrorCode.INVALID_REQUEST)
        if exc.status_code >= 500:
            code = ErrorCode.INTERNAL
        return error_response(exc.status_code, code, str(exc.detail), getattr(exc, "headers", None), request.url.path)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error", exc_info=exc)
        return error_response(
            500,
            ErrorCode.INTERNAL,
            f"internal error ({type(exc).__name__}); the request was not processed",
            None,
            request.url.path,
        )
