"""FastAPI app: ``/invocations`` (SageMaker-style JSON), ``/v1/audio/transcriptions`` (OpenAI),
``/ping`` and ``/metrics``. Build with :func:`create_app`; ``app`` uses the environment's settings.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from whisper_build.serving.audio import AudioError, AudioTooLongError, decode_base64
from whisper_build.serving.gateway.admission import AdmissionController, Rejected
from whisper_build.serving.gateway.backend import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    TranscriptionBackend,
    TritonBackend,
)
from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware
from whisper_build.serving.gateway.errors import ApiError, ErrorCode, install_error_handlers
from whisper_build.serving.gateway.formats import RESPONSE_FORMATS, render
from whisper_build.serving.gateway.metrics import GatewayMetrics, MetricsMiddleware
from whisper_build.serving.gateway.service import Transcriber, Transcription
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt, parse_prompt

INVOCATIONS = "/invocations"
OPENAI = "/v1/audio/transcriptions"
ROUTES = frozenset({INVOCATIONS, OPENAI, "/ping", "/metrics"})
_PING_TIMEOUT_S = 2.0

BackendFactory = Callable[[GatewaySettings], TranscriptionBackend]


class InvocationRequest(BaseModel):
    """``POST /invocations`` body. Unknown fields are ignored (older clients send extras)."""

    model_config = ConfigDict(extra="ignore")

    audio_data: StrictStr = Field(description="audio file bytes, base64 (data URI prefix allowed)")
    whisper_prompt: StrictStr | None = Field("", description="context text or special-token prompt")
    repetition_penalty: float = Field(1.0, gt=0, le=10, allow_inf_nan=False)
    language: StrictStr | None = None


def _field_errors(exc: ValidationError) -> str:
    """``field: problem; ...`` for a pydantic error (e.g. ``language: Input should be a valid string``)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in exc.errors())


def _bad_request(message: str, code: ErrorCode = ErrorCode.INVALID_FIELD) -> ApiError:
    return ApiError(400, code, message)


def _to_api_error(exc: Exception, settings: GatewaySettings) -> ApiError:
    """Map pipeline errors to HTTP answers (docs/gateway.md "Errors")."""
    retry = {"Retry-After": str(settings.retry_after_seconds)}
    if isinstance(exc, AudioTooLongError):
        return ApiError(
            413,
            ErrorCode.AUDIO_TOO_LONG,
            f"{exc} (limit {settings.max_audio_seconds:g} s, setting WHISPER_GATEWAY_MAX_AUDIO_SECONDS)",
        )
    if isinstance(exc, AudioError):
        return ApiError(400, ErrorCode.INVALID_AUDIO, str(exc))
    if isinstance(exc, Rejected):
        status = 429 if exc.reason == "queue_full" else 503
        code = ErrorCode.OVERLOADED if status == 429 else ErrorCode.UNAVAILABLE
        return ApiError(status, code, str(exc), retry)
    if isinstance(exc, BackendTimeout | TimeoutError):
        return ApiError(
            504,
            ErrorCode.TIMEOUT,
            f"transcription took longer than {settings.request_timeout_seconds:g} s "
            "(WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS); send shorter audio or retry",
        )
    if isinstance(exc, BackendUnavailable):
        return ApiError(503, ErrorCode.UNAVAILABLE, str(exc), retry)
    if isinstance(exc, BackendError):
        return ApiError(502, ErrorCode.BACKEND_ERROR, str(exc))
    raise exc


def _parse_prompt(prompt: str | None, language: str | None) -> DecodePrompt:
    try:
        return parse_prompt(prompt or "", language)
    except ValueError as exc:
        raise _bad_request(str(exc)) from exc


