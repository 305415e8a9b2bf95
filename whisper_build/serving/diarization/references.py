"""``known_speaker_names[]`` + ``known_speaker_references[]`` → checked (name, 16 kHz clip) pairs.

OpenAI's contract (openai-python ``TranscriptionCreateParams``): up to 4 known speakers, each
reference an audio data URL (``data:audio/wav;base64,…``) of 2 to 10 seconds, names and references
in the same order. Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio import AudioError, decode_audio, decode_base64

__all__ = [
    "MAX_KNOWN_SPEAKERS",
    "MAX_REFERENCE_SECONDS",
    "MIN_REFERENCE_SECONDS",
    "SpeakerReferenceError",
    "known_speakers",
]

MAX_KNOWN_SPEAKERS = 4
MIN_REFERENCE_SECONDS = 2.0
MAX_REFERENCE_SECONDS = 10.0
_AUDIO_DATA_URL = re.compile(r"^data:(audio/[\w.+-]+|application/octet-stream)(;[^,;]*)*;base64,", re.IGNORECASE)


class SpeakerReferenceError(ValueError):
    """A known-speaker field is unusable; the message says which one and what to send instead.

    Attributes: ``param``: the form field at fault.
    """

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def _clip(index: int, url: str) -> npt.NDArray[np.float32]:
    param = "known_speaker_references"
    if not _AUDIO_DATA_URL.match(url.strip()):
        raise SpeakerReferenceError(
            f"known_speaker_references[{index}] is not an audio data URL: send data:audio/<type>;base64,<audio>",
            param,
        )
    try:
        audio = decode_audio(decode_base64(url), max_seconds=MAX_REFERENCE_SECONDS + 0.5)
    except AudioError as exc:
        raise SpeakerReferenceError(f"known_speaker_references[{index}] is not usable audio: {exc}", param) from exc
    if not MIN_REFERENCE_SECONDS <= audio.duration <= MAX_REFERENCE_SECONDS:
        raise SpeakerReferenceError(
            f"known_speaker_references[{index}] lasts {audio.duration:.1f} s: send a clip of "
            f"{MIN_REFERENCE_SECONDS:g} to {MAX_REFERENCE_SECONDS:g} seconds",
            param,
        )
    return audio.samples


def known_speakers(names: list[str], references: list[str]) -> list[tuple[str, npt.NDArray[np.float32]]]:
    """``(name, samples)`` per known speaker, in order (decoding is blocking CPU work).

    Raises:
        SpeakerReferenceError: more than :data:`MAX_KNOWN_SPEAKERS`, counts that differ, an empty or repeated
            name, a reference that is not an audio data URL, not decodable, or outside 2-10 s.
    """
    if len(references) > MAX_KNOWN_SPEAKERS or len(names) > MAX_KNOWN_SPEAKERS:
        raise SpeakerReferenceError(
            f"{max(len(names), len(references))} known speakers sent: send at most {MAX_KNOWN_SPEAKERS}",
            "known_speaker_references",
        )
    if len(names) != len(references):
        raise SpeakerReferenceError(
            f"{len(names)} known_speaker_names[] but {len(references)} known_speaker_references[]: send one "
            "reference clip per name, in the same order",
            "known_speaker_names",
        )
    cleaned = [name.strip() for name in names]
    if any(not name for name in cleaned) or len(set(cleaned)) != len(cleaned):
        raise SpeakerReferenceError("known_speaker_names[] must be distinct and non-empty", "known_speaker_names")
    return [(name, _clip(i, url)) for i, (name, url) in enumerate(zip(cleaned, references, strict=True))]
