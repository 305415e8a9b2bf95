"""The server events of a live session, as typed values; :meth:`ServerEvent.wire` is the JSON object sent.

Shapes and names follow openai-python 3.51.0 ``types/realtime`` (``InputAudioBufferCommittedEvent``,
``ConversationItemInputAudioTranscriptionDeltaEvent``, ``RealtimeErrorEvent``, …); on the wire each object
starts with ``type`` and ``event_id``, then the fields in the order declared here. The client's side (the
session configuration and its updates) is :mod:`.events`. Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from whisper_build.serving.transcription.failures import Failure

__all__ = [
    "BufferCleared",
    "BufferCommitted",
    "ErrorEvent",
    "Send",
    "ServerEvent",
    "SessionEvent",
    "SpeechStarted",
    "SpeechStopped",
    "TimeoutTriggered",
    "TranscriptCompleted",
    "TranscriptDelta",
    "TranscriptFailed",
    "TranscriptSegment",
    "error_event",
    "event_id",
    "failure_error",
]

Send = Callable[[dict[str, Any]], Awaitable[None]]
"""Sends one server event's JSON object (:meth:`ServerEvent.wire`) to the client."""

_TRANSCRIPTION = "conversation.item.input_audio_transcription"


def event_id() -> str:
    """A fresh server ``event_id``."""
    return "event_" + secrets.token_hex(10)


@dataclass(frozen=True, kw_only=True)
class ServerEvent:
    """One server event: ``type`` (fixed per class, but for :class:`SessionEvent`) and a fresh ``event_id``."""

    type: str
    event_id: str = field(default_factory=event_id)

    def wire(self) -> dict[str, Any]:
        """The JSON object sent: the fields in declaration order, nested values as objects."""
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class SessionEvent(ServerEvent):
    """``session.created``, ``session.updated`` or ``transcription_session.updated`` (legacy clients)."""

    session: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class BufferCleared(ServerEvent):
    """``input_audio_buffer.cleared``."""

    type: str = field(default="input_audio_buffer.cleared", init=False)


@dataclass(frozen=True, kw_only=True)
class SpeechStarted(ServerEvent):
    """``input_audio_buffer.speech_started``: the VAD heard a turn start at ``audio_start_ms`` of session audio."""

    type: str = field(default="input_audio_buffer.speech_started", init=False)
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True, kw_only=True)
class SpeechStopped(ServerEvent):
    """``input_audio_buffer.speech_stopped``: the turn ended at ``audio_end_ms``."""

    type: str = field(default="input_audio_buffer.speech_stopped", init=False)
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True, kw_only=True)
class TimeoutTriggered(ServerEvent):
    """``input_audio_buffer.timeout_triggered``: ``idle_timeout_ms`` of silence, committed as an empty item."""

    type: str = field(default="input_audio_buffer.timeout_triggered", init=False)
    item_id: str
    audio_start_ms: int
    audio_end_ms: int


@dataclass(frozen=True, kw_only=True)
class BufferCommitted(ServerEvent):
    """``input_audio_buffer.committed``: the turn is an item, after ``previous_item_id`` (``None``: the first)."""

    type: str = field(default="input_audio_buffer.committed", init=False)
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True, kw_only=True)
class TranscriptDelta(ServerEvent):
    """``….delta``: words of the item's transcript, appended to those sent before (never retracted)."""

    type: str = field(default=f"{_TRANSCRIPTION}.delta", init=False)
    item_id: str
    content_index: int = 0
    delta: str


@dataclass(frozen=True, kw_only=True)
class DurationUsage:
    """A transcription's ``usage``: the item's audio, seconds (3 decimals)."""

    type: str = field(default="duration", init=False)
    seconds: float


@dataclass(frozen=True, kw_only=True)
class TranscriptCompleted(ServerEvent):
    """``….completed``: the item's whole ``transcript``; ``speaker`` (an extension) only with speakers on."""

    type: str = field(default=f"{_TRANSCRIPTION}.completed", init=False)
    item_id: str
    content_index: int = 0
    transcript: str
    usage: DurationUsage
    speaker: str | None = None

    def wire(self) -> dict[str, Any]:
        """As :meth:`ServerEvent.wire`, without ``speaker`` when it is ``None``."""
        body = super().wire()
        if self.speaker is None:
            del body["speaker"]
        return body


@dataclass(frozen=True)
class ErrorDetail:
    """An ``error`` object: OpenAI's ``type`` and ``code``, the ``message``, the field at fault (``param``)."""

    type: str
    code: str
    message: str
    param: str | None


@dataclass(frozen=True, kw_only=True)
class TranscriptFailed(ServerEvent):
    """``….failed``: the item's decode failed (``error`` as the HTTP gateway maps the same failure)."""

    type: str = field(default=f"{_TRANSCRIPTION}.failed", init=False)
    item_id: str
    content_index: int = 0
    error: ErrorDetail


@dataclass(frozen=True, kw_only=True)
class TranscriptSegment(ServerEvent):
    """``….segment``: the item's speaker-labelled span (``start``/``end``: session seconds, 3 decimals)."""

    type: str = field(default=f"{_TRANSCRIPTION}.segment", init=False)
    item_id: str
    content_index: int = 0
    id: str
    start: float
    end: float
    speaker: str
    text: str


@dataclass(frozen=True)
class RealtimeError(ErrorDetail):
    """An ``error`` event's object: :class:`ErrorDetail` and the client ``event_id`` at fault, if any."""

    event_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class ErrorEvent(ServerEvent):
    """``error``: a refused client event or a session-level failure; the session goes on."""

    type: str = field(default="error", init=False)
    error: RealtimeError


LIVE_PARAMS = {
    "language": "session.audio.input.transcription.language",
    "model": "session.audio.input.transcription.model",
    "prompt": "session.audio.input.transcription.prompt",
}
"""A file request's field → the session field that sets it (other fields do not exist in a session)."""


def failure_error(failure: Failure) -> ErrorDetail:
    """The ``error`` object of a core :class:`~whisper_build.serving.transcription.failures.Failure`.

    ``type``/``code`` are those the HTTP gateway answers for the same failure (``server_error`` /
    ``timeout``, ``backend_error``, ``unavailable``; ``invalid_request_error`` / ``invalid_field``
    for a model refusal); ``param`` is the session field at fault, if one is.
    """
    param = LIVE_PARAMS.get(failure.param or "")
    return ErrorDetail(failure.openai_type, failure.openai_code, failure.message, param)


def error_event(
    message: str, code: str, param: str | None = None, client_event_id: str | None = None, kind: str = ""
) -> ErrorEvent:
    """OpenAI's ``error`` server event (``invalid_request_error`` unless ``kind`` says otherwise)."""
    return ErrorEvent(error=RealtimeError(kind or "invalid_request_error", code, message, param, client_event_id))
