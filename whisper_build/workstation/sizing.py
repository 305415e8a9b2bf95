"""Fleet sizing: replicas per GPU group, cost, and the cheapest mix of GPU types for a target.

Inputs: a :data:`Target` and, per GPU group, an :class:`Offer` (price per instance-hour from
``settings.prices``, pods per instance, capacity per pod, and the group's figures of the throughput
table ``settings.throughput``, measured or estimated). Arithmetic, per target:

Entry point: :func:`plan` (the details, in its docstring).
Docs: docs/cost.md, "Sizing (`make sizing`)".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from settings.prices import HOURS_PER_MONTH
from settings.throughput import ThroughputFigure
from whisper_build.serving.contract import WINDOW_SECONDS

TAIL_FACTOR = 1.5
"""p95 ÷ mean latency assumed for synchronous requests. The H200 served run's p99 ÷ p50 through the
gateway was 1.2–1.5 at concurrency 1–64 (docs/benchmarks.md, "GPU, served path")."""
SEARCH_LIMIT = 200_000
"""Most combinations :func:`cheapest_mix` tries; beyond it only single types are compared."""


@dataclass(frozen=True)
class DailyVolume:
    """``audio_hours_per_day`` of audio transcribed around the clock."""

    audio_hours_per_day: float


@dataclass(frozen=True)
class SyncLatency:
    """``requests_per_second`` synchronous requests of ``audio_seconds`` each, answered within ``p95_seconds``."""

    requests_per_second: float
    p95_seconds: float
    audio_seconds: float = WINDOW_SECONDS


@dataclass(frozen=True)
class BulkDeadline:
    """``audio_hours`` of recordings finished within ``deadline_hours``."""

    audio_hours: float
    deadline_hours: float


Target = DailyVolume | SyncLatency | BulkDeadline


@dataclass(frozen=True)
class Offer:
    """One GPU group as sizing sees it.

    Attributes:
        group: GPU group name.
        instance_type: ``ml.*`` instance type.
        usd_per_hour: price of one instance-hour, ``None`` when the price list has none.
        pods_per_instance: serving pods one instance holds (GPUs × MIG slices per GPU).
        capacity: concurrent requests one pod is sized for (``GpuGroup.effective_capacity``).
        figures: the throughput table's figures for one pod: the group's GPU, engine and model, on
            MIG one slice's (``settings.throughput.slice_figures``).
        mig_profile: the MIG profile a pod serves on (e.g. ``1g.10gb``), ``None`` for a whole GPU.
    """

    group: str
    instance_type: str
    usd_per_hour: float | None
    pods_per_instance: int
    capacity: int
    figures: tuple[ThroughputFigure, ...]
    mig_profile: str | None = None


@dataclass(frozen=True)
class Plan:
    """One offer sized for a target on its own.

    Attributes:
        offer: the offer.
        figure: the operating point in the throughput table, ``None`` when the target cannot be met.
        per_pod: rate one pod delivers, in the target's unit (:func:`unit`).
        replicas: pods needed (0 when infeasible).
        instances: instances needed (0 when infeasible).
        cost_usd: instances × price × :func:`billed_hours`, ``None`` without a price or when infeasible.
        note: why infeasible, else empty.
    """

    offer: Offer
    figure: ThroughputFigure | None
    per_pod: float
    replicas: int
    instances: int
    cost_usd: float | None
    note: str = ""

    @property
    def per_instance(self) -> float:
        """Rate one instance delivers (pods per instance × per pod)."""
        return self.per_pod * self.offer.pods_per_instance


def describe(target: Target) -> str:
    """The target in words, e.g. ``2000 audio hours a day``."""
    if isinstance(target, DailyVolume):
        return f"{target.audio_hours_per_day:g} audio hours a day"
    if isinstance(target, SyncLatency):
        return (
            f"{target.requests_per_second:g} synchronous requests/s of {target.audio_seconds:g} s audio, "
            f"p95 ≤ {target.p95_seconds:g} s"
        )
    return f"{target.audio_hours:g} audio hours within {target.deadline_hours:g} h"


def unit(target: Target) -> str:
    """Unit of demand and rates: ``windows/s`` for synchronous targets, else ``audio s/s``."""
    return "windows/s" if isinstance(target, SyncLatency) else "audio s/s"


def demand(target: Target) -> float:
    """The target's demand in :func:`unit`."""
    if isinstance(target, DailyVolume):
        return target.audio_hours_per_day * 3600 / 86400
    if isinstance(target, SyncLatency):
        return target.requests_per_second * math.ceil(target.audio_seconds / WINDOW_SECONDS)
    return target.audio_hours / target.deadline_hours


