"""What the gateway's routers share: the transcription service and its mapping to HTTP answers.

One :class:`Pipeline`, built when the app starts, lives on the runtime (``app.state.runtime.pipeline``); routers receive
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
from whisper_build.serving.audio import AudioStream
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt, normalize_language, parse_prompt
from whisper_build.serving.transcription.backend import BackendError, ServedModel
from whisper_build.serving.transcription.failures import describe_failure
from whisper_build.serving.transcription.failures import rejected_param as rejected_param  # re-exported
from whisper_build.serving.transcription.service import SERVICE_ERRORS, TranscriptionService
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
        """Map pipeline errors to HTTP answers (docs/gateway.md "Errors"); re-raises anything else.

        The mapping is the core's :func:`~whisper_build.serving.transcription.failures.describe_failure`;
        this adds the headers: ``Retry-After`` when a retry later can help, ``x-should-retry: false``
        when the same request would fail again.
        """
        settings = self.settings
        failure = describe_failure(
            exc,
            timeout_seconds=settings.requests.request_timeout_seconds,
            max_audio_seconds=settings.requests.max_audio_seconds,
        )
        if failure is None:
            raise exc
        headers = {"later": self.retry_headers(), "never": NO_RETRY}.get(failure.retry)
        return ApiError(failure.status, failure.code, failure.message, headers, param=failure.param)

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


def get_pipeline(request: Request) -> Pipeline:
    """FastAPI dependency: the app's :class:`Pipeline`."""
    pipeline: Pipeline = request.app.state.runtime.pipeline
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
