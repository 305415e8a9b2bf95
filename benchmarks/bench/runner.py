"""The sweep: for each target and concurrency, keep N requests in flight for a bounded time or count.

Each level is summarized. Nothing here can hang: every request has its own timeout (enforced twice —
by the client and by ``asyncio.wait_for``), a level stops issuing at its duration or count, and the
whole run stops at an overall deadline; requests still in flight then are cancelled and counted as
``aborted``.
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial

import httpx

from benchmarks.bench import triton_metrics
from benchmarks.bench.audio import AudioSample
from benchmarks.bench.stats import LevelResult, Outcome, summarize
from benchmarks.bench.targets import Target

_GRACE_S = 1.0  # extra time beyond the client timeout before asyncio gives up on a request

ProgressCallback = Callable[[str, int, Outcome], None]
"""Called after each request with (target name, concurrency, outcome)."""


@dataclass(frozen=True)
class LevelPlan:
    """How long each level runs and how long each request may take.

    A level runs until ``duration_s`` seconds have passed or ``max_requests`` requests were issued,
    whichever comes first (``None`` = no such bound; at least one bound must be set).
    ``request_timeout_s`` bounds each request.
    """

    duration_s: float | None
    max_requests: int | None
    request_timeout_s: float

    def __post_init__(self) -> None:
        if self.duration_s is None and self.max_requests is None:
            raise ValueError("a level needs a duration or a request count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError(f"duration must be > 0 s, got {self.duration_s}")
        if self.max_requests is not None and self.max_requests < 1:
            raise ValueError(f"request count must be ≥ 1, got {self.max_requests}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request timeout must be > 0 s, got {self.request_timeout_s}")


async def timed_request(target: Target, sample: AudioSample, timeout: float) -> Outcome:
    """Send one request and time it; never raises except on cancellation.

    Status ``timeout`` when the client or ``asyncio`` deadline passes, ``error_<Type>`` for an
    unexpected exception (a bug in a client, not a server answer).
    """
    start = time.perf_counter()
    try:
        status = await asyncio.wait_for(target.send(sample, timeout), timeout + _GRACE_S)
    except TimeoutError:
        status = "timeout"
    except Exception as exc:  # noqa: BLE001 - any client failure is a counted outcome
        status = f"error_{type(exc).__name__}"
    return Outcome(status, time.perf_counter() - start, sample.duration_s)


async def run_level(
    target: Target,
    samples: Sequence[AudioSample],
    concurrency: int,
    plan: LevelPlan,
    deadline: float,
    on_outcome: ProgressCallback | None = None,
) -> tuple[list[Outcome], float]:
    """Run one level; files are used round-robin.

    Args:
        target: the server under test.
        samples: the input files (at least one), sent in order, round-robin.
        concurrency: requests kept in flight (≥ 1).
        plan: how long the level runs and each request's timeout.
        deadline: ``time.monotonic()`` value at which everything stops (requests in flight are
            cancelled and counted ``aborted``).
        on_outcome: called after each request (:data:`ProgressCallback`).

    Returns:
        (outcomes, wall seconds from the first request to the last answer or the stop).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be ≥ 1, got {concurrency}")
    outcomes: list[Outcome] = []
    issued = 0
    start = time.monotonic()
    stop_issuing = min(start + (plan.duration_s if plan.duration_s else math.inf), deadline)

    async def worker() -> None:
        nonlocal issued
        while time.monotonic() < stop_issuing and (plan.max_requests is None or issued < plan.max_requests):
            sample = samples[issued % len(samples)]
            issued += 1
            began = time.perf_counter()
            try:
                outcome = await timed_request(target, sample, plan.request_timeout_s)
            except asyncio.CancelledError:
                outcomes.append(Outcome("aborted", time.perf_counter() - began, sample.duration_s))
                raise
            outcomes.append(outcome)
            if on_outcome:
                on_outcome(target.name, concurrency, outcome)

    tasks = [asyncio.create_task(worker()) for _ in range(concurrency)]
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return outcomes, max(time.monotonic() - start, 1e-9)


