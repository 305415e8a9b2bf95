"""The Festival dialogues of tests/data/speakers (generate.py there) and how diarization is scored on them.

DER is pyannote.metrics' ``DiarizationErrorRate`` with a 0.25 s collar (NIST's convention: 0.25 s
around each true boundary is not scored; the truth's turn edges are synthesis edges, not
hand-marked) and overlap scored (``skip_overlap=False``; the dialogues have none). Hypothesis labels
are mapped to true speakers by the metric's optimal (Hungarian) mapping.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import numpy.typing as npt
from pyannote.core import Annotation, Segment, Timeline
from pyannote.metrics.diarization import DiarizationErrorRate

from whisper_build.serving.audio import decode_audio
from whisper_build.serving.diarization.speakers import Turn

SPEAKERS_DIR = Path(__file__).resolve().parents[1] / "data" / "speakers"
TRUTH: dict[str, list[dict[str, object]]] = json.loads((SPEAKERS_DIR / "truth.json").read_text())
DIALOGUES = tuple(TRUTH)
COLLAR_S = 0.25
DER_BOUND = 0.12
"""Measured 3.6 % (male/female), 9.0 % (male/male: turns bridge the 0.5 s pauses), 4.4 % (three)."""
CONFUSION_BOUND = 0.05
"""Speaker confusion ÷ scored speech; measured 3.0 %, 4.1 %, 2.9 % (the first 0.9 s, "Good morning,",
goes to the other voice in every file)."""


def samples(name: str) -> npt.NDArray[np.float32]:
    """16 kHz mono float32 of ``tests/data/speakers/<name>.flac``."""
    return decode_audio((SPEAKERS_DIR / f"{name}.flac").read_bytes()).samples


def data_url(name: str) -> str:
    """``tests/data/speakers/<name>.flac`` as a ``data:audio/flac;base64,…`` URL."""
    return "data:audio/flac;base64," + base64.b64encode((SPEAKERS_DIR / f"{name}.flac").read_bytes()).decode()


def true_speakers(dialogue: str) -> set[str]:
    return {str(turn["speaker"]) for turn in TRUTH[dialogue]}


def annotation(turns: list[tuple[float, float, str]]) -> Annotation:
    result = Annotation()
    for start, end, speaker in turns:
        result[Segment(start, end)] = speaker
    return result


def reference(dialogue: str) -> Annotation:
    return annotation([(float(t["start"]), float(t["end"]), str(t["speaker"])) for t in TRUTH[dialogue]])  # type: ignore[arg-type]


def der(dialogue: str, turns: list[Turn]) -> tuple[float, float]:
    """(DER, confusion ÷ scored speech) of ``turns`` against the truth (collar :data:`COLLAR_S`, overlap scored).

    Scored over the whole file: from 0 to the end of the last true turn.
    """
    metric = DiarizationErrorRate(collar=COLLAR_S, skip_overlap=False)
    truth = reference(dialogue)
    uem = Timeline([Segment(0.0, truth.get_timeline().extent().end)])
    hypothesis = annotation([(t.start, t.end, t.speaker) for t in turns])
    detail = metric(truth, hypothesis, uem=uem, detailed=True)
    return float(detail["diarization error rate"]), float(detail["confusion"] / detail["total"])


def true_speaker_at(dialogue: str, seconds: float) -> str:
    """The true speaker of the turn holding ``seconds``, else of the nearest turn."""
    turns = TRUTH[dialogue]

    def distance(turn: dict[str, object]) -> float:
        start, end = float(turn["start"]), float(turn["end"])  # type: ignore[arg-type]
        return 0.0 if start <= seconds <= end else min(abs(start - seconds), abs(end - seconds))

    return str(min(turns, key=distance)["speaker"])


def word_attribution(dialogue: str, words: list[tuple[float, float, str]]) -> float:
    """Share of ``(start, end, speaker)`` words whose label maps to the true speaker at the word's middle.

    Labels are mapped to true speakers by majority vote (each label to the true speaker most of its words have).
    """
    truth = [true_speaker_at(dialogue, (start + end) / 2) for start, end, _ in words]
    votes: dict[str, dict[str, int]] = {}
    for (_, _, label), true in zip(words, truth, strict=True):
        votes.setdefault(label, {}).setdefault(true, 0)
        votes[label][true] += 1
    mapping = {label: max(counts, key=lambda k: counts[k]) for label, counts in votes.items()}
    return sum(mapping[label] == true for (_, _, label), true in zip(words, truth, strict=True)) / len(words)