def create_app(settings: GatewaySettings | None = None, backend_factory: BackendFactory | None = None) -> FastAPI:
    """Build the gateway app.

    Args:
        settings: defaults to :class:`GatewaySettings` read from ``WHISPER_GATEWAY_*``.
        backend_factory: builds the model-server client at startup (default: one
            :class:`TritonBackend` on ``settings.triton_url``); closed at shutdown.
    """
    settings = settings or GatewaySettings()
    factory = backend_factory or (lambda s: TritonBackend(s.triton_url, s.model_name))
    metrics = GatewayMetrics(settings.capacity)
    admission = AdmissionController(settings.capacity, settings.queue_size, settings.queue_timeout_seconds)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        backend = factory(settings)
        app.state.transcriber = Transcriber(backend, settings)
        try:
            yield
        finally:
            admission.start_drain()
            await backend.close()

    app = FastAPI(
        title="whisper-hyperpod gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.settings = settings
    app.state.admission = admission
    app.state.metrics = metrics
    install_error_handlers(app)

    async def run(
        request: Request,
        route: str,
        read_audio: Callable[[], Awaitable[bytes]],
        prompt: DecodePrompt,
        penalty: float,
    ) -> Transcription:
        """Admit, read + transcribe within the timeout, count metrics; errors become :class:`ApiError`."""
        transcriber: Transcriber = request.app.state.transcriber
        # In flight = admitted or waiting for a slot: demand, which may exceed capacity, so the
        # autoscaling signal (in-flight ÷ capacity) keeps rising when the pod is saturated.
        metrics.inflight.inc()
        try:
            async with admission.admit():
                async with asyncio.timeout(settings.request_timeout_seconds):
                    data = await read_audio()
                    result = await transcriber.transcribe(data, prompt, penalty)
        except (AudioError, Rejected, BackendError, TimeoutError) as exc:
            raise _to_api_error(exc, settings) from exc
        finally:
            metrics.inflight.dec()
        metrics.audio_seconds.labels(route=route).inc(result.duration)
        return result

    @app.post(INVOCATIONS)
    async def invocations(request: Request) -> JSONResponse:
        """SageMaker-style JSON transcription (see docs/gateway.md)."""
        body = await request.body()
        if not body:
            raise _bad_request("request body is empty: send a JSON object with audio_data", ErrorCode.INVALID_JSON)
        try:
            payload = await asyncio.to_thread(json.loads, body)
        except (ValueError, RecursionError) as exc:
            raise _bad_request(
                f"request body is not valid JSON ({exc}); send "
                '{"audio_data": "<base64 audio>"} with Content-Type: application/json',
                ErrorCode.INVALID_JSON,
            ) from None
        if not isinstance(payload, dict):
            raise _bad_request(
                f"request body must be a JSON object, got {type(payload).__name__}; send "
                '{"audio_data": "<base64 audio>"}',
                ErrorCode.INVALID_REQUEST,
            )
        try:
            req = InvocationRequest.model_validate(payload)
        except ValidationError as exc:
            raise _bad_request(f"invalid request: {_field_errors(exc)}") from None
        prompt = _parse_prompt(req.whisper_prompt, req.language)

        async def audio_bytes() -> bytes:
            return await asyncio.to_thread(decode_base64, req.audio_data)

        result = await run(request, INVOCATIONS, audio_bytes, prompt, req.repetition_penalty)
        return JSONResponse(
            {
                "code": 0,
                "message": "Success",
                "transcribe_text": result.text,
                "duration": round(result.duration, 3),
                "language": result.language,
            }
        )

    @app.post(OPENAI)
    async def openai_transcriptions(
        request: Request,
        file: Annotated[UploadFile, File(description="audio file")],
        model: Annotated[str, Form()] = "whisper",
        prompt: Annotated[str, Form()] = "",
        language: Annotated[str | None, Form()] = None,
        temperature: Annotated[float, Form(ge=0, le=1)] = 0.0,
        response_format: Annotated[str, Form()] = "json",
    ) -> Response:
        """OpenAI-compatible transcription. ``model`` and ``temperature`` are accepted and
        ignored: the served model decodes greedily.
        """
        if response_format not in RESPONSE_FORMATS:
            raise _bad_request(f"unknown response_format {response_format!r}: use one of {', '.join(RESPONSE_FORMATS)}")
        decode_prompt = _parse_prompt(prompt, language)

        async def audio_bytes() -> bytes:
            return await file.read()

        result = await run(request, OPENAI, audio_bytes, decode_prompt, 1.0)
        return render(response_format, result.text, result.segments, result.duration, result.language)

    @app.get("/ping")
    async def ping(request: Request) -> JSONResponse:
        """200 when Triton is live and the model ready; 503 otherwise or while draining."""
        retry = {"Retry-After": str(settings.retry_after_seconds)}
        if admission.draining:
            raise ApiError(503, ErrorCode.UNAVAILABLE, "the server is shutting down", retry)
        transcriber: Transcriber = request.app.state.transcriber
        if not await transcriber.backend.ready(_PING_TIMEOUT_S):
            raise ApiError(
                503,
                ErrorCode.UNAVAILABLE,
                f"model {settings.model_name!r} at {settings.triton_url} is not ready",
                retry,
            )
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        """Prometheus text exposition of the metrics in docs/contracts.md §7."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=settings.max_body_bytes,
        setting_name="WHISPER_GATEWAY_MAX_BODY_BYTES",
        max_concurrent=settings.capacity + settings.queue_size,
        retry_after_seconds=settings.retry_after_seconds,
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics, routes=ROUTES)
    return app


def __getattr__(name: str) -> Any:
    """``app`` is built on first access, so importing this module reads no environment."""
    if name == "app":
        global app
        app = create_app()
        return app
    raise AttributeError(name)