async def _settled_scrape(
    client: httpx.AsyncClient, url: str | None, model: str, settle_s: float
) -> triton_metrics.Counts | None:
    if not url:
        return None
    await asyncio.sleep(settle_s)
    return await triton_metrics.scrape(client, url, model)


async def measure_level(
    scraper: httpx.AsyncClient,
    metrics_url: str | None,
    model: str,
    settle_s: float,
    target: Target,
    concurrency: int,
    level: Callable[[], Awaitable[tuple[list[Outcome], float]]],
) -> LevelResult:
    """Run ``level`` (→ outcomes, wall seconds) between two metrics scrapes and summarize it.

    The batch is Triton's (``metrics_url``) or, for in-process targets, the mean of their engine
    calls; rows per pass come from :func:`benchmarks.bench.triton_metrics.mean_active_rows`.
    """
    calls = getattr(target, "batches", None)  # in-process targets count their own batches
    first_call = len(calls) if calls is not None else 0
    before = await _settled_scrape(scraper, metrics_url, model, settle_s)
    started_unix = time.time()
    outcomes, wall = await level()
    after = await _settled_scrape(scraper, metrics_url, model, settle_s)
    batch = triton_metrics.average_batch_size(before, after)
    rows, source = triton_metrics.mean_active_rows(before, after)
    if calls is not None and len(calls) > first_call:
        batch = rows = sum(calls[first_call:]) / (len(calls) - first_call)
        source = "engine_calls"
    return replace(
        summarize(target.name, concurrency, outcomes, wall, batch),
        started_unix=started_unix,
        triton_ms=triton_metrics.server_timings(before, after),
        mean_active_rows=rows,
        rows_source=source,
    )


async def sweep(
    targets: Sequence[Target],
    samples: Sequence[AudioSample],
    concurrencies: Sequence[int],
    plan: LevelPlan,
    deadline_s: float,
    metrics_urls: dict[str, str] | None = None,
    model: str = "whisper",
    warmup: int = 0,
    on_outcome: ProgressCallback | None = None,
    on_level: Callable[[LevelResult], None] | None = None,
    metrics_settle_s: float = 1.0,
    interleave: bool = False,
) -> list[LevelResult]:
    """Every target × every concurrency, in that order; returns one result per level run.

    Args:
        targets: the servers under test, swept one after another.
        samples: the input files, used round-robin (:func:`run_level`).
        concurrencies: the levels, in the order they run.
        plan: how long each level runs and each request's timeout.
        deadline_s: overall time limit in seconds from now; levels not reached are skipped.
        metrics_urls: target name → Triton metrics URL, scraped before and after each level
            for the average batch size.
        model: the Triton model whose counters are read from ``metrics_urls``.
        warmup: requests per target at concurrency 1 before its sweep, not counted.
        on_outcome: called after each counted request (:data:`ProgressCallback`).
        on_level: called with each level's result as soon as it is known.
        metrics_settle_s: pause before each scrape. Triton's counters can lag the answers (seen
            here: a scrape right after a lone request's answer did not count it yet), so the
            scrape waits a moment for the last batch to be recorded.
        interleave: run level by level (each concurrency on every target in turn) rather than
            target by target, so that slow drifts (clocks, heat, other load) hit all targets alike.
    """
    deadline = time.monotonic() + deadline_s
    metrics_urls = metrics_urls or {}
    results: list[LevelResult] = []
    if interleave:
        order = [(t, c) for c in concurrencies for t in targets]
    else:
        order = [(t, c) for t in targets for c in concurrencies]
    warmed: set[str] = set()
    async with httpx.AsyncClient() as scraper:
        for target, concurrency in order:
            if time.monotonic() >= deadline:
                break
            if warmup and target.name not in warmed:
                warmed.add(target.name)
                await run_level(target, samples, 1, LevelPlan(None, warmup, plan.request_timeout_s), deadline)
            result = await measure_level(
                scraper, metrics_urls.get(target.name), model, metrics_settle_s, target, concurrency,
                partial(run_level, target, samples, concurrency, plan, deadline, on_outcome),
            )  # fmt: skip
            results.append(result)
            if on_level:
                on_level(result)
    return results
