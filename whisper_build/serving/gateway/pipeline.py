"""What the gateway's routers share: settings, admission, metrics, model health and the transcriber.

One :class:`Pipeline`, built with all of them when the app starts, lives on
``app.state.pipeline``; routers receive it through the FastAPI
dependency :data:`PipelineDep` and call :meth:`Pipeline.run` for every transcription (the stream:
:meth:`Pipeline.admitted`, which :meth:`~Pipeline.run` is built on), so admission, the request
timeout, in-flight and audio-seconds metrics, failure accounting and the error mapping are the same
for every API. The window pipeline itself is :mod:`whisper_build.serving.transcription`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated

from fastapi import Depends, Request

from whisper_build.serving.audio import AudioError, AudioStream, AudioTooLongError, AudioTooShortError
from whisper_build.serving.gateway.admission import AdmissionController, Rejected
from whisper_build.serving.gateway.errors import ApiError, ErrorCode
from whisper_build.serving.gateway.health import ModelHealth
from whisper_build.serving.gateway.metrics import GatewayMetrics
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt, normalize_language, parse_prompt
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
    ServedModel,
)
from whisper_build.serving.transcription.windows import Transcriber, Transcription, WindowRequest

NO_RETRY = {"x-should-retry": "false"}
"""On a 504: the official OpenAI SDKs retry 5xx twice unless told not to (their ``x-should-retry``
header); a request timeout would recur, and each retry would start the whole file again."""


class Pipeline:
    """Admission + timeout + metrics + model health around a :class:`Transcriber`.

    Args:
        settings: gateway settings.
        metrics: the app's Prometheus metrics.
        admission: the app's admission controller.
        health: told the outcome of every backend call.
        transcriber: the window pipeline over the app's backend.
    """

    def __init__(
        self,
        settings: GatewaySettings,
        metrics: GatewayMetrics,
        admission: AdmissionController,
        health: ModelHealth,
        transcriber: Transcriber,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.admission = admission
        self.health = health
        self.transcriber = transcriber

    def retry_headers(self) -> dict[str, str]:
        """``Retry-After`` header for 429/503 answers."""
        return {"Retry-After": str(self.settings.retry_after_seconds)}

    def to_api_error(self, exc: Exception) -> ApiError:
        """Map pipeline errors to HTTP answers (docs/gateway.md "Errors"); re-raises anything else."""
        settings = self.settings
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

    def refuse_predicted_timeout(self, audio_seconds: float | None) -> None:
        """413 ``audio_too_long`` when ``audio_seconds`` × ``predicted_rtf`` exceeds the request timeout.

        For the synchronous routes only (``stream=true`` sends results as they are made and is
        exempt; so are bulk jobs). Audio whose header states no length is not predicted.

        Raises:
            ApiError: 413 naming the prediction, the streaming and bulk paths; ``x-should-retry: false``.
        """
        settings = self.settings
        if audio_seconds is None:
            return
        predicted = audio_seconds * settings.predicted_rtf
        if predicted <= settings.request_timeout_seconds:
            return
        raise ApiError(
            413,
            ErrorCode.AUDIO_TOO_LONG,
            f"{audio_seconds:.0f} s of audio would take about {predicted:.0f} s here (conservative RTF "
            f"{settings.predicted_rtf:.3g}, WHISPER_GATEWAY_PREDICTED_RTF), over the request timeout of "
            f"{settings.request_timeout_seconds:g} s: send it with stream=true (results as they are made), as a "
            "bulk job (docs/bulk.md), or shorter",
            NO_RETRY,
        )

    async def served_model(self) -> ServedModel:
        """The served model's config from the model server (cached by the backend).

        Raises:
            ApiError: 503 when the model server cannot be reached, 504/502 as for transcriptions.
        """
        try:
            return await self.transcriber.backend.served_model(self.settings.request_timeout_seconds)
        except BackendError as exc:
            raise self.to_api_error(exc) from exc

    def failure(self, exc: Exception) -> ApiError:
        """Account a failed transcription and map it to its HTTP answer (:meth:`to_api_error`).

        A model-server failure other than a timeout (which may be the request's own length) or a
        refusal (the request's own fault) counts against the model's health.
        """
        if isinstance(exc, BackendError) and not isinstance(exc, BackendTimeout | BackendRejected):
            self.health.record_failure("request", exc)
        return self.to_api_error(exc)

    @asynccontextmanager
    async def admitted(
        self, read_audio: Callable[[], Awaitable[bytes]], *, predict_timeout: bool = True
    ) -> AsyncIterator[AudioStream]:
        """Read the audio's header, admit it by request and audio seconds, and hold the slot while inside.

        The header is read before admission, so over-long audio is refused (413) without waiting
        and admission charges the declared duration (``max_audio_seconds`` when the format does not
        say); the body is already in memory by then (:mod:`whisper_build.serving.gateway.body_limit`).
        In flight = admitted or waiting for a slot: demand, which may exceed capacity, so the
        autoscaling signal (in-flight ÷ capacity) keeps rising when the pod is saturated. On the way
        out the slot and the decoder are released, and a failure inside is accounted (:meth:`failure`).

        Args:
            read_audio: reads the audio container bytes (within the request timeout).
            predict_timeout: refuse audio predicted to outlast the request timeout
                (:meth:`refuse_predicted_timeout`; the stream has no whole-request limit).

        Yields: the opened audio stream.

        Raises:
            ApiError: every failure, before or inside, mapped by :meth:`failure`.
        """
        settings = self.settings
        self.metrics.inflight.inc()
        stream: AudioStream | None = None
        try:
            self.admission.check_open()
            async with asyncio.timeout(settings.request_timeout_seconds):
                stream = await asyncio.to_thread(self.transcriber.open, await read_audio())
            declared = stream.declared_seconds
            if predict_timeout:
                self.refuse_predicted_timeout(declared)
            cost = declared if declared is not None else settings.max_audio_seconds
            async with self.admission.admit(cost, arrived_before_drain=True):
                yield stream
        except (BackendError, AudioError, Rejected, TimeoutError) as exc:
            raise self.failure(exc) from exc
        finally:
            self.metrics.inflight.dec()
            if stream is not None:
                stream.close()  # also stops a decode still running in a worker thread

    async def run(
        self,
        route: str,
        read_audio: Callable[[], Awaitable[bytes]],
        request: WindowRequest,
    ) -> Transcription:
        """Transcribe the audio whole inside :meth:`admitted`, within the request timeout; count metrics.

        Args:
            route: route label for ``whisper_gateway_audio_seconds_total``.
            read_audio: reads the audio container bytes (within the request timeout).
            request: prompt, repetition penalty and decoding options for every window.

        Raises:
            ApiError: every pipeline failure, mapped by :meth:`failure`.
        """
        async with self.admitted(read_audio) as stream:
            async with asyncio.timeout(self.settings.request_timeout_seconds):
                result = await self.transcriber.transcribe(stream, request)
        self.count(route, result.duration, result.decode_temperatures)
        return result

    def stream_transcriber(self) -> Transcriber:
        """The window pipeline of ``stream=true``: smaller groups, each with its own deadline, no whole limit."""
        settings = self.settings
        plan = replace(
            self.transcriber.plan,
            group_size=settings.stream_window_group_size,
            call_timeout_seconds=settings.stream_group_timeout_seconds,
        )
        return Transcriber(self.transcriber.backend, plan)

    def count(self, route: str, audio_seconds: float, temperatures: list[float]) -> None:
        """Account one finished transcription: model health, audio seconds, window decodes per temperature."""
        if temperatures:
            self.health.record_success()  # the model answered (no windows: it was not asked)
        self.metrics.audio_seconds.labels(route=route).inc(audio_seconds)
        for temperature in temperatures:
            self.metrics.window_decodes.labels(temperature=f"{temperature:.1f}").inc()


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
