"""What the gateway's routers share: the transcription service and its mapping to HTTP answers.

One :class:`Pipeline`, built when the app starts, lives on ``app.state.pipeline``; routers receive
it through the FastAPI dependency :data:`PipelineDep` and call :meth:`Pipeline.run` for every
transcription (the stream: :meth:`Pipeline.admitted`). Admission, timeouts, metrics and failure
accounting are the core's
:class:`~whisper_build.serving.transcription.service.TranscriptionService`; this module maps what
it raises to :class:`~whisper_build.serving.gateway.errors.ApiError` (docs/gateway.md, "Errors").
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, Request

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.audio import AudioError, AudioStream, AudioTooLongError, AudioTooShortError
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt, normalize_language, parse_prompt
from whisper_build.serving.transcription.admission import Rejected
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
    ServedModel,
)
from whisper_build.serving.transcription.service import SERVICE_ERRORS, PredictedTimeout, TranscriptionService
from whisper_build.serving.transcription.windows import Transcriber, Transcription, WindowRequest

NO_RETRY = {"x-should-retry": "false"}
"""On a 504: the official OpenAI SDKs retry 5xx twice unless told not to (their ``x-should-retry``
header); a request timeout would recur, and each retry would start the whole file again."""


class Pipeline:
    """The HTTP face of a :class:`TranscriptionService`: its errors as :class:`ApiError` answers.

    Args:
        settings: gateway settings.
        service: the worker's transcription service (admission, health, metrics, transcriber).
    """

    def __init__(self, settings: GatewaySettings, service: TranscriptionService) -> None:
        self.settings = settings
        self.service = service

    def retry_headers(self) -> dict[str, str]:
        """``Retry-After`` header for 429/503 answers."""
        return {"Retry-After": str(self.settings.retry_after_seconds)}

    def to_api_error(self, exc: Exception) -> ApiError:
        """Map pipeline errors to HTTP answers (docs/gateway.md "Errors"); re-raises anything else."""
        settings = self.settings
        if isinstance(exc, PredictedTimeout):
            return ApiError(
                413,
                ErrorCode.AUDIO_TOO_LONG,
                f"{exc.audio_seconds:.0f} s of audio would take about {exc.predicted_seconds:.0f} s here "
                f"(conservative RTF {exc.rtf:.3g}, WHISPER_GATEWAY_PREDICTED_RTF), over the request timeout of "
                f"{exc.timeout_seconds:g} s: send it with stream=true (results as they are made), as a bulk job "
                "(docs/bulk.md), or shorter",
                NO_RETRY,
            )
        if isinstance(exc, AudioTooLongError):
            return ApiError(
                413,
                ErrorCode.AUDIO_TOO_LONG,
                f"{exc} (limit {settings.max_audio_seconds:g} s, setting WHISPER_GATEWAY_MAX_AUDIO_SECONDS)",
                param="file",
            )
        if isinstance(exc, AudioTooShortError):
            return ApiError(
                400,
                ErrorCode.AUDIO_TOO_SHORT,
                f"{exc} (setting WHISPER_GATEWAY_MIN_AUDIO_SECONDS)",
                param="file",
            )
        if isinstance(exc, AudioError):
            return ApiError(400, ErrorCode.INVALID_AUDIO, str(exc), param="file")
        if isinstance(exc, Rejected):
            status = 429 if exc.reason == "queue_full" else 503
            code = ErrorCode.OVERLOADED if status == 429 else ErrorCode.UNAVAILABLE
            return ApiError(status, code, str(exc), self.retry_headers())
        if isinstance(exc, BackendRejected):
            return ApiError(400, ErrorCode.INVALID_FIELD, str(exc), param=rejected_param(str(exc)))
        if isinstance(exc, BackendTimeout | TimeoutError):
            return ApiError(
                504,
                ErrorCode.TIMEOUT,
                f"transcription took longer than {settings.request_timeout_seconds:g} s "
                "(WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS); its work was cancelled. The same audio would "
                "time out again: send shorter audio, or use the streaming or bulk path",
                NO_RETRY,
            )
        if isinstance(exc, BackendUnavailable):
            return ApiError(503, ErrorCode.UNAVAILABLE, str(exc), self.retry_headers())
        if isinstance(exc, BackendError):
            return ApiError(502, ErrorCode.BACKEND_ERROR, str(exc))
        raise exc

    async def served_model(self) -> ServedModel:
        """The served model's config from the model server (cached by the backend).

        Raises:
            ApiError: 503 when the model server cannot be reached, 504/502 as for transcriptions.
        """
        try:
            return await self.service.served_model()
        except BackendError as exc:
            raise self.to_api_error(exc) from exc

    def failure(self, exc: Exception) -> ApiError:
        """Account a failed transcription (:meth:`TranscriptionService.account_failure`) and map it (:meth:`to_api_error`)."""
        self.service.account_failure(exc)
        return self.to_api_error(exc)

    @asynccontextmanager
    async def admitted(
        self, read_audio: Callable[[], Awaitable[bytes]], *, predict_timeout: bool = True
    ) -> AsyncIterator[AudioStream]:
        """:meth:`TranscriptionService.admitted`, its failures mapped by :meth:`to_api_error`.

        The body is already in memory when the audio is read (:mod:`whisper_build.serving.gateway.body_limit`).

        Raises:
            ApiError: every failure, before or inside (413 for audio predicted to outlast the request timeout).
        """
        try:
            async with self.service.admitted(read_audio, predict_timeout=predict_timeout) as stream:
                yield stream
        except SERVICE_ERRORS as exc:
            raise self.to_api_error(exc) from exc

    async def run(
        self, route: str, read_audio: Callable[[], Awaitable[bytes]], request: WindowRequest
    ) -> Transcription:
        """:meth:`TranscriptionService.transcribe` (whole, within the request timeout), its failures mapped.

        Raises:
            ApiError: every pipeline failure, mapped by :meth:`to_api_error`.
        """
        try:
            return await self.service.transcribe(route, read_audio, request)
        except SERVICE_ERRORS as exc:
            raise self.to_api_error(exc) from exc

    def stream_transcriber(self) -> Transcriber:
        """The window pipeline of ``stream=true`` (:meth:`TranscriptionService.stream_transcriber`)."""
        return self.service.stream_transcriber()

    def count(self, route: str, audio_seconds: float, temperatures: list[float]) -> None:
        """Account one finished transcription (:meth:`TranscriptionService.count`)."""
        self.service.count(route, audio_seconds, temperatures)


REJECTED_PARAMS = (
    ("word timestamps", "timestamp_granularities"),
    ("temperature", "temperature"),
    ("timestamps", "response_format"),
    ("cannot translate", "model"),
    ("language", "language"),
)
"""(phrase, field), first match wins, for the model's refusals (``triton_model.batching._check_model``,
``decoding.check_supported``; their messages name engine ``ctranslate2`` as the fix, hence no bare "translat")."""


def rejected_param(message: str) -> str | None:
    """The request field a model refusal (Triton INVALID_ARG) is about, from its message; None if none fits.

    ``"this model is English-only (.en): language 'de' is not supported; …"`` → ``language``;
    translation on an English-only model → ``model``; word timestamps on an engine without
    alignment → ``timestamp_granularities``.
    """
    lowered = message.lower()
    return next((field for phrase, field in REJECTED_PARAMS if phrase in lowered), None)


def get_pipeline(request: Request) -> Pipeline:
    """FastAPI dependency: the app's :class:`Pipeline`."""
    pipeline: Pipeline = request.app.state.pipeline
    return pipeline


PipelineDep = Annotated[Pipeline, Depends(get_pipeline)]
"""Route parameter type that injects the app's :class:`Pipeline`."""


def bad_request(message: str, code: ErrorCode = ErrorCode.INVALID_FIELD, param: str | None = None) -> ApiError:
    """400 :class:`ApiError` with ``message`` (``param``: the request field at fault, if one is)."""
    return ApiError(400, code, message, param=param)


def parse_prompt_or_400(prompt: str | None, language: str | None, prompt_field: str = "prompt") -> DecodePrompt:
    """:func:`whisper_build.serving.prompt.parse_prompt`, its ValueError as a 400 ApiError.

    ``param`` is ``language`` for an unknown language code, else ``prompt_field`` (the prompt's name
    on the route: ``prompt``, or ``whisper_prompt`` on ``/invocations``).
    """
    try:
        normalize_language(language)
    except ValueError as exc:
        raise bad_request(str(exc), param="language") from exc
    try:
        return parse_prompt(prompt or "", language)
    except ValueError as exc:
        raise bad_request(str(exc), param=prompt_field) from exc
