"""Speaker turns as the gateway and bulk see them: :class:`Turn`, :class:`SpeakerOptions`, labels.

The turns come from the Triton ``speaker`` model (:mod:`.senko_model`, reached through the backend
seam's ``diarize``); its ``TURNS`` carry speaker indices, named here (:func:`name_turns`): known
speakers by name, the others ``A``, ``B``, … Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

__all__ = ["MATCH_THRESHOLD", "MAX_SPEAKERS", "SAMPLE_RATE", "SpeakerOptions", "Turn", "letters", "name_turns"]

MAX_SPEAKERS = 15
"""Most speakers the clustering considers (senko's spectral default)."""
MATCH_THRESHOLD = 0.8
"""A cluster takes a known speaker's name when the cosine similarity of its centroid and the
reference's CAM++ embedding is at least this (measured on the Festival fixtures: same voice
0.87-0.94, another voice 0.45-0.73)."""
SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class Turn:
    """One speaker turn: ``start``/``end`` in seconds of the file, ``speaker`` its label."""

    start: float
    end: float
    speaker: str


@dataclass(frozen=True)
class SpeakerOptions:
    """What one request asks of the clustering.

    Attributes:
        min_speakers: fewest speakers the spectral clustering may pick (1 ≤ it).
        max_speakers: most speakers (≤ :data:`MAX_SPEAKERS`).
        known: ``(name, reference samples)`` pairs: 16 kHz mono float32 clips of known speakers.
    """

    min_speakers: int = 1
    max_speakers: int = MAX_SPEAKERS
    known: list[tuple[str, npt.NDArray[np.float32]]] = field(default_factory=list)


def letters(index: int) -> str:
    """``0`` → ``A``, ``25`` → ``Z``, ``26`` → ``AA`` (OpenAI labels speakers ``A``, ``B``, …)."""
    label = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        label = string.ascii_uppercase[rest] + label
    return label


def name_turns(indexed: list[tuple[float, float, int]], names: list[str]) -> list[Turn]:
    """Turns with labels from the speaker model's ``(start, end, index)`` rows (``TURNS``).

    Index ``i < len(names)`` is the known speaker ``names[i]``; the others (numbered by first
    appearance) get ``A``, ``B``, … in that order, skipping letters already used as names.
    """
    taken = set(names)
    labels: dict[int, str] = {i: name for i, name in enumerate(names)}
    next_letter = 0
    for index in sorted({i for _, _, i in indexed if i >= len(names)}):
        while letters(next_letter) in taken:
            next_letter += 1
        labels[index] = letters(next_letter)
        taken.add(labels[index])
    return [Turn(start, end, labels[i]) for start, end, i in indexed]
