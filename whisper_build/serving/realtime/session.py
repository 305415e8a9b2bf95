"""One transcription session: configuration, turns, updates, deltas and the events they make.

Audio is cut into 200 ms steps on AUDIO time; each step runs the VAD and, inside a turn, an update
every ``update_seconds`` of turn audio: the whole turn (≤ ``max_turn_seconds``), after earlier turns'
audio, with their text and the confirmed words as the forced prefix (``context``), is one window request to
the backend at the live priority; LocalAgreement-2 turns consecutive continuations into deltas. At most one
update per session is with the model. A client is ahead when the audio it sent runs ahead of the wall
time since its first append (by more than ``AHEAD_TOLERANCE``): its updates are awaited (the turns and
deltas of real-time pace). At live pace a due update is dropped while its predecessor is out, and the cadence
stretches to the wall time of the last model call (an update back or superseded, a final decode). Docs:
docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving.prompt import english_only_refusal, normalize_language
from whisper_build.serving.realtime.agreement import FirstWordsBuffer, HypothesisBuffer
from whisper_build.serving.realtime.audio import SessionAudio
from whisper_build.serving.realtime.buffer import ClientPace, SessionBuffer
from whisper_build.serving.realtime.context import TurnContext
from whisper_build.serving.realtime.decoder import TurnDecoder
from whisper_build.serving.realtime.events import ProtocolError, SessionConfig
from whisper_build.serving.realtime.limits import (
    MIN_SPEECH_CHUNKS,
    STEP_SAMPLES,
    LiveLimits,
    vad_params,
    validate_transcription,
)
from whisper_build.serving.realtime.ports import HealthRecorder, LiveMetrics
from whisper_build.serving.realtime.server_events import (
    BufferCleared,
    BufferCommitted,
    DurationUsage,
    Send,
    ServerEvent,
    SpeechStarted,
    SpeechStopped,
    TimeoutTriggered,
    TranscriptCompleted,
    TranscriptDelta,
    TranscriptFailed,
    failure_error,
)
from whisper_build.serving.realtime.speakers import LiveSpeakers
from whisper_build.serving.realtime.timeline import (
    RATE,
    ms_to_samples,
    samples_to_ms,
    samples_to_seconds,
    seconds_to_samples,
)
from whisper_build.serving.realtime.vad import TurnDetector, TurnEvent, VadParams
from whisper_build.serving.transcription.backend import BackendError, TranscriptionBackend

__all__ = ["RATE", "LiveLimits", "TranscriptionSession", "vad_params"]


@dataclass
class _Turn:
    """The turn in progress: its item, its first session sample, its updates' words and timing."""

    item: str
    start: int  # session sample
    hypothesis: HypothesisBuffer
    started_wall: float  # time.monotonic() at its start (speech start → first delta)
    last_update: int  # session sample where the last update's audio ended
    first_delta_sent: bool = False