def billed_hours(target: Target) -> float:
    """Hours the fleet is billed for: the deadline for a bulk job, else a month."""
    return target.deadline_hours if isinstance(target, BulkDeadline) else HOURS_PER_MONTH


def _within_capacity(offer: Offer) -> list[ThroughputFigure]:
    within = [f for f in offer.figures if f.batch <= offer.capacity]
    return within or sorted(offer.figures, key=lambda f: f.batch)[:1]


def operating_point(offer: Offer, target: Target, target_utilization: float) -> tuple[ThroughputFigure, float] | str:
    """The figure a pod runs at and its rate in :func:`unit`, or the reason the target cannot be met."""
    if not offer.figures:
        return "no throughput figure for this GPU, engine and model"
    candidates = _within_capacity(offer)
    if isinstance(target, SyncLatency):
        fast = [f for f in candidates if TAIL_FACTOR * f.batch / f.windows_per_second <= target.p95_seconds]
        if not fast:
            quickest = min(candidates, key=lambda f: f.batch / f.windows_per_second)
            p95 = TAIL_FACTOR * quickest.batch / quickest.windows_per_second
            return f"its quickest p95 ≈ {p95:.2f} s (batch {quickest.batch:g}) > {target.p95_seconds:g} s"
        figure = max(fast, key=lambda f: f.windows_per_second)
        return figure, figure.windows_per_second
    figure = max(candidates, key=lambda f: f.rtfx)
    headroom = 1.0 if isinstance(target, BulkDeadline) else target_utilization
    return figure, figure.rtfx * headroom


def _ceil(value: float) -> int:
    return math.ceil(value - 1e-9)


def plan(offer: Offer, target: Target, target_utilization: float) -> Plan:
    """``offer`` sized alone for ``target`` (module docstring).

    * :class:`DailyVolume` (audio hours a day, around the clock): demand = audio hours ÷ 24 in audio
      seconds per second; a pod delivers the table's audio s/s (RTFx) at the largest batch ≤ its capacity,
      × ``autoscaling.target_utilization`` (KEDA keeps pods at that share of capacity). Cost per month.
    * :class:`SyncLatency` (requests per second at a p95 latency): demand = requests/s × 30 s windows per
      request, in windows/s; a pod runs at the largest batch b ≤ its capacity whose window latency
      ``b ÷ windows/s(b)`` (Little's law: the mean time in flight) × :data:`TAIL_FACTOR` ≤ the p95 target,
      and delivers windows/s(b). A type with no such batch cannot meet the target. Cost per month.
    * :class:`BulkDeadline` (audio hours finished within a deadline): demand = audio hours ÷ deadline
      hours in audio s/s; pods run at their best batch ≤ capacity with no headroom (a queue keeps them
      full). Cost of the job (instances × price × deadline hours).

    Replicas = ⌈demand ÷ per-pod rate⌉, instances = ⌈replicas ÷ pods per instance⌉. The cheapest mix
    minimises Σ instances × price over whole instances of every priced, feasible type such that their
    rates add up to the demand (an exhaustive search; a mix can beat every single type because
    instances come whole).
    """
    point = operating_point(offer, target, target_utilization)
    if isinstance(point, str):
        return Plan(offer, None, 0.0, 0, 0, None, point)
    figure, per_pod = point
    replicas = max(1, _ceil(demand(target) / per_pod))
    instances = _ceil(replicas / offer.pods_per_instance)
    cost = None if offer.usd_per_hour is None else instances * offer.usd_per_hour * billed_hours(target)
    return Plan(offer, figure, per_pod, replicas, instances, cost, "" if cost is not None else "no price")


