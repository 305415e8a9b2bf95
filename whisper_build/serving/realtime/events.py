"""Realtime transcription client events in OpenAI's shapes: the session configuration and its updates.

Shapes follow openai-python 3.51.0 ``types/realtime`` (GA: ``session.update`` with ``session.type:
"transcription"``) and ``types/beta/realtime`` (legacy ``transcription_session.update``, flat fields).
A partial update merges into the effective configuration; ``null`` clears a field (OpenAI's
semantics). Errors are :class:`ProtocolError` (sent as an ``error`` event; the session goes on). The
session object the server echoes is :func:`session_object`; the server events are :mod:`.server_events`.
Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["ProtocolError", "SessionConfig", "legacy_to_ga", "legacy_view", "merge", "session_object"]


class ProtocolError(Exception):
    """A client event the session refuses: sent as OpenAI's ``error`` event."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.param = param


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class AudioFormatConfig(_Model):
    type: Literal["audio/pcm", "audio/pcmu", "audio/pcma"] = "audio/pcm"
    rate: Literal[24000] | None = Field(24000, description="audio/pcm only: 24 kHz, as OpenAI")


class TranscriptionConfig(_Model):
    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    known_speaker_names: list[str] | None = Field(None, description="extension: with a <model>-diarize model")
    known_speaker_references: list[str] | None = Field(None, description="extension: audio data URLs, 2-10 s each")


class TurnDetectionConfig(_Model):
    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float | None = Field(None, ge=0.0, le=1.0)
    prefix_padding_ms: int | None = Field(None, ge=0, le=5000)
    silence_duration_ms: int | None = Field(None, ge=0, le=10_000)
    idle_timeout_ms: int | None = Field(None, ge=1000)
    eagerness: Literal["low", "medium", "high", "auto"] | None = None


class NoiseReductionConfig(_Model):
    type: Literal["near_field", "far_field"]


class AudioInputConfig(_Model):
    format: AudioFormatConfig = Field(default_factory=AudioFormatConfig)
    noise_reduction: NoiseReductionConfig | None = None
    transcription: TranscriptionConfig = Field(default_factory=TranscriptionConfig)
    turn_detection: TurnDetectionConfig | None = Field(default_factory=TurnDetectionConfig)


class AudioConfig(_Model):
    input: AudioInputConfig = Field(default_factory=AudioInputConfig)


class SessionConfig(_Model):
    """The effective transcription session (GA shape)."""

    type: Literal["transcription"] = "transcription"
    audio: AudioConfig = Field(default_factory=AudioConfig)
    include: list[Literal["item.input_audio_transcription.logprobs"]] | None = None


def merge(config: SessionConfig, update: dict[str, Any]) -> SessionConfig:
    """``config`` with ``update`` (a GA ``session`` object, partial) merged in; ``null`` clears a field.

    Raises:
        ProtocolError: the merged session is invalid (the message names the field).
    """
    if not isinstance(update, dict):
        raise ProtocolError("session must be an object", "invalid_type", "session")
    if update.get("type", "transcription") != "transcription":
        raise ProtocolError(
            "this endpoint serves transcription sessions only: set session.type to 'transcription'",
            "invalid_value",
            "session.type",
        )
    merged = _deep_merge(config.model_dump(mode="json"), update)
    try:
        return SessionConfig.model_validate(merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        param = "session." + ".".join(str(p) for p in first["loc"])
        raise ProtocolError(f"{param}: {first['msg']}", "invalid_value", param) from None


def _deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


_LEGACY_FORMATS = {
    "pcm16": {"type": "audio/pcm", "rate": 24000},
    "g711_ulaw": {"type": "audio/pcmu", "rate": None},
    "g711_alaw": {"type": "audio/pcma", "rate": None},
}


def legacy_to_ga(session: dict[str, Any]) -> dict[str, Any]:
    """A legacy ``transcription_session.update`` session (flat fields) as a GA partial session.

    Raises:
        ProtocolError: an unknown ``input_audio_format``.
    """
    if not isinstance(session, dict):
        raise ProtocolError("session must be an object", "invalid_type", "session")
    audio_input: dict[str, Any] = {}
    if "input_audio_format" in session:
        fmt = _LEGACY_FORMATS.get(session["input_audio_format"])
        if fmt is None:
            raise ProtocolError(
                f"input_audio_format must be one of {', '.join(_LEGACY_FORMATS)}",
                "invalid_value",
                "session.input_audio_format",
            )
        audio_input["format"] = fmt
    for legacy, ga in (
        ("input_audio_transcription", "transcription"),
        ("turn_detection", "turn_detection"),
        ("input_audio_noise_reduction", "noise_reduction"),
    ):
        if legacy in session:
            audio_input[ga] = session[legacy]
    out: dict[str, Any] = {"type": "transcription", "audio": {"input": audio_input}}
    if "include" in session:
        out["include"] = session["include"]
    return out


def legacy_view(session: dict[str, Any]) -> dict[str, Any]:
    """A GA session object (as :func:`session_object` renders it) in the legacy flat shape."""
    audio_input = session["audio"]["input"]
    fmt = {"audio/pcm": "pcm16", "audio/pcmu": "g711_ulaw", "audio/pcma": "g711_alaw"}[audio_input["format"]["type"]]
    return {
        "id": session["id"],
        "object": "realtime.transcription_session",
        "input_audio_format": fmt,
        "input_audio_transcription": audio_input["transcription"],
        "turn_detection": audio_input["turn_detection"],
        "input_audio_noise_reduction": audio_input["noise_reduction"],
        "include": session["include"],
        "expires_at": session["expires_at"],
    }


def session_object(session_id: str, config: SessionConfig, expires_at: int) -> dict[str, Any]:
    """``RealtimeTranscriptionSessionCreateResponse``: the effective session, as ``session.created/updated`` carry it."""
    body = config.model_dump(mode="json")
    transcription = body["audio"]["input"]["transcription"]
    if transcription.get("known_speaker_references"):  # not echoed: clips of up to 10 s each
        transcription["known_speaker_references"] = [
            f"<{len(r)} characters>" for r in transcription["known_speaker_references"]
        ]
    return {"id": session_id, "object": "realtime.transcription_session", "expires_at": expires_at, **body}