class TranscriptionSession:
    """The state of one session; the endpoint feeds it client events and it ``send`` s server events.

    Args:
        backend: the model server (window requests go out with ``priority = LIVE_PRIORITY``).
        send: sends one server event (its JSON object, :mod:`.server_events`).
        served_ids: model names accepted in ``transcription.model`` (the served model and its aliases).
        limits: cadence and limits.
        metrics: the live series; health: told of model calls' outcomes.
        clock: monotonic wall clock, seconds (appends' ``received_at`` are on it).
    """

    def __init__(
        self,
        backend: TranscriptionBackend,
        send: Send,
        served_ids: list[str],
        limits: LiveLimits,
        metrics: LiveMetrics,
        health: HealthRecorder,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.send = send
        self.served_ids = served_ids
        self.limits = limits
        self.metrics = metrics
        self.clock = clock
        self.config = SessionConfig()
        self.configured = False
        self.legacy = False
        self._set_audio_state()
        self.previous_item: str | None = None
        self.decoder = TurnDecoder(  # completed turns (its ``context``) are the audio and text before each decode
            backend, limits, metrics, health, TurnContext(), lambda: self.config.audio.input.transcription
        )
        self.speakers = LiveSpeakers(backend, limits.speaker_timeout_seconds, send)  # off until -diarize
        self.finishing: asyncio.Task[None] | None = None  # the last ended turn's final decode and completed
        self._finals: set[asyncio.Task[None]] = set()  # every ended turn still decoding (each waits for the one before)

    def _set_audio_state(self) -> None:
        self.audio = SessionAudio(self.config.audio.input.format.type)
        self.vad = vad_params(self.config)
        self.detector = TurnDetector(self.vad or VadParams())
        self.buffer = SessionBuffer()
        self.turn: _Turn | None = None
        self.update_interval = seconds_to_samples(self.limits.update_seconds)  # stretched by load at live pace
        self.pace = ClientPace()
        self.pending: asyncio.Task[None] | None = None
        self.pending_sent = 0.0  # clock time the pending update went to the model
        self.update_sending = False  # the pending update is past its decode (cancelling it could cut a delta)

    def _new_turn(self, start: int) -> _Turn:
        hypothesis = FirstWordsBuffer() if self.limits.load_test_confirmation else HypothesisBuffer()
        return _Turn("item_" + secrets.token_hex(10), start, hypothesis, time.monotonic(), last_update=start)

    async def _emit(self, event: ServerEvent) -> None:
        await self.send(event.wire())

    # ----- client events -------------------------------------------------------------------------

    def configure(self, update: SessionConfig) -> None:
        """Apply an effective configuration (validated by :func:`~.events.merge`).

        Raises:
            ProtocolError: an unserved model, an invalid language, ``include`` logprobs, or a format
                change while audio is buffered.
        """
        validate_transcription(update, self.served_ids)
        if (
            update.audio.input.format != self.config.audio.input.format
            and len(self.buffer.samples)
            and self.turn is not None
        ):
            raise ProtocolError(
                "the audio format cannot change inside a turn; commit or clear the buffer first",
                "invalid_value",
                "session.audio.input.format",
            )
        old = self.config.audio.input
        audio_changed = (update.audio.input.format, update.audio.input.turn_detection) != (
            old.format,
            old.turn_detection,
        )
        self.config = update
        self.configured = True
        if audio_changed:  # a new format or turn detection starts afresh; a new prompt or language keeps the turn
            if self.pending is not None:
                self.pending.cancel()
            self._set_audio_state()

    async def check_language(self, update: SessionConfig) -> None:
        """Refuse a non-English ``language`` when the served model is English-only (``.en``), before any turn.

        Raises:
            ProtocolError: the model server says it is English-only (when it cannot say, each turn's
                decode still refuses the language).
        """
        try:
            refusal = english_only_refusal(normalize_language(update.audio.input.transcription.language))
        except ValueError:
            return  # :meth:`configure` names the invalid language
        if refusal is not None and await self.decoder.multilingual() is False:
            raise ProtocolError(refusal, "invalid_value", "session.audio.input.transcription.language")

    async def append(self, audio_b64: Any, received_at: float | None = None) -> None:
        """``input_audio_buffer.append``: decode, run turn detection and updates on each 200 ms step.

        ``received_at`` (clock seconds; default now) is when the append arrived: with the audio received
        so far it tells whether the client is ahead of real time.

        Raises:
            ProtocolError: before ``session.update``, or ``audio`` is not base64.
        """
        if not self.configured:
            raise ProtocolError(
                "send session.update with session.type 'transcription' (and the audio format) before audio",
                "session_not_configured",
                "audio",
            )
        if not isinstance(audio_b64, str):
            raise ProtocolError("audio must be a base64 string", "invalid_type", "audio")
        try:
            data = base64.b64decode(audio_b64, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError("audio is not valid base64", "invalid_value", "audio") from None
        samples = self.audio.decode(data)
        self.pace.note(len(samples), self.clock() if received_at is None else received_at)
        for start in range(0, len(samples), STEP_SAMPLES):
            await self._step(samples[start : start + STEP_SAMPLES])

    async def commit(self) -> None:
        """``input_audio_buffer.commit`` (manual turns; in VAD mode it ends the current turn).

        Raises:
            ProtocolError: the buffer holds less than 100 ms of audio.
        """
        self.buffer.extend(self.audio.flush())  # what the resampler still holds
        start = self.turn.start if self.turn is not None else self.buffer.start
        if self.buffer.end - start < ms_to_samples(100):
            raise ProtocolError(
                "Error committing input audio buffer: buffer too small (at least 100 ms of audio is needed)",
                "input_audio_buffer_commit_empty",
            )
        await self._finish_turn(self.buffer.end, stopped=False)

    async def clear(self) -> None:
        """``input_audio_buffer.clear``: drop buffered audio and the current turn."""
        if self.pending is not None:
            self.pending.cancel()
        self.buffer.clear()
        self.audio.reset()  # the resampler's leftovers belong to the cleared audio
        self.turn = None
        self.detector.end_turn()
        await self._emit(BufferCleared())

    async def drain(self) -> None:
        """Finish the turn in progress (its ``completed`` is sent); called before the server closes."""
        if self.turn is not None and self.detector.speech_chunks:
            self.buffer.extend(self.audio.flush())
            await self._finish_turn(self.buffer.end, stopped=False)
        await self.settle()

    def close(self) -> None:
        """The client left: cancel every model call of the session (its update and every ended turn's final).

        Nobody is left to receive their events, and a call cancelled while it waits is never decoded.
        """
        for task in [self.pending, *self._finals]:
            if task is not None:
                task.cancel()

    async def settle(self) -> None:
        """Wait until every ended turn has its ``completed`` (or ``failed``) sent."""
        while self.finishing is not None and not self.finishing.done():
            await asyncio.wait([self.finishing])

    # ----- audio steps ---------------------------------------------------------------------------

    async def _step(self, samples: npt.NDArray[np.float32]) -> None:
        self.buffer.extend(samples)
        events = self.detector.feed(samples)
        if self.vad is not None:
            for event in events:
                await self._turn_event(event)
            if self.turn is None:  # outside a turn only the prefix padding is kept
                self.buffer.keep_last(ms_to_samples(self.vad.prefix_padding_ms) + STEP_SAMPLES)
        elif self.turn is None:
            self.turn = self._new_turn(self.buffer.start)
        turn, end = self.turn, self.buffer.end
        if turn is None:
            return
        if end - turn.start >= seconds_to_samples(self.limits.max_turn_seconds):
            await self._finish_turn(end, stopped=self.vad is not None)
            return
        if end - turn.last_update >= self.update_interval and self.detector.speech_chunks >= MIN_SPEECH_CHUNKS:
            turn.last_update = end
            await self._update(turn, end)

    async def _turn_event(self, event: TurnEvent) -> None:
        if event.kind == "started":
            self.turn = self._new_turn(max(self.buffer.start, ms_to_samples(event.ms)))
            await self._emit(SpeechStarted(item_id=self.turn.item, audio_start_ms=event.ms))
        elif event.kind == "stopped" and self.turn is not None:
            await self._finish_turn(ms_to_samples(event.ms), stopped=True, speech_chunks=event.speech_chunks)
        elif event.kind == "timeout" and self.turn is None:
            # OpenAI: the idle audio is committed as an item (committed, then its transcription)
            self.turn = self._new_turn(self.buffer.start)
            idle_ms = (self.vad.idle_timeout_ms or 0) if self.vad else 0
            await self._emit(TimeoutTriggered(item_id=self.turn.item, audio_start_ms=max(0, event.ms - idle_ms),
                                              audio_end_ms=event.ms))  # fmt: skip
            await self._finish_turn(ms_to_samples(event.ms), stopped=False)

    # ----- model calls ---------------------------------------------------------------------------

    async def _update(self, turn: _Turn, end: int) -> None:
        if self.finishing is not None and not self.finishing.done() and not self.pace.ahead:
            self.metrics.dropped.inc()  # live pace: a turn's final decode goes first, updates are shed
            return
        if self.pending is not None and not self.pending.done():
            if not self.pace.ahead:
                self.metrics.dropped.inc()  # live pace: its successor is due before it came back
                return
            await asyncio.wait([self.pending])
        audio = self.buffer.span(turn.start, end)
        self.update_sending = False
        self.pending_sent = self.clock()
        self.pending = asyncio.create_task(self._run_update(turn, audio, list(turn.hypothesis.confirmed)))

    def _stretch(self, seconds: float) -> None:
        """Updates are due every ``seconds`` (a model call's wall time) at live pace, never more often than configured."""
        base = self.limits.update_seconds
        self.update_interval = seconds_to_samples(base if self.pace.ahead else max(base, seconds))

    async def _run_update(self, turn: _Turn, audio: npt.NDArray[np.float32], confirmed: list[str]) -> None:
        self.update_sending = False
        try:
            text = await self.decoder.decode(audio, confirmed)
        except BackendError:
            return  # the final decode reports failures
        self.update_sending = True
        self._stretch(self.clock() - self.pending_sent)  # the next is due when this one's answer would be
        self.metrics.updates.inc()
        if turn is not self.turn:
            return
        delta = turn.hypothesis.insert(" ".join([*confirmed, text]))
        if delta:
            await self._delta(turn, delta)

    async def _delta(self, turn: _Turn, delta: str) -> None:
        """Send a delta of ``turn`` (the current one, or an ended one's tail); the first is timed from its start."""
        if not turn.first_delta_sent:
            turn.first_delta_sent = True
            self.metrics.first_delta.observe(time.monotonic() - turn.started_wall)
        await self._emit(TranscriptDelta(item_id=turn.item, delta=delta))

    async def _finish_turn(self, end: int, stopped: bool, speech_chunks: int | None = None) -> None:
        """End the turn at sample ``end``; ``speech_chunks``: a VAD stop's, ``None``: a commit (ends the VAD's turn)."""
        ended = time.monotonic()
        if self.pending is not None and not self.pending.done():
            if not self.update_sending and not self.pace.ahead:  # live pace: the final decode supersedes it
                self.pending.cancel()
                self.metrics.dropped.inc()
                self._stretch(self.clock() - self.pending_sent)  # it had not come back: the model is that slow
            await asyncio.wait([self.pending])  # its delta comes before the tail; a cancelled one is gone first
        turn = self.turn or self._new_turn(self.buffer.start)  # a commit outside a turn commits an item too
        audio = self.buffer.span(turn.start, end)
        if stopped:
            await self._emit(SpeechStopped(item_id=turn.item, audio_end_ms=samples_to_ms(end)))
        await self._emit(BufferCommitted(item_id=turn.item, previous_item_id=self.previous_item))
        spoke = (self.detector.speech_chunks if speech_chunks is None else speech_chunks) >= MIN_SPEECH_CHUNKS
        self.buffer.drop_before(end)
        self.turn = None
        if speech_chunks is None:
            self.detector.end_turn()
        self.previous_item = turn.item
        previous = self.finishing  # turns complete in order; the session goes on meanwhile
        self.finishing = asyncio.create_task(self._complete(previous, turn, audio, spoke, ended))
        self._finals.add(self.finishing)
        self.finishing.add_done_callback(self._finals.discard)

    async def _complete(
        self,
        previous: asyncio.Task[None] | None,
        turn: _Turn,
        audio: npt.NDArray[np.float32],
        spoke: bool,
        ended: float,
    ) -> None:
        """An ended turn's final decode (after the previous turn's, for its context), then ``completed``.

        ``audio``: the turn's samples; ``spoke``: it held enough speech to decode; ``ended``: its end (wall clock).
        """
        if previous is not None:
            await asyncio.wait([previous])
        hypothesis = turn.hypothesis
        labelling = self.speakers.start(audio) if spoke else None  # beside the final decode
        sent = self.clock()
        try:
            text = await self.decoder.final(audio, hypothesis.confirmed) if spoke else ""
        except BackendError as exc:
            self.speakers.cancel(labelling)
            self.metrics.failed.inc()
            await self._emit(TranscriptFailed(item_id=turn.item, error=failure_error(self.decoder.failure(exc))))
            return
        if spoke:
            self._stretch(self.clock() - sent)
        tail = hypothesis.finish(" ".join([*hypothesis.confirmed, text]))  # the confirmed words, then the rest
        if tail:
            await self._delta(turn, tail)
        if spoke:  # an empty item (idle timeout, a commit of silence) is no finalisation
            self.metrics.finalisation.observe(time.monotonic() - ended)
        transcript, seconds = hypothesis.text, samples_to_seconds(len(audio))
        self.decoder.context.add(audio, transcript)
        speaker = await self.speakers.finish(labelling, turn.item, turn.start, transcript, seconds)
        usage = DurationUsage(seconds=round(seconds, 3))
        await self._emit(TranscriptCompleted(item_id=turn.item, transcript=transcript, usage=usage, speaker=speaker))
