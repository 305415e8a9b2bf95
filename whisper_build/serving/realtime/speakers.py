"""Speakers in a live session: asked for with ``<served id>-diarize``, labelled by the transcription core.

:class:`LiveSpeakers` holds a session's :class:`~whisper_build.serving.transcription.speakers.SessionSpeakers`
(``None`` while the session did not ask: then nothing runs and nothing is sent). Each turn's speaker-model
call starts with its final decode and runs beside it; the ``completed`` event gains ``speaker`` (an extension
the official client keeps) and ``conversation.item.input_audio_transcription.segment`` events, one per run
of one speaker (openai-python ``types/realtime``: ``id``, ``start``, ``end``, ``speaker``, ``text``), come before it.
Known speakers: ``known_speaker_names`` + ``known_speaker_references`` in ``session.audio.input.transcription``
(the file endpoint's fields and limits). Docs: docs/gateway.md, "Speakers in a session".
"""

from __future__ import annotations

import asyncio
from typing import Any

from whisper_build.serving.diarization.references import SpeakerReferenceError, known_speakers
from whisper_build.serving.realtime.events import ProtocolError, SessionConfig
from whisper_build.serving.realtime.limits import speakers_requested
from whisper_build.serving.realtime.server_events import Send, TranscriptSegment, error_event
from whisper_build.serving.realtime.timeline import samples_to_seconds
from whisper_build.serving.transcription.backend import BackendError, TranscriptionBackend
from whisper_build.serving.transcription.speakers import SessionSpeakers, TurnSpeakers, turn_pieces

__all__ = ["LiveSpeakers"]

PARAM = "session.audio.input.transcription"


class LiveSpeakers:
    """One session's speaker labelling (off until a ``session.update`` asks for ``<id>-diarize``).

    Args:
        backend: the model server (the core calls its ``diarize``); timeout: one call's deadline, seconds.
        send: sends a server event.
    """

    def __init__(self, backend: TranscriptionBackend, timeout: float, send: Send) -> None:
        self.backend = backend
        self.timeout = timeout
        self.send = send
        self.core: SessionSpeakers | None = None
        self._known: tuple[list[str], list[str]] | None = None
        self._segments = 0
        self._reported: set[str] = set()  # failure messages already sent (one error event each)

    async def configure(self, config: SessionConfig) -> None:
        """Turn speakers on or off for ``config``; (re)read known speakers when they changed.

        Raises:
            ProtocolError: known speakers without ``-diarize``, or unusable names/references (the message
                says which, as the file endpoint's 400 does).
        """
        transcription = config.audio.input.transcription
        names, references = transcription.known_speaker_names or [], transcription.known_speaker_references or []
        if not speakers_requested(config):
            if names or references:
                raise ProtocolError(
                    "known speakers need speakers on: set transcription.model to <model>-diarize",
                    "invalid_value",
                    f"{PARAM}.model",
                )
            self.core = None
            return
        if self.core is not None and self._known == (names, references):
            return
        try:
            known = await asyncio.to_thread(known_speakers, names, references)
        except SpeakerReferenceError as exc:
            raise ProtocolError(str(exc), "invalid_value", f"{PARAM}.{exc.param}") from None
        self.core = SessionSpeakers(self.backend, self.timeout, known)
        self._known = (names, references)

    def start(self, audio: Any) -> asyncio.Task[TurnSpeakers] | None:
        """Start labelling one turn's audio (16 kHz float32) beside its final decode; ``None`` when off."""
        if self.core is None or len(audio) == 0:
            return None
        return asyncio.create_task(self.core.label(audio))

    async def finish(
        self, task: asyncio.Task[TurnSpeakers] | None, item: str, start_sample: int, transcript: str, seconds: float
    ) -> str | None:
        """The turn's speaker (its ``completed`` carries it), after its ``segment`` events; ``None`` when off.

        One ``segment`` per run of one speaker in the turn (:func:`turn_pieces`: words spread over the speech).

        A failed call sends one ``error`` event per distinct failure (how to enable a missing speaker
        model, a timeout), and the turn completes without a speaker.
        """
        if task is None:
            return None
        try:
            who = await task
        except BackendError as exc:
            message = f"no speaker for this turn: {exc}"
            if message not in self._reported:
                self._reported.add(message)
                error = error_event(message, "speakers_unavailable", f"{PARAM}.model", kind="server_error")
                await self.send(error.wire())
            return None
        start = samples_to_seconds(start_sample)
        for piece in turn_pieces(transcript, who, seconds):
            self._segments += 1
            segment = TranscriptSegment(item_id=item, id=f"seg_{self._segments}", start=round(start + piece.start, 3),
                                        end=round(start + piece.end, 3), speaker=piece.speaker, text=piece.text)  # fmt: skip
            await self.send(segment.wire())
        return who.speaker

    @staticmethod
    def cancel(task: asyncio.Task[TurnSpeakers] | None) -> None:
        """Drop a turn's labelling (its turn failed); its outcome is read so that none is left unretrieved."""
        if task is not None:
            task.cancel()
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
