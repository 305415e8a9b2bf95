"""Arithmetic of one benchmark level: latency percentiles, throughput, RTF and RTFx.

Definitions (the same as docs/benchmarks.md):

- latency: wall time of one successful request, client side, seconds.
- ``requests_per_s``: successful requests ÷ level wall time.
- ``audio_s_per_s``: seconds of audio transcribed successfully ÷ level wall time (the
  throughput-based speed-up over real time of the whole server).
- ``rtf`` (real-time factor): processing time ÷ audio time, summed over successful requests,
  i.e. ``sum(latency) / sum(audio seconds)``; ``< 1`` is faster than real time.
- ``rtfx``: ``1 / rtf`` (the per-request speed-up over real time).
- ``avg_batch_size``: rows per engine pass from the model scheduler's counters over the level, else
  Triton's ``Δ nv_inference_count / Δ nv_inference_exec_count`` (:mod:`.triton_metrics`); ``None`` without metrics.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

OK = "ok"
"""Status of a successful request; every other status string counts as an error."""

PERCENTILES = (50, 90, 99)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0–100) of ``values``; ``None`` for no values.

    Linear interpolation between closest ranks (NumPy's default ``linear`` method).

    Raises:
        ValueError: ``q`` outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within [0, 100], got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True)
class Outcome:
    """One finished request.

    Fields: ``status`` (``ok``, ``http_500``, ``timeout``, …), client-side ``latency_s`` and the
    ``audio_s`` of the file it carried.
    """

    status: str
    latency_s: float
    audio_s: float


@dataclass
class LevelResult:
    """Summary of one (target, concurrency) level; see the module docstring for definitions."""

    target: str
    concurrency: int
    wall_s: float
    requests: int
    ok: int
    errors: dict[str, int] = field(default_factory=dict)
    latency_p50_s: float | None = None
    latency_p90_s: float | None = None
    latency_p99_s: float | None = None
    latency_mean_s: float | None = None
    requests_per_s: float = 0.0
    audio_s_per_s: float = 0.0
    rtf: float | None = None
    rtfx: float | None = None
    avg_batch_size: float | None = None
    started_unix: float | None = None
    triton_ms: dict[str, float] | None = None
    """Milliseconds inside Triton (:func:`benchmarks.bench.triton_metrics.server_timings`)."""

    def as_dict(self) -> dict:
        """Plain dict for JSON (errors stay a nested ``{status: count}`` mapping)."""
        return asdict(self)


def summarize(
    target: str,
    concurrency: int,
    outcomes: Sequence[Outcome],
    wall_s: float,
    avg_batch_size: float | None = None,
) -> LevelResult:
    """Reduce the outcomes of one level to a :class:`LevelResult`.

    Args:
        target: target name.
        concurrency: requests kept in flight.
        outcomes: every request of the level, successful or not.
        wall_s: wall time of the level, seconds (> 0).
        avg_batch_size: from :func:`benchmarks.bench.triton_metrics.average_batch_size`.

    Raises:
        ValueError: ``wall_s`` is not positive.
    """
    if wall_s <= 0:
        raise ValueError(f"wall_s must be > 0, got {wall_s}")
    good = [o for o in outcomes if o.status == OK]
    latencies = [o.latency_s for o in good]
    audio = sum(o.audio_s for o in good)
    busy = sum(latencies)
    rtf = busy / audio if audio > 0 else None
    p50, p90, p99 = (percentile(latencies, q) for q in PERCENTILES)
    return LevelResult(
        target=target,
        concurrency=concurrency,
        wall_s=wall_s,
        requests=len(outcomes),
        ok=len(good),
        errors=dict(sorted(Counter(o.status for o in outcomes if o.status != OK).items())),
        latency_p50_s=p50,
        latency_p90_s=p90,
        latency_p99_s=p99,
        latency_mean_s=busy / len(good) if good else None,
        requests_per_s=len(good) / wall_s,
        audio_s_per_s=audio / wall_s,
        rtf=rtf,
        rtfx=1 / rtf if rtf else None,
        avg_batch_size=avg_batch_size,
    )
