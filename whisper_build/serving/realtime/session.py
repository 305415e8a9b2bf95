"""One transcription session: configuration, turns, updates, deltas and the events they make.

Audio is cut into 200 ms steps on AUDIO time; each step runs the VAD and, inside a turn, an update
every ``update_seconds`` of turn audio: the whole turn (≤ ``max_turn_seconds``), after earlier turns'
audio, with their text and the confirmed words as the forced prefix (``context``), is one window request to
the backend at the live priority; LocalAgreement-2 turns consecutive continuations into deltas. At most one
update per session is with the model. A client is ahead when the audio it sent runs ahead of the wall
time since its first append (by more than ``AHEAD_TOLERANCE``): its updates are awaited (the turns and
deltas of real-time pace). At live pace a due update is dropped while its predecessor is out, and the
cadence stretches to the last decode's wall time. Docs: docs/gateway.md, "Live transcription".
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving.prompt import english_only_refusal, normalize_language
from whisper_build.serving.realtime.agreement import FirstWordsBuffer, HypothesisBuffer
from whisper_build.serving.realtime.audio import SessionAudio
from whisper_build.serving.realtime.context import TurnContext
from whisper_build.serving.realtime.decoder import TurnDecoder
from whisper_build.serving.realtime.events import ProtocolError, SessionConfig, event_id, failure_error
from whisper_build.serving.realtime.limits import (
    AHEAD_TOLERANCE,
    MIN_SPEECH_CHUNKS,
    RATE,
    STEP_SAMPLES,
    LiveLimits,
    vad_params,
    validate_transcription,
)
from whisper_build.serving.realtime.ports import HealthRecorder, LiveMetrics
from whisper_build.serving.realtime.speakers import LiveSpeakers
from whisper_build.serving.realtime.vad import TurnDetector, TurnEvent, VadParams
from whisper_build.serving.transcription.backend import BackendError, TranscriptionBackend

__all__ = ["RATE", "LiveLimits", "TranscriptionSession", "vad_params"]

Send = Callable[[dict[str, Any]], Awaitable[None]]


def _item_id() -> str:
    return "item_" + secrets.token_hex(10)


class TranscriptionSession:
    """The state of one session; the endpoint feeds it client events and it ``send`` s server events.

    Args:
        backend: the model server (window requests go out with ``priority = LIVE_PRIORITY``).
        send: sends one server event (a JSON-able dict).
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
        self.backend = backend
        self.send = send
        self.served_ids = served_ids
        self.limits = limits
        self.metrics = metrics
        self.health = health
        self.clock = clock
        self.config = SessionConfig()
        self.configured = False
        self.legacy = False
        self._set_audio_state()
        self.previous_item: str | None = None
        self.context = TurnContext()  # completed turns: the audio and text in front of each decode
        self.decoder = TurnDecoder(
            backend, limits, metrics, health, self.context, lambda: self.config.audio.input.transcription
        )
        self.speakers = LiveSpeakers(backend, limits.speaker_timeout_seconds, send)  # off until -diarize
        self.finishing: asyncio.Task[None] | None = None  # the last ended turn's final decode and completed

    def _set_audio_state(self) -> None:
        self.audio = SessionAudio(self.config.audio.input.format.type)
        self.vad = vad_params(self.config)
        self.detector = TurnDetector(self.vad or VadParams())
        self.buffer = np.zeros(0, dtype=np.float32)  # session audio not yet committed or trimmed
        self.buffer_start = 0  # its first sample's index in the session
        self.turn_start: int | None = None  # session sample where the current turn starts
        self.item: str | None = None
        self.hypothesis = self._hypothesis()
        self.last_update = 0
        self.update_interval = int(self.limits.update_seconds * RATE)  # samples; stretched by load at live pace
        self.received_samples = 0  # 16 kHz samples of every append so far
        self.first_received: float | None = None  # clock when the first append's audio had been captured
        self.ahead = False
        self.pending: asyncio.Task[None] | None = None
        self.update_sending = False  # the pending update is past its decode (cancelling it could cut a delta)
        self.started_wall = 0.0
        self.first_delta_sent = False

    def _hypothesis(self) -> HypothesisBuffer:
        return FirstWordsBuffer() if self.limits.load_test_confirmation else HypothesisBuffer()

    # ----- client events -------------------------------------------------------------------------

    def configure(self, update: SessionConfig) -> None:
        """Apply an effective configuration (validated by :func:`~.events.merge`).

        Raises:
            ProtocolError: an unserved model, an invalid language, ``include`` logprobs, or a format
                change while audio is buffered.
        """
        validate_transcription(update, self.served_ids)
        if update.audio.input.format != self.config.audio.input.format and len(self.buffer) and self.item:
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
        self._note_received(len(samples), self.clock() if received_at is None else received_at)
        for start in range(0, len(samples), STEP_SAMPLES):
            await self._step(samples[start : start + STEP_SAMPLES])

    async def commit(self) -> None:
        """``input_audio_buffer.commit`` (manual turns; in VAD mode it ends the current turn).

        Raises:
            ProtocolError: the buffer holds less than 100 ms of audio.
        """
        self.buffer = np.concatenate([self.buffer, self.audio.flush()])  # what the resampler still holds
        end = self.buffer_start + len(self.buffer)
        start = self.turn_start if self.turn_start is not None else self.buffer_start
        if end - start < RATE // 10:
            raise ProtocolError(
                "Error committing input audio buffer: buffer too small (at least 100 ms of audio is needed)",
                "input_audio_buffer_commit_empty",
            )
        await self._finish_turn(end, stopped=False)

    async def clear(self) -> None:
        """``input_audio_buffer.clear``: drop buffered audio and the current turn."""
        if self.pending is not None:
            self.pending.cancel()
        self.buffer_start += len(self.buffer)
        self.buffer = np.zeros(0, dtype=np.float32)
        self.audio.reset()  # the resampler's leftovers belong to the cleared audio
        self.turn_start = None
        self.item = None
        self.hypothesis = self._hypothesis()
        self.detector.end_turn()
        await self.send({"type": "input_audio_buffer.cleared", "event_id": event_id()})

    async def drain(self) -> None:
        """Finish the turn in progress (its ``completed`` is sent); called before the server closes."""
        if self.item is not None and self.turn_start is not None and self.detector.speech_chunks:
            self.buffer = np.concatenate([self.buffer, self.audio.flush()])
            await self._finish_turn(self.buffer_start + len(self.buffer), stopped=False)
        await self.settle()

    async def settle(self) -> None:
        """Wait until every ended turn has its ``completed`` (or ``failed``) sent."""
        while self.finishing is not None and not self.finishing.done():
            await asyncio.wait([self.finishing])

    def _note_received(self, count: int, received_at: float) -> None:
        """Update ``ahead``: the audio received (s) against the wall time since the first append was captured."""
        self.received_samples += count
        if self.first_received is None:  # its audio was captured over the len(samples) before it arrived
            self.first_received = received_at - count / RATE
        lead = self.received_samples / RATE - (received_at - self.first_received)
        self.ahead = lead > AHEAD_TOLERANCE

    # ----- audio steps ---------------------------------------------------------------------------

    async def _step(self, samples: npt.NDArray[np.float32]) -> None:
        self.buffer = np.concatenate([self.buffer, samples])
        events = self.detector.feed(samples)
        if self.vad is not None:
            for event in events:
                await self._turn_event(event)
            if self.turn_start is None:
                keep = self.vad.prefix_padding_ms * 16 + STEP_SAMPLES
                if len(self.buffer) > keep:  # outside a turn only the prefix padding is kept
                    self.buffer_start += len(self.buffer) - keep
                    self.buffer = self.buffer[-keep:]
        elif self.item is None:
            self.item = _item_id()
            self.turn_start = self.last_update = self.buffer_start
            self.started_wall = time.monotonic()
            self.first_delta_sent = False
        if self.turn_start is None:
            return
        end = self.buffer_start + len(self.buffer)
        if end - self.turn_start >= self.limits.max_turn_seconds * RATE:
            await self._finish_turn(end, stopped=self.vad is not None)
            return
        if end - self.last_update >= self.update_interval and self.detector.speech_chunks >= MIN_SPEECH_CHUNKS:
            self.last_update = end
            await self._update(end)

    async def _turn_event(self, event: TurnEvent) -> None:
        if event.kind == "started":
            self.item = _item_id()
            self.turn_start = max(self.buffer_start, event.ms * 16)
            self.last_update = self.turn_start
            self.started_wall = time.monotonic()
            self.first_delta_sent = False
            await self.send({"type": "input_audio_buffer.speech_started", "event_id": event_id(),
                             "item_id": self.item, "audio_start_ms": event.ms})  # fmt: skip
        elif event.kind == "stopped" and self.item is not None:
            await self._finish_turn(event.ms * 16, stopped=True, stopped_ms=event.ms)
        elif event.kind == "timeout" and self.item is None:
            # OpenAI: the idle audio is committed as an item (committed, then its transcription)
            self.item = _item_id()
            idle_ms = (self.vad.idle_timeout_ms or 0) if self.vad else 0
            await self.send({"type": "input_audio_buffer.timeout_triggered", "event_id": event_id(),
                             "item_id": self.item, "audio_start_ms": max(0, event.ms - idle_ms),
                             "audio_end_ms": event.ms})  # fmt: skip
            await self._finish_turn(event.ms * 16, stopped=False)

    # ----- model calls ---------------------------------------------------------------------------

    async def _update(self, end: int) -> None:
        if self.finishing is not None and not self.finishing.done() and not self.ahead:
            self.metrics.dropped.inc()  # live pace: a turn's final decode goes first, updates are shed
            return
        if self.pending is not None and not self.pending.done():
            if not self.ahead:
                self.metrics.dropped.inc()  # live pace: its successor is due before it came back
                return
            await asyncio.wait([self.pending])
        assert self.turn_start is not None
        audio = self.buffer[self.turn_start - self.buffer_start : end - self.buffer_start].copy()
        self.update_sending = False
        self.pending = asyncio.create_task(self._run_update(self.item, audio, list(self.hypothesis.confirmed)))

    async def _run_update(self, item: str | None, audio: npt.NDArray[np.float32], confirmed: list[str]) -> None:
        self.update_sending = False
        sent = self.clock()
        try:
            text = await self.decoder.decode(audio, confirmed)
        except BackendError:
            return  # the final decode reports failures
        self.update_sending = True
        base = self.limits.update_seconds
        seconds = base if self.ahead else max(base, self.clock() - sent)  # the next is due when this one's time is
        self.update_interval = int(seconds * RATE)
        self.metrics.updates.inc()
        if item != self.item:
            return
        delta = self.hypothesis.insert(" ".join([*confirmed, text]))
        if delta:
            await self._delta(delta)

    async def _delta(self, delta: str, item: str | None = None, first: float | None = None) -> None:
        """Send a delta of the current turn, or of the ended turn ``item`` (``first``: its start, if no delta yet)."""
        if item is None and not self.first_delta_sent:
            self.first_delta_sent = True
            first = self.started_wall
        if first is not None:
            self.metrics.first_delta.observe(time.monotonic() - first)
        await self.send({"type": "conversation.item.input_audio_transcription.delta", "event_id": event_id(),
                         "item_id": item or self.item, "content_index": 0, "delta": delta})  # fmt: skip

    async def _finish_turn(self, end: int, stopped: bool, stopped_ms: int | None = None) -> None:
        """End the current turn at session sample ``end``: stopped (VAD), committed, final decode, completed."""
        ended = time.monotonic()
        if self.pending is not None and not self.pending.done():
            if not self.update_sending and not self.ahead:  # live pace: the final decode supersedes it
                self.pending.cancel()
                self.metrics.dropped.inc()
            await asyncio.wait([self.pending])  # its delta comes before the tail; a cancelled one is gone first
        item = self.item or _item_id()
        start = self.turn_start if self.turn_start is not None else self.buffer_start
        audio = self.buffer[start - self.buffer_start : end - self.buffer_start].copy()
        if stopped:
            await self.send({"type": "input_audio_buffer.speech_stopped", "event_id": event_id(), "item_id": item,
                             "audio_end_ms": stopped_ms if stopped_ms is not None else end // 16})  # fmt: skip
        await self.send({"type": "input_audio_buffer.committed", "event_id": event_id(), "item_id": item,
                         "previous_item_id": self.previous_item})  # fmt: skip
        spoke = self.detector.speech_chunks >= MIN_SPEECH_CHUNKS
        hypothesis = self.hypothesis
        self.buffer = self.buffer[end - self.buffer_start :]
        self.buffer_start = end
        self.turn_start = None
        self.item = None
        self.hypothesis = self._hypothesis()
        self.detector.end_turn()
        self.previous_item = item
        first = None if self.first_delta_sent else self.started_wall
        previous = self.finishing  # turns complete in order; the session goes on meanwhile
        self.finishing = asyncio.create_task(
            self._complete(previous, item, audio, start, spoke, hypothesis, (ended, first))
        )

    async def _complete(
        self,
        previous: asyncio.Task[None] | None,
        item: str,
        audio: npt.NDArray[np.float32],
        start: int,
        spoke: bool,
        hypothesis: HypothesisBuffer,
        times: tuple[float, float | None],
    ) -> None:
        """An ended turn's final decode (after the previous turn's, for its context), then ``completed``.

        ``times``: when the turn ended and, if it sent no delta yet, when it started (wall clock).
        """
        if previous is not None:
            await asyncio.wait([previous])
        ended, first = times
        labelling = self.speakers.start(audio) if spoke else None  # beside the final decode
        try:
            text = await self.decoder.final(audio, hypothesis.confirmed) if spoke else ""
        except BackendError as exc:
            self.speakers.cancel(labelling)
            self.metrics.failed.inc()
            await self.send({"type": "conversation.item.input_audio_transcription.failed", "event_id": event_id(),
                             "item_id": item, "content_index": 0,
                             "error": failure_error(self.decoder.failure(exc))})  # fmt: skip
            return
        tail = hypothesis.finish(" ".join([*hypothesis.confirmed, text]))  # the confirmed words, then the rest
        if tail:
            await self._delta(tail, item, first)
        if spoke:  # an empty item (idle timeout, a commit of silence) is no finalisation
            self.metrics.finalisation.observe(time.monotonic() - ended)
        transcript = hypothesis.text
        self.context.add(audio, transcript)
        speaker = await self.speakers.finish(labelling, item, start, transcript, len(audio) / RATE)
        await self.send({"type": "conversation.item.input_audio_transcription.completed", "event_id": event_id(),
                         "item_id": item, "content_index": 0, "transcript": transcript,
                         "usage": {"type": "duration", "seconds": round(len(audio) / RATE, 3)}, **speaker})  # fmt: skip
