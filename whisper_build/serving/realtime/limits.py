"""Live sessions' cadence, limits and configuration checks (docs/gateway.md, "Live transcription").

Audio time is counted in 16 kHz samples (:mod:`.timeline`); ``LiveLimits`` are the per-session limits
the gateway sets; ``vad_params`` maps a session's ``turn_detection`` to the VAD's parameters (``semantic_vad``'s
eagerness to a silence duration); ``validate_transcription`` refuses what no turn could decode.
"""

from __future__ import annotations

from dataclasses import dataclass

from whisper_build.serving.prompt import normalize_language
from whisper_build.serving.realtime.events import ProtocolError, SessionConfig
from whisper_build.serving.realtime.timeline import ms_to_samples
from whisper_build.serving.realtime.vad import VadParams

__all__ = ["OVERSIZED_KEY", "LiveLimits", "speakers_requested", "validate_transcription", "vad_params"]

STEP_SAMPLES = ms_to_samples(200)
"""Audio per processing step (200 ms at 16 kHz)."""
MIN_SPEECH_CHUNKS = 4
"""A turn with fewer 32 ms chunks above the threshold is not decoded (clicks, noise bursts)."""
AHEAD_TOLERANCE = 0.5
"""Seconds the audio received may run ahead of wall time (chunking, network jitter) and still be live pace."""
DIARIZE_SUFFIX = "-diarize"
"""``<served id>-diarize`` turns speakers on, as on the file endpoint (OpenAI: ``gpt-4o-transcribe-diarize``)."""
OVERSIZED_KEY = "whisper.oversized_bytes"
"""Extra key of a ``websocket.receive`` ASGI message that stands for a client event the server skipped
because it passed ``max_event_bytes``: its size in bytes (``text`` and ``bytes`` are ``None``; the gateway's
``websocket_limits.SkippingWSProtocol`` sends it instead of closing with 1009)."""
SEMANTIC_SILENCE_MS = {"low": 1200, "medium": 800, "auto": 800, "high": 500}
"""``semantic_vad`` eagerness → ``server_vad`` silence duration (ms); threshold and prefix keep their defaults."""


@dataclass(frozen=True)
class LiveLimits:
    """Per-session limits and cadence.

    Attributes:
        update_seconds: turn audio between two updates.
        max_turn_seconds: a turn is committed when it reaches this length (< Whisper's 30 s window).
        call_timeout_seconds: deadline of one model call.
        max_event_bytes: largest client event (an append's JSON text) accepted.
        max_session_seconds: session length (OpenAI: 60 min).
        idle_audio_seconds: a session receiving no audio this long is closed.
        speaker_timeout_seconds: deadline of one turn's speaker-model call (sessions with speakers).
        load_test_confirmation: LOAD TESTS ONLY (random weights): each update confirms its first two
            new words instead of LocalAgreement-2 (``agreement.FirstWordsBuffer``).
    """

    update_seconds: float = 1.0
    max_turn_seconds: float = 25.0
    call_timeout_seconds: float = 30.0
    max_event_bytes: int = 8 * 1024 * 1024
    max_session_seconds: float = 3600.0
    idle_audio_seconds: float = 300.0
    load_test_confirmation: bool = False
    speaker_timeout_seconds: float = 30.0


def speakers_requested(config: SessionConfig) -> bool:
    """Whether the session asked for speakers: transcription model ``<served id>-diarize`` (``whisper-1-diarize``)."""
    model = config.audio.input.transcription.model
    return model is not None and model.endswith(DIARIZE_SUFFIX)


def vad_params(config: SessionConfig) -> VadParams | None:
    """The VAD parameters of ``config``'s ``turn_detection`` (``semantic_vad`` mapped), ``None`` for manual commits."""
    turn = config.audio.input.turn_detection
    if turn is None:
        return None
    default = VadParams()
    silence = turn.silence_duration_ms
    if turn.type == "semantic_vad":
        silence = SEMANTIC_SILENCE_MS[turn.eagerness or "auto"]
    return VadParams(
        threshold=default.threshold if turn.threshold is None else turn.threshold,
        prefix_padding_ms=default.prefix_padding_ms if turn.prefix_padding_ms is None else turn.prefix_padding_ms,
        silence_duration_ms=default.silence_duration_ms if silence is None else silence,
        idle_timeout_ms=turn.idle_timeout_ms if turn.type == "server_vad" else None,
    )


def validate_transcription(update: SessionConfig, served_ids: list[str]) -> None:
    """Refuse an effective configuration no turn could decode.

    Raises:
        ProtocolError: an unserved model (``served_ids`` are the accepted names), an invalid language,
            or ``include`` logprobs.
    """
    transcription = update.audio.input.transcription
    if transcription.model is not None and transcription.model.removesuffix(DIARIZE_SUFFIX) not in served_ids:
        raise ProtocolError(
            f"model {transcription.model!r} is not served here; use one of {', '.join(served_ids)} "
            f"(or <id>{DIARIZE_SUFFIX} for speakers)",
            "model_not_found",
            "session.audio.input.transcription.model",
        )
    try:
        normalize_language(transcription.language)
    except ValueError as exc:
        raise ProtocolError(str(exc), "invalid_value", "session.audio.input.transcription.language") from None
    if update.include:
        raise ProtocolError(
            "include item.input_audio_transcription.logprobs is not supported: the engine returns no "
            "per-token log-probabilities; leave include empty",
            "unsupported_value",
            "session.include",
        )