@dataclass(frozen=True)
class Mix:
    """Instances per GPU group (only those > 0) and what they cost (:func:`billed_hours`).

    ``exhaustive`` is False when the search space was above :data:`SEARCH_LIMIT` and only single
    types were compared.
    """

    instances: dict[str, int]
    cost_usd: float
    exhaustive: bool


def _single(usable: Sequence[Plan]) -> Mix:
    best = min(usable, key=lambda p: (p.cost_usd, p.instances))
    assert best.cost_usd is not None
    return Mix({best.offer.group: best.instances}, best.cost_usd, exhaustive=False)


def cheapest_mix(plans: Sequence[Plan], target: Target) -> Mix | None:
    """The cheapest whole-instance combination of the priced, feasible plans that meets ``target``.

    ``None`` when no plan is priced and feasible. Ties go to fewer instances, then to config order.
    """
    usable = [p for p in plans if p.cost_usd is not None and p.per_instance > 0]
    need, hours = demand(target), billed_hours(target)
    if not usable or not need > 0:
        return None
    bounds = [_ceil(need / p.per_instance) for p in usable[:-1]]
    if math.prod(b + 1 for b in bounds) > SEARCH_LIMIT:
        return _single(usable)
    best: tuple[float, int, tuple[int, ...]] | None = None
    for counts in itertools.product(*(range(b + 1) for b in bounds)):
        covered = sum(n * p.per_instance for n, p in zip(counts, usable, strict=False))
        full = (*counts, max(0, _ceil((need - covered) / usable[-1].per_instance)))
        if sum(full) == 0:
            continue
        cost = sum(n * (p.offer.usd_per_hour or 0.0) * hours for n, p in zip(full, usable, strict=True))
        candidate = (round(cost, 9), sum(full), full)
        if best is None or candidate[:2] < best[:2]:
            best = candidate
    assert best is not None
    return Mix({p.offer.group: n for n, p in zip(best[2], usable, strict=True) if n}, best[0], exhaustive=True)


@dataclass(frozen=True)
class SpotShare:
    """Instances of one bulk group on Spot and On-Demand, and what the job costs (:func:`spot_share`).

    Attributes:
        spot: Spot instances asked for.
        on_demand: On-Demand instances.
        cost_usd: On-Demand instances × price × hours + Spot instances × availability × Spot price × hours.
        spot_audio_share: share of the backlog the Spot instances are counted on for (0–1).
    """

    spot: int
    on_demand: int
    cost_usd: float
    spot_audio_share: float


def spot_share(
    per_instance: float,
    target: BulkDeadline,
    *,
    on_demand_usd: float,
    spot_usd: float,
    availability: float,
    max_instances: int,
) -> SpotShare | None:
    """The cheapest Spot + On-Demand counts that finish ``target`` by its deadline, ``None`` when none fits.

    Criterion: a Spot instance is counted on for ``availability`` (0–1] of the deadline's hours and billed for
    those hours only; an On-Demand one for all of them. Among ``spot + on_demand <= max_instances`` with
    ``(on_demand + spot × availability) × per_instance >= demand``, the least cost, then the fewest instances.

    Args:
        per_instance: audio s/s one instance delivers (:attr:`Plan.per_instance`).
        target: the backlog and its deadline.
        on_demand_usd: USD per On-Demand instance-hour.
        spot_usd: USD per Spot instance-hour.
        availability: share of its hours a Spot instance runs (an assumption the caller states).
        max_instances: most instances of the group (the bulk Deployment's ``max_replicas`` ÷ pods per instance).
    """
    need, hours = demand(target), billed_hours(target)
    best: tuple[float, int, int, int] | None = None
    for spot in range(max_instances + 1):
        on_demand = max(0, _ceil((need - spot * availability * per_instance) / per_instance))
        if spot + on_demand > max_instances or spot + on_demand == 0:
            continue
        cost = round((on_demand * on_demand_usd + spot * availability * spot_usd) * hours, 9)
        if best is None or (cost, spot + on_demand) < best[:2]:
            best = (cost, spot + on_demand, spot, on_demand)
    if best is None:
        return None
    cost, _, spot, on_demand = best
    delivered = (on_demand + spot * availability) * per_instance
    return SpotShare(spot, on_demand, cost, spot * availability * per_instance / delivered)
