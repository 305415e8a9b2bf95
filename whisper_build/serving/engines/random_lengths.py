"""Benchmark mode's per-window decode lengths: the mixed workload, drawn from each window's own samples.

``random_weights_lengths="mixed"`` (with random weights) decodes ``low + round((high - low) · Beta(a, b))``
tokens per window, 10–140 with mean ≈ 60, the generator seeded by a hash of every 64th sample of the
window (cheap beside a decode step): the same window decodes the same count whichever path sends it.
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

MIXED = {"low": 10, "high": 140, "beta_a": 2.0, "beta_b": 3.2}
"""The mixed distribution (tokens per window); mean ``10 + 130 · 2 / 5.2 ≈ 60``."""


def mixed_window_tokens(audio: npt.NDArray[np.float32]) -> int:
    """The mixed workload's decode length of one window (tokens, ``MIXED["low"]..MIXED["high"]``).

    Args:
        audio: the window's samples (1-D; every 64th is hashed as float32 bytes).
    """
    strided = np.ascontiguousarray(np.ravel(audio)[::64], dtype=np.float32)
    digest = hashlib.blake2b(strided.tobytes(), digest_size=8).digest()
    draw = np.random.default_rng(int.from_bytes(digest, "little")).beta(MIXED["beta_a"], MIXED["beta_b"])
    return int(MIXED["low"] + round((MIXED["high"] - MIXED["low"]) * float(draw)))
