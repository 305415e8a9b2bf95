"""What a failed transcription means to a caller, whatever front end answers it.

:func:`describe_failure` maps the exceptions of
:data:`~whisper_build.serving.transcription.service.SERVICE_ERRORS` (audio, admission, a predicted
timeout, the model server) to one :class:`Failure`: the
:class:`~whisper_build.contracts.error_codes.ErrorCode`, the message, the field at fault, the HTTP
status class and whether a retry can help. The HTTP gateway turns it into an ``ApiError``
(``Pipeline.to_api_error``); a live session into ``error`` and ``…transcription.failed`` events.
Docs: docs/gateway.md, "Errors".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeGuard

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.audio import AudioError, AudioTooLongError, AudioTooShortError
from whisper_build.serving.transcription.admission import Rejected
from whisper_build.serving.transcription.backend import (
    BackendError,
    BackendRejected,
    BackendTimeout,
    BackendUnavailable,
    ModelFailed,
)

__all__ = [
    "REJECTED_PARAMS",
    "Failure",
    "PredictedTimeout",
    "counts_against_model",
    "describe_failure",
    "openai_error_type",
    "rejected_param",
]

Retry = Literal["later", "never", "default"]


class PredictedTimeout(Exception):
    """Audio predicted to take longer than the request timeout, refused before admission.

    Attributes:
        audio_seconds: the audio's declared length, seconds.
        predicted_seconds: ``audio_seconds`` × ``rtf``.
        rtf: the conservative real-time factor of this pod (compute seconds per audio second).
        timeout_seconds: the request timeout.
    """

    def __init__(self, audio_seconds: float, rtf: float, timeout_seconds: float) -> None:
        self.audio_seconds, self.rtf, self.timeout_seconds = audio_seconds, rtf, timeout_seconds
        self.predicted_seconds = audio_seconds * rtf
        super().__init__(
            f"{audio_seconds:.0f} s of audio would take about {self.predicted_seconds:.0f} s here (conservative "
            f"RTF {rtf:.3g}), over the request timeout of {timeout_seconds:g} s"
        )


@dataclass(frozen=True)
class Failure:
    """One failure as every front end reports it.

    Attributes:
        status: the HTTP status (400, 413, 429, 502, 503, 504); other fronts use its class.
        code: the error code (OpenAI's ``error.code`` is its name in lower case).
        message: what the caller should fix or do.
        param: the request field at fault (``file``, ``language``, …), if one is.
        retry: ``later`` (busy or down: retry after a pause), ``never`` (the same input fails
            again), ``default`` (the client's own rule).
    """

    status: int
    code: ErrorCode
    message: str
    param: str | None = None
    retry: Retry = "default"

    @property
    def openai_type(self) -> str:
        """OpenAI's ``error.type`` for :attr:`status`."""
        return openai_error_type(self.status)

    @property
    def openai_code(self) -> str:
        """OpenAI's ``error.code``: :attr:`code`'s name in lower case."""
        return self.code.name.lower()


def openai_error_type(status: int) -> str:
    """OpenAI ``error.type`` for an HTTP status (``invalid_request_error``, ``rate_limit_error``, …)."""
    if status == 429:
        return "rate_limit_error"
    if status == 404:
        return "not_found_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


def describe_failure(
    exc: BaseException,
    *,
    timeout_seconds: float,
    max_audio_seconds: float,
    timeout_source: str = "WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS",
    timeout_advice: str = "The same audio would time out again: send shorter audio, or use the streaming or bulk path",
) -> Failure | None:
    """The :class:`Failure` ``exc`` stands for; ``None`` for anything that is not a transcription failure (a bug).

    Args:
        exc: what the transcription raised.
        timeout_seconds: the deadline that a ``BackendTimeout`` / ``TimeoutError`` ran past.
        max_audio_seconds: the audio length limit (named in the too-long message).
        timeout_source: where that deadline comes from (a setting), named in the timeout message.
        timeout_advice: the timeout message's last sentence (what the caller can do instead).
    """
    if isinstance(exc, PredictedTimeout):
        return Failure(
            413,
            ErrorCode.AUDIO_TOO_LONG,
            f"{exc.audio_seconds:.0f} s of audio would take about {exc.predicted_seconds:.0f} s here "
            f"(conservative RTF {exc.rtf:.3g}, WHISPER_GATEWAY_PREDICTED_RTF), over the request timeout of "
            f"{exc.timeout_seconds:g} s: send it with stream=true (results as they are made), as a bulk job "
            "(docs/bulk.md), or shorter",
            retry="never",
        )
    if isinstance(exc, AudioTooLongError):
        message = f"{exc} (limit {max_audio_seconds:g} s, setting WHISPER_GATEWAY_MAX_AUDIO_SECONDS)"
        return Failure(413, ErrorCode.AUDIO_TOO_LONG, message, "file")
    if isinstance(exc, AudioTooShortError):
        return Failure(400, ErrorCode.AUDIO_TOO_SHORT, f"{exc} (setting WHISPER_GATEWAY_MIN_AUDIO_SECONDS)", "file")
    if isinstance(exc, AudioError):
        return Failure(400, ErrorCode.INVALID_AUDIO, str(exc), "file")
    if isinstance(exc, Rejected):
        if exc.reason == "queue_full":
            return Failure(429, ErrorCode.OVERLOADED, str(exc), retry="later")
        return Failure(503, ErrorCode.UNAVAILABLE, str(exc), retry="later")
    if isinstance(exc, BackendRejected):
        return Failure(400, ErrorCode.INVALID_FIELD, str(exc), rejected_param(str(exc)))
    if isinstance(exc, BackendTimeout | TimeoutError):
        return Failure(
            504,
            ErrorCode.TIMEOUT,
            f"transcription took longer than {timeout_seconds:g} s "
            f"({timeout_source}); its work was cancelled. {timeout_advice}",
            retry="never",
        )
    if isinstance(exc, ModelFailed):
        return Failure(503, ErrorCode.UNAVAILABLE, str(exc), retry="never")
    if isinstance(exc, BackendUnavailable):
        return Failure(503, ErrorCode.UNAVAILABLE, str(exc), retry="later")
    if isinstance(exc, BackendError):
        return Failure(502, ErrorCode.BACKEND_ERROR, str(exc))
    return None


def counts_against_model(exc: BaseException) -> TypeGuard[BackendError]:
    """Whether ``exc`` counts against the model's health.

    A model-server failure does, except a timeout (which may be the request's own length or the
    load) and a refusal (the request's own fault).
    """
    return isinstance(exc, BackendError) and not isinstance(exc, BackendTimeout | BackendRejected | ModelFailed)


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
