"""``stream=true`` on ``POST /v1/audio/transcriptions``: OpenAI's transcript events as server-sent events.

The events are those of openai-python's ``TranscriptionStreamEvent``, framed by ``sse-starlette``:
a ``transcript.text.delta`` per window group with text (then, for ``diarized_json``, one
``transcript.text.segment`` per speaker segment), then ``transcript.text.done`` with
``usage``, or one ``error`` event on a failure after the stream started. Failures before the first
byte are ordinary HTTP errors. Entry points: :func:`transcript_stream`, :func:`parse_stream_flag`;
the event shapes and limits: :func:`transcript_stream`'s docstring.
Docs: docs/gateway.md, "OpenAI audio API".
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, aclosing
from dataclasses import dataclass

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.audio import AudioError, AudioStream
from whisper_build.serving.diarization.assign import label_segments
from whisper_build.serving.gateway.diarize import PendingTurns
from whisper_build.serving.gateway.errors import ApiError, openai_error_body
from whisper_build.serving.gateway.pipeline import Pipeline
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription import formats
from whisper_build.serving.transcription.backend import BackendError
from whisper_build.serving.transcription.windows import GroupResult, Transcriber, WindowRequest

__all__ = ["AUDIO_TOKENS_PER_SECOND", "parse_stream_flag", "transcript_stream"]

log = logging.getLogger(__name__)

AUDIO_TOKENS_PER_SECOND = 50
"""Whisper encoder positions per second of audio: 1500 per 30 s window (openai/whisper ``n_audio_ctx``)."""

_TRUE, _FALSE = ("true", "1"), ("false", "0")


def parse_stream_flag(value: str | None, response_format: str, chosen: formats.ResponseFormat | None) -> bool:
    """The multipart ``stream`` field as a bool (``true``/``false``, ``1``/``0``, any case; absent = false).

    Args:
        value: the field as sent.
        response_format: the format field as sent (for the message).
        chosen: its entry of :data:`~whisper_build.serving.transcription.formats.FORMATS`, ``None`` if unknown.

    Raises:
        ApiError: 400 naming ``stream`` for another value, or for ``stream`` with a
            ``response_format`` that is not streamable (the events carry plain text; no segments or cues).
    """
    flag = (value or "false").strip().lower()
    if flag not in _TRUE + _FALSE:
        raise ApiError(400, ErrorCode.INVALID_FIELD, f"stream must be true or false, got {value!r}", param="stream")
    if flag in _TRUE and (chosen is None or not chosen.streamable):
        streamable = formats.names(lambda f: f.streamable)
        raise ApiError(
            400,
            ErrorCode.INVALID_FIELD,
            f"stream=true sends text events: response_format must be {' or '.join(streamable)} "
            f"(got {response_format!r}); ask for {response_format} without stream",
            param="stream",
        )
    return flag in _TRUE


@dataclass
class _Opened:
    """An upload inside :meth:`Pipeline.admitted`: it holds its admission slot until :meth:`close`."""

    stream: AudioStream
    resources: AsyncExitStack

    async def close(self) -> None:
        """Release the slot and the decoder (idempotent)."""
        await self.resources.aclose()


async def _open(pipeline: Pipeline, read_audio: Callable[[], Awaitable[bytes]]) -> _Opened:
    """Enter :meth:`Pipeline.admitted` (no timeout prediction: a stream has no whole-request limit).

    Raises:
        ApiError: 413/400 for the audio, 429/503 from admission, 504 past the read timeout.
    """
    resources = AsyncExitStack()
    stream = await resources.enter_async_context(pipeline.admitted(read_audio, predict_timeout=False))
    return _Opened(stream, resources)


def _event(payload: dict[str, object]) -> ServerSentEvent:
    return ServerSentEvent(data=json.dumps(payload, ensure_ascii=False))


def _usage(audio_seconds: float, text_tokens: int) -> dict[str, object]:
    audio_tokens = round(audio_seconds * AUDIO_TOKENS_PER_SECOND)
    return {
        "type": "tokens",
        "input_tokens": audio_tokens,
        "output_tokens": text_tokens,
        "total_tokens": audio_tokens + text_tokens,
        "input_token_details": {"audio_tokens": audio_tokens},
    }


async def _events(
    pipeline: Pipeline,
    route: str,
    transcriber: Transcriber,
    opened: _Opened,
    request: WindowRequest,
    speakers: PendingTurns | None,
) -> AsyncIterator[ServerSentEvent]:
    text, tokens, sent_seconds = "", 0, 0.0
    temperatures: list[float] = []
    segments: list[Segment] = []
    try:
        async with aclosing(transcriber.results(opened.stream, request)) as results:
            async for group in results:
                segments += group.segments if speakers is not None else []
                temperatures += group.temperatures
                sent_seconds += _seconds(group)
                tokens += sum(len(s.tokens) for s in group.segments)
                piece = " ".join(s.text for s in group.segments if s.text)
                if piece:
                    delta = f" {piece}" if text else piece
                    text += delta
                    yield _event({"type": "transcript.text.delta", "delta": delta})
        if speakers is not None:  # speakers exist once the whole file is clustered
            for segment in formats.diarized_segments(label_segments(segments, await speakers.turns())):
                yield _event(segment)
        yield _event({"type": "transcript.text.done", "text": text, "usage": _usage(sent_seconds, tokens)})
        pipeline.count(route, opened.stream.seconds, temperatures)
    except (BackendError, AudioError, TimeoutError) as exc:
        error = pipeline.failure(exc)
        yield _event(openai_error_body(error.status, error.code, error.message, error.param))
    except Exception as exc:  # noqa: BLE001 - a bug must still end the stream with an error, never silently
        log.exception("stream failed")
        message = f"internal error ({type(exc).__name__}); the transcription stopped"
        yield _event(openai_error_body(500, ErrorCode.INTERNAL, message))
    finally:
        if speakers is not None:  # a client that left cancels the speaker model's call too
            speakers.cancel()
        await opened.close()


def _seconds(group: GroupResult) -> float:
    """Seconds of audio the group sent to the model."""
    return sum(w.end_s - w.start_s for w in group.windows)


class _TranscriptEvents(EventSourceResponse):
    """The event stream, releasing the upload's admission slot and decoder however it ends.

    Done, an error, a disconnect or a cancelled task: the slot is given back even when no event
    was produced yet (a generator that never started runs no ``finally``).
    """

    def __init__(
        self,
        events: AsyncIterator[ServerSentEvent],
        opened: _Opened,
        grace_seconds: float,
        speakers: PendingTurns | None = None,
    ) -> None:
        # on SIGTERM a stream may finish within the gateway's graceful shutdown, as uvicorn waits for requests
        super().__init__(events, shutdown_grace_period=grace_seconds)
        self._opened = opened
        self._speakers = speakers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream the events, then release the upload (see the class docstring)."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._speakers is not None:
                self._speakers.cancel()
            await self._opened.close()


async def transcript_stream(
    pipeline: Pipeline,
    route: str,
    read_audio: Callable[[], Awaitable[bytes]],
    request: WindowRequest,
    speakers: PendingTurns | None = None,
) -> EventSourceResponse:
    """Admit the upload and answer its transcript as OpenAI transcript events (see the module docstring).

    Raises:
        ApiError: what fails before the stream starts (bad or too long audio, overload).

    The events are those of openai-python's ``TranscriptionStreamEvent`` (``openai/types/audio/``),
    framed by ``sse-starlette`` as ``data: <json>`` lines:

    * ``{"type": "transcript.text.delta", "delta": "..."}`` per window group whose text is not empty,
      in audio order, as soon as the model answered it; a delta after the first starts with one
      space, so the deltas joined are exactly the text of the same request without ``stream``;
    * with ``speakers`` (``response_format=diarized_json``; cancelled with the stream): after the
      last delta, once the whole file is clustered, one ``transcript.text.segment`` event per speaker segment, as in ``diarized_json``
      (deltas go out per window group without ``segment_id``: speakers are not known yet);
    * then ``{"type": "transcript.text.done", "text": "...", "usage": {...}}`` with ``usage`` in the
      shape of that type's ``Usage`` (``type: "tokens"``): ``output_tokens`` = text tokens the model
      generated, ``input_tokens`` = ``input_token_details.audio_tokens`` = Whisper encoder positions
      of the windows decoded (1500 per 30 s, 50 per second of audio sent; the prompt's tokens are not
      counted: the gateway does not tokenize), ``total_tokens`` their sum;
    * a failure after the stream started: one ``{"error": {"message", "type", "param", "code"}}``
      event (the object the HTTP errors carry) and the end of the stream: openai-python's ``Stream``
      raises ``openai.APIError`` on an event whose data has ``error`` (``openai/_streaming.py``).

    Failures before the first byte (bad audio, too long, overload) are ordinary HTTP errors. Window
    groups are :attr:`RequestSettings.stream_window_group_size` windows (default 1: a delta per 30 s of
    audio), each bounded by :attr:`RequestSettings.stream_group_timeout_seconds`; a stream has no
    whole-request limit, so it takes no part in any up-front "too long for a synchronous request"
    refusal. A client that disconnects cancels the generator (sse-starlette watches the connection):
    the pipeline cancels the model call in flight and sends no further group
    (:meth:`whisper_build.serving.transcription.windows.Transcriber.results`).
    """
    try:
        opened = await _open(pipeline, read_audio)
    except BaseException:
        if speakers is not None:
            speakers.cancel()
        raise
    events = _events(pipeline, route, pipeline.stream_transcriber(), opened, request, speakers)
    return _TranscriptEvents(events, opened, pipeline.settings.server.graceful_shutdown_seconds, speakers)
