"""What every front end does around a transcription: admission, timeouts, metrics and failure accounting.

One :class:`TranscriptionService` per worker process holds the admission controller, the model
health, the metrics and the window pipeline; a front end (the HTTP routes, ``stream=true``, a live
session) enters :meth:`TranscriptionService.admitted` per request, transcribes inside it and calls
:meth:`~TranscriptionService.count`; it maps the exceptions of :data:`SERVICE_ERRORS` to its own
answers (the gateway: ``Pipeline.to_api_error``). Docs: docs/gateway.md, "What happens to a request".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Protocol

from whisper_build.serving.audio import AudioError, AudioStream
from whisper_build.serving.transcription.admission import AdmissionController, Rejected
from whisper_build.serving.transcription.backend import BackendError, ServedModel
from whisper_build.serving.transcription.failures import PredictedTimeout, counts_against_model
from whisper_build.serving.transcription.health import ModelHealth
from whisper_build.serving.transcription.metrics import TranscriptionMetrics
from whisper_build.serving.transcription.windows import Transcriber, Transcription, WindowRequest

__all__ = ["SERVICE_ERRORS", "PredictedTimeout", "ServiceSettings", "TranscriptionService"]


SERVICE_ERRORS = (BackendError, AudioError, Rejected, TimeoutError, PredictedTimeout)
"""What :meth:`TranscriptionService.admitted` and :meth:`~TranscriptionService.transcribe` raise for a
request (the audio, admission, the model server, a timeout); anything else is a bug."""


class ServiceSettings(Protocol):
    """The bounds the service applies (the gateway's ``WHISPER_GATEWAY_*`` settings of the same names)."""

    @property
    def request_timeout_seconds(self) -> float:
        """Longest audio read, and longest model work of one synchronous request."""

    @property
    def max_audio_seconds(self) -> float:
        """Admission charge of audio whose container states no length."""

    @property
    def predicted_rtf(self) -> float:
        """Compute seconds per audio second, for :meth:`TranscriptionService.refuse_predicted_timeout`."""

    @property
    def stream_window_group_size(self) -> int:
        """Windows per model call when results are sent as they are made."""

    @property
    def stream_group_timeout_seconds(self) -> float:
        """Longest model work per window group when results are sent as they are made."""


class TranscriptionService:
    """Admission + timeouts + metrics + model health around a :class:`Transcriber`.

    Args:
        settings: the bounds (:class:`ServiceSettings`).
        metrics: the worker's metrics (:class:`TranscriptionMetrics`).
        admission: the worker's admission controller.
        health: told the outcome of every model call.
        transcriber: the window pipeline over the worker's backend.
    """

    def __init__(
        self,
        settings: ServiceSettings,
        metrics: TranscriptionMetrics,
        admission: AdmissionController,
        health: ModelHealth,
        transcriber: Transcriber,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.admission = admission
        self.health = health
        self.transcriber = transcriber

    def refuse_predicted_timeout(self, audio_seconds: float | None) -> None:
        """Raise :class:`PredictedTimeout` when ``audio_seconds`` × ``predicted_rtf`` exceeds the request timeout.

        For requests answered whole (results sent as they are made are exempt; so are bulk jobs).
        Audio whose container states no length (``None``) is not predicted.
        """
        settings = self.settings
        if audio_seconds is not None and audio_seconds * settings.predicted_rtf > settings.request_timeout_seconds:
            raise PredictedTimeout(audio_seconds, settings.predicted_rtf, settings.request_timeout_seconds)

    async def served_model(self) -> ServedModel:
        """The served model's config from the model server (cached by the backend); raises :class:`BackendError`."""
        return await self.transcriber.backend.served_model(self.settings.request_timeout_seconds)

    def account_failure(self, exc: BaseException) -> None:
        """Count a failed transcription against the model's health when the model server is at fault.

        A model-server failure other than a timeout (which may be the request's own length) or a
        refusal (the request's own fault) counts; audio errors, admission and timeouts do not.
        """
        if counts_against_model(exc):
            self.health.record_failure("request", exc)

    @asynccontextmanager
    async def admitted(
        self, read_audio: Callable[[], Awaitable[bytes]], *, predict_timeout: bool = True
    ) -> AsyncIterator[AudioStream]:
        """Read the audio's header, admit it by request and audio seconds, and hold the slot while inside.

        The header is read before admission, so over-long audio is refused without waiting and
        admission charges the declared duration (``max_audio_seconds`` when the format does not
        say). In flight = admitted or waiting for a slot: demand, which may exceed capacity, so the
        autoscaling signal (in-flight ÷ capacity) keeps rising when the pod is saturated. On the way
        out the slot and the decoder are released, and a failure inside is accounted
        (:meth:`account_failure`) and raised unchanged.

        Args:
            read_audio: reads the audio container bytes (within the request timeout).
            predict_timeout: refuse audio predicted to outlast the request timeout
                (:meth:`refuse_predicted_timeout`; results sent as they are made have no whole-request limit).

        Yields: the opened audio stream.

        Raises:
            Rejected: draining, queue full or no room in time.
            AudioError: unreadable, too long or too short audio.
            PredictedTimeout: see ``predict_timeout``.
            TimeoutError: the audio was not read within the request timeout.
            BackendError: raised inside, by the model server.
        """
        settings = self.settings
        self.metrics.request_started()
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
            self.account_failure(exc)
            raise
        finally:
            self.metrics.request_finished()
            if stream is not None:
                stream.close()  # also stops a decode still running in a worker thread

    async def transcribe(
        self, route: str, read_audio: Callable[[], Awaitable[bytes]], request: WindowRequest
    ) -> Transcription:
        """Transcribe the audio whole inside :meth:`admitted`, within the request timeout; :meth:`count` it.

        Args:
            route: the front end's label for ``whisper_gateway_audio_seconds_total`` (e.g. the HTTP path).
            read_audio: reads the audio container bytes (within the request timeout).
            request: prompt, repetition penalty and decoding options for every window.

        Raises:
            the exceptions of :data:`SERVICE_ERRORS`, as :meth:`admitted`.
        """
        async with self.admitted(read_audio) as stream:
            async with asyncio.timeout(self.settings.request_timeout_seconds):
                result = await self.transcriber.transcribe(stream, request)
        self.count(route, result.duration, result.decode_temperatures)
        return result

    def stream_transcriber(self) -> Transcriber:
        """The window pipeline for results sent as they are made: smaller groups, each with its own deadline."""
        settings = self.settings
        plan = replace(
            self.transcriber.plan,
            group_size=settings.stream_window_group_size,
            call_timeout_seconds=settings.stream_group_timeout_seconds,
        )
        return Transcriber(self.transcriber.backend, plan)

    def count(self, route: str, audio_seconds: float, temperatures: Sequence[float]) -> None:
        """Account one finished transcription: model health, audio seconds, window decodes per temperature."""
        if temperatures:
            self.health.record_success()  # the model answered (no windows: it was not asked)
        self.metrics.transcribed(route, audio_seconds, temperatures)
