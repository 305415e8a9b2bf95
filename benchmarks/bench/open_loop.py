"""Open-loop levels: requests sent at scheduled arrival times whatever the server does, from several processes.

Arrivals at ``rate`` per second over a level (Poisson: seeded exponential gaps; or evenly spaced) are
dealt round-robin to ``clients`` spawned processes, each with its own connections and event loop, all
keyed to one ``time.monotonic()`` start (system-wide on Linux). A request is timed from its scheduled
arrival, so time queued anywhere — in the server or in a late client — counts; each request's send lag
(actual send − schedule) is kept, the proof that the generator kept its schedule. In-process targets
(the engine in this process) run on this process's event loop instead.
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Literal

import httpx
import numpy as np

from benchmarks.bench.audio import AudioSample, load_samples
from benchmarks.bench.runner import measure_level, timed_request
from benchmarks.bench.stats import LevelResult, Outcome, percentile
from benchmarks.bench.targets import Target, TargetSpec, open_target

Arrivals = Literal["poisson", "even"]
_LEAD_S = 0.5  # the clients' common start lies this far ahead of the level's submission
_CONNECTIONS = 256  # HTTP connections per client process (more requests wait for one, and that counts)


def arrival_offsets(rate: float, duration_s: float, arrivals: Arrivals = "poisson", seed: int = 0) -> list[float]:
    """Seconds from the level's start of each arrival within ``[0, duration_s)``.

    Args:
        rate: mean arrivals per second (> 0).
        duration_s: the level's length (> 0).
        arrivals: ``poisson`` (exponential gaps) or ``even`` (every ``1 / rate`` s).
        seed: the Poisson draws' ``numpy.random.default_rng`` seed.

    Raises:
        ValueError: a non-positive rate or duration, or an unknown arrival process.
    """
    if rate <= 0 or duration_s <= 0:
        raise ValueError(f"rate and duration must be > 0, got {rate}/s over {duration_s} s")
    if arrivals == "even":
        return [k / rate for k in range(math.ceil(rate * duration_s))]
    if arrivals != "poisson":
        raise ValueError(f"arrivals: poisson or even, got {arrivals!r}")
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.exponential(1 / rate, size=int(rate * duration_s * 1.3) + 50))
    while times[-1] < duration_s:  # rare: draw more gaps
        times = np.concatenate([times, times[-1] + np.cumsum(rng.exponential(1 / rate, size=len(times)))])
    return [float(t) for t in times[times < duration_s]]


@dataclass
class ClientResult:
    """What one client sent: outcomes (latency from the scheduled arrival), send lags, its last answer."""

    outcomes: list[Outcome] = field(default_factory=list)
    lags_s: list[float] = field(default_factory=list)
    last_answer: float = 0.0
    """``time.monotonic()`` of its last answer (0 = none sent)."""


async def send_at(
    target: Target, samples: Sequence[AudioSample], arrivals: Sequence[tuple[int, float]], start: float, timeout: float
) -> ClientResult:
    """Send arrival ``(k, offset)`` at ``start + offset`` with ``samples[k % len(samples)]``; wait for every answer."""
    result = ClientResult()

    async def one(sample: AudioSample, scheduled: float) -> None:
        outcome = await timed_request(target, sample, timeout)
        finished = time.monotonic()
        result.outcomes.append(Outcome(outcome.status, finished - scheduled, outcome.audio_s))
        result.last_answer = max(result.last_answer, finished)

    tasks = []
    for index, offset in arrivals:
        scheduled = start + offset
        if (delay := scheduled - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        result.lags_s.append(max(0.0, time.monotonic() - scheduled))
        tasks.append(asyncio.create_task(one(samples[index % len(samples)], scheduled)))
    await asyncio.gather(*tasks)
    return result


_CLIENT: dict[str, object] = {}


def _client_init(spec: TargetSpec, model: str, audio: list[str]) -> None:
    _CLIENT.update(spec=spec, model=model, samples=load_samples(audio))


def _client_level(arrivals: list[tuple[int, float]], start: float, timeout: float) -> ClientResult:
    async def run() -> ClientResult:
        spec, model = _CLIENT["spec"], _CLIENT["model"]
        assert isinstance(spec, TargetSpec) and isinstance(model, str)
        target = open_target(spec, _CONNECTIONS, model)
        try:
            return await send_at(target, _CLIENT["samples"], arrivals, start, timeout)  # type: ignore[arg-type]
        finally:
            await target.close()

    return asyncio.run(run())


def _client_ready() -> int:
    time.sleep(0.2)  # held long enough that every worker process is started and takes one
    return multiprocessing.current_process().pid or 0


class OpenLoopClients:
    """``clients`` spawned processes, each holding ``audio`` loaded and opening ``spec`` per level.

    Use as a context manager; :meth:`run` runs one level. In-process targets are refused (run them
    with :func:`send_at` in the process that holds the engine).
    """

    def __init__(self, spec: TargetSpec, audio: Sequence[Path | str], clients: int, model: str = "whisper") -> None:
        if spec.kind == "in_process":
            raise ValueError(f"target {spec.name}: the engine lives in this process; send from it (send_at)")
        if clients < 1:
            raise ValueError(f"clients must be ≥ 1, got {clients}")
        self.clients = clients
        self._pool = ProcessPoolExecutor(
            clients, multiprocessing.get_context("spawn"), _client_init, (spec, model, [str(p) for p in audio])
        )

    def __enter__(self) -> OpenLoopClients:
        ready = [self._pool.submit(_client_ready) for _ in range(self.clients)]
        for future in ready:
            future.result()
        return self

    def __exit__(self, *_: object) -> None:
        self._pool.shutdown(cancel_futures=True)

    async def run(self, offsets: Sequence[float], timeout: float) -> tuple[list[ClientResult], float]:
        """One level: arrival ``k`` goes to client ``k % clients``; returns per-client results and the start."""
        start = time.monotonic() + _LEAD_S
        shares = [[(k, o) for k, o in enumerate(offsets) if k % self.clients == c] for c in range(self.clients)]
        futures = [asyncio.wrap_future(self._pool.submit(_client_level, s, start, timeout)) for s in shares]
        return list(await asyncio.gather(*futures)), start


def merge(results: Sequence[ClientResult], start: float, duration_s: float) -> tuple[list[Outcome], float, list[float]]:
    """(every outcome, level wall seconds, every send lag); wall runs from the start to the last answer, ≥ ``duration_s``."""
    outcomes = [o for r in results for o in r.outcomes]
    last = max((r.last_answer for r in results), default=0.0)
    return outcomes, max(duration_s, last - start), [lag for r in results for lag in r.lags_s]


@dataclass(frozen=True)
class OpenPlan:
    """The open-loop levels: arrival ``rates`` (per second) of ``duration_s`` each, sent by ``clients`` processes.

    Level ``i`` draws its arrivals with seed ``seed + i``; ``request_timeout_s`` bounds each request.
    """

    rates: Sequence[float]
    duration_s: float
    clients: int = 4
    arrivals: Arrivals = "poisson"
    seed: int = 0
    request_timeout_s: float = 60.0


async def _open_level(
    pool: OpenLoopClients | None,
    target: Target,
    samples: Sequence[AudioSample],
    offsets: list[float],
    plan: OpenPlan,
    lags: list[float],
) -> tuple[list[Outcome], float]:
    """One open-loop level through ``pool`` (or from this loop when ``None``); appends the send lags to ``lags``."""
    if pool is not None:
        sent, start = await pool.run(offsets, plan.request_timeout_s)
    else:
        start = time.monotonic() + 0.05
        sent = [await send_at(target, samples, list(enumerate(offsets)), start, plan.request_timeout_s)]
    outcomes, wall, level_lags = merge(sent, start, plan.duration_s)
    lags += level_lags
    return outcomes, wall


async def open_sweep(
    targets: Sequence[Target],
    specs: Sequence[TargetSpec],
    samples: Sequence[AudioSample],
    plan: OpenPlan,
    deadline_s: float,
    metrics_urls: dict[str, str] | None = None,
    model: str = "whisper",
    on_level: Callable[[LevelResult], None] | None = None,
    metrics_settle_s: float = 1.0,
) -> list[LevelResult]:
    """Every target (``specs[i]`` describes ``targets[i]``) × every rate, rates rising; one result per level.

    Levels not started by ``deadline_s`` seconds from now are skipped. Client processes send for
    network targets; an in-process target is sent to from this event loop (one client).
    """
    deadline = time.monotonic() + deadline_s
    results: list[LevelResult] = []
    audio = [s.path for s in samples]
    async with httpx.AsyncClient() as scraper:
        for target, spec in zip(targets, specs, strict=True):
            pool = None if spec.kind == "in_process" else OpenLoopClients(spec, audio, plan.clients, model)
            with pool or contextlib.nullcontext():
                for i, rate in enumerate(sorted(plan.rates)):
                    if time.monotonic() >= deadline:
                        break
                    offsets = arrival_offsets(rate, plan.duration_s, plan.arrivals, plan.seed + i)
                    lags: list[float] = []
                    level = partial(_open_level, pool, target, samples, offsets, plan, lags)
                    result = await measure_level(
                        scraper, (metrics_urls or {}).get(target.name), model, metrics_settle_s, target, 0, level
                    )
                    result = replace(
                        result, rate_per_s=rate, offered_per_s=len(offsets) / plan.duration_s,
                        clients=pool.clients if pool else 1, send_lag_p99_s=percentile(lags, 99),
                    )  # fmt: skip
                    results.append(result)
                    if on_level:
                        on_level(result)
    return results
