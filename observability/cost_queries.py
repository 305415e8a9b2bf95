"""What the fleet costs per audio hour, per GPU type and in all: PromQL built from the price list.

USD per audio hour of a GPU group = Σ(USD per instance-hour × billed instances of the group) ÷
audio seconds transcribed per second by that group over the last hour (audio seconds per second =
audio hours per hour, so the quotient is USD per audio hour). The fleet figure divides the sums.

Entry point: :func:`cost_queries` (the details, in its docstring). Docs: docs/observability.md, "Cost".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from observability.promql import check_group, group_by, selector
from observability.queries import JOB_DCGM, TRANSCRIBE_ROUTES, Query, RecordingRule
from observability.scrape_config import CAPACITY_METRIC_LABEL
from settings import DeploymentConfig
from settings.fleet import spot_group_name, spot_groups, spot_instance_types

COST_WINDOW = "1h"
"""Window of the audio rate the cost divides by: long enough that a quiet minute does not read as an
infinite price, short enough to follow a day's load."""

UNIT_USD = "currencyUSD"
"""Grafana unit id of US dollars."""


@dataclass(frozen=True)
class CostGroup:
    """What the cost expressions need of one GPU group.

    Attributes:
        name: GPU group name (``gpu_group`` label).
        usd_per_hour: price of one instance-hour (``settings.prices``).
        slots_per_instance: concurrent requests one instance is sized for (pods per node × capacity).
    """

    name: str
    usd_per_hour: float
    slots_per_instance: int
    instance_type: str | None = None
    """Set for each listed type of a group with a priority list (priced and selected per type); ``None``: the
    group's one type."""
    spot: bool | None = None
    """For a group with a Spot instance group: ``True`` its Spot nodes (``capacity="spot"``, the Spot price),
    ``False`` its On-Demand nodes; ``None``: a group without one (every node)."""

    def __post_init__(self) -> None:
        check_group(self.name)
        if not self.usd_per_hour > 0 or self.slots_per_instance < 1:
            raise ValueError(f"GPU group {self.name}: price and slots must be positive, got {self}")


def cost_groups(config: DeploymentConfig) -> tuple[CostGroup, ...]:
    """The priced GPU groups of ``config`` (groups whose instance type has no price are left out).

    A group with a priority list gives one entry per priced listed type, selected by ``instance_type``
    (its exporter pods carry it, ``k8s_charts.gpu_metrics``), so each node is billed at its own type's price.
    """
    groups = []
    with_spot = {g.name for g in spot_groups(config)}
    for group in config.gpu_groups:
        slots = group.pods_per_node * group.effective_capacity
        spot_group = group.name in with_spot
        for instance_type in group.instance_types:
            price = config.pricing.price_of(instance_type)
            if price is not None:
                typed = instance_type if group.flexible else None
                groups.append(CostGroup(group.name, price.hourly, slots, typed, False if spot_group else None))
        for instance_type in spot_instance_types(group) if spot_group else []:
            spot_price = config.pricing.spot_price_of(instance_type)
            if spot_price is not None:
                typed = instance_type if group.flexible else None
                groups.append(CostGroup(group.name, spot_price.hourly, slots, typed, True))
    return tuple(groups)


def unpriced_groups(config: DeploymentConfig) -> list[str]:
    """The groups of ``config`` (``<group>/<type>`` for a listed type) left out of the cost expressions (no price)."""
    unpriced = [
        g.name if not g.flexible else f"{g.name}/{t}"
        for g in config.gpu_groups
        for t in g.instance_types
        if config.pricing.price_of(t) is None
    ]
    return unpriced + [
        spot_group_name(g)
        for g in spot_groups(config)
        for t in spot_instance_types(g)
        if not config.pricing.spot_price_of(t)
    ]


_NODES = selector(job=JOB_DCGM)
_AUDIO = f"whisper_gateway_audio_seconds_total{selector(route='~' + '|'.join(TRANSCRIBE_ROUTES))}"

BILLED_INSTANCES = Query(
    "billed_instances",
    f"count by ({group_by()}) (up{_NODES})",
    "short",
    "Billed instances per GPU group: nodes with a running DCGM exporter pod, serving or not.",
)
AUDIO_HOURS_PER_HOUR = Query(
    "audio_hours_per_hour",
    f"sum by ({group_by()}) (rate({_AUDIO}[{COST_WINDOW}]))",
    "short",
    f"Audio seconds transcribed per second over {COST_WINDOW} (= audio hours per hour).",
)


def _per_group(groups: Sequence[CostGroup], template: str) -> str:
    """``template`` formatted per group (``{n}``: its billed instances, ``{g}``: the group), or-joined.

    With Spot entries their counts keep ``capacity`` (so ``or`` keeps both of a group) and a ``sum by`` adds them up.
    """
    joined = " or ".join(f"({template.format(n=_instances(g), g=g)})" for g in groups)
    return f"sum by ({group_by()}) ({joined})" if any(g.spot for g in groups) else joined


def _node_selector(group: CostGroup) -> str:
    matchers = {"job": JOB_DCGM, "gpu_group": group.name}
    if group.instance_type is not None:
        matchers["instance_type"] = group.instance_type
    if group.spot is not None:  # an absent label matches "" (Prometheus docs, "Instant vector selectors")
        matchers[CAPACITY_METRIC_LABEL] = "spot" if group.spot else ""
    return selector(**matchers)


def _instances(group: CostGroup) -> str:
    by = group_by(CAPACITY_METRIC_LABEL) if group.spot else group_by()
    return f"count by ({by}) (up{_node_selector(group)})"


def _require(groups: Sequence[CostGroup]) -> Sequence[CostGroup]:
    if not groups:
        raise ValueError("no priced GPU group: set pricing.instances for the fleet's instance types")
    return groups


def hourly_cost_expr(groups: Sequence[CostGroup]) -> str:
    """USD per hour of each priced group: billed instances × its price (a constant per group)."""
    return _per_group(_require(groups), "{n} * {g.usd_per_hour!r}")


def _slots_expr(groups: Sequence[CostGroup]) -> str:
    return _per_group(groups, "{n} * {g.slots_per_instance}")


def utilization_expr(groups: Sequence[CostGroup]) -> str:
    """In-flight ÷ billed slots per group, capped at 1; 0 where billed instances run no serving pod."""
    slots = _slots_expr(_require(groups))
    inflight = f"sum by ({group_by()}) (whisper_gateway_inflight_requests)"
    return f"clamp_max({inflight} / ({slots}), 1) or (({slots}) * 0)"


@dataclass(frozen=True)
class CostQueries:
    """The cost expressions of one fleet (:func:`cost_queries`); each a :class:`Query`."""

    billed_instances: Query
    hourly_cost: Query
    audio_hours_per_hour: Query
    cost_per_audio_hour: Query
    fleet_hourly_cost: Query
    fleet_cost_per_audio_hour: Query
    utilization: Query
    idle_cost: Query
    fleet_idle_cost: Query

    def all(self) -> tuple[Query, ...]:
        """Every query, in field order."""
        return tuple(getattr(self, name) for name in self.__dataclass_fields__)


def cost_queries(groups: Sequence[CostGroup]) -> CostQueries:
    """The cost expressions for the priced ``groups`` (:func:`cost_groups`).

    Raises:
        ValueError: ``groups`` is empty, or a group name is not a lowercase DNS label.

    * **Billed instances** come from a node-level series: the ``up`` series of the ``dcgm-exporter``
      scrape job, one target per node of the group (``k8s_charts/gpu_metrics.py`` runs the exporter as a
      DaemonSet per group, pinned to the group's nodes whatever their health, tolerating HyperPod's
      unhealthy-node taint). ``up`` exists while the exporter pod runs, also when its scrape fails
      (``up == 0``), and whether or not a serving pod runs on the node — HyperPod bills instances that
      serve nothing. Never from Triton or gateway pods. Not counted: a node whose exporter pod is not
      Running (just joined, image pull failing); see docs/observability.md, "Cost".
    * **Audio seconds** are the gateway's ``whisper_gateway_audio_seconds_total`` (docs/contracts.md §7,
      successful transcriptions only), relabelled with the pod's GPU group.
    * **Prices** are constants rendered at synthesis from ``settings.prices`` (``pricing.instances`` over
      the sourced defaults); a group without a price is left out of every cost expression.
    * **Utilisation** = in-flight requests ÷ the capacity of every billed slot (instances × pods per node ×
      ``GpuGroup.effective_capacity``), capped at 1, 0 on billed instances without a serving pod; **idle
      cost** = hourly cost × (1 − utilisation).
    """
    hourly = hourly_cost_expr(groups)
    audio = AUDIO_HOURS_PER_HOUR.expr
    utilization = utilization_expr(groups)
    return CostQueries(
        billed_instances=BILLED_INSTANCES,
        hourly_cost=Query("hourly_cost", hourly, UNIT_USD, "USD per hour: billed instances × price per instance-hour."),
        audio_hours_per_hour=AUDIO_HOURS_PER_HOUR,
        cost_per_audio_hour=Query(
            "cost_per_audio_hour",
            f"({hourly}) / ({audio} > 0)",
            UNIT_USD,
            f"USD per audio hour: hourly cost ÷ audio hours transcribed per hour ({COST_WINDOW}); none without traffic.",
        ),
        fleet_hourly_cost=Query(
            "fleet_hourly_cost", f"sum({hourly})", UNIT_USD, "USD per hour, every priced group.", ()
        ),
        fleet_cost_per_audio_hour=Query(
            "fleet_cost_per_audio_hour",
            f"sum({hourly}) / (sum({audio}) > 0)",
            UNIT_USD,
            "USD per audio hour of the whole fleet, idle instances included.",
            (),
        ),
        utilization=Query(
            "billed_utilization",
            utilization,
            "percentunit",
            "In-flight requests ÷ capacity of every billed instance (pods per node × capacity), at most 1.",
        ),
        idle_cost=Query(
            "idle_cost", f"({hourly}) * (1 - ({utilization}))", UNIT_USD, "USD per hour paid for unused capacity."
        ),
        fleet_idle_cost=Query(
            "fleet_idle_cost", f"sum(({hourly}) * (1 - ({utilization})))", UNIT_USD, "Fleet USD per hour idle.", ()
        ),
    )


RECORD_NAMES = {
    "billed_instances": "whisper:billed_instances:count",
    "hourly_cost": "whisper:instance_cost_usd_per_hour:sum",
    "audio_hours_per_hour": "whisper:gateway_audio_seconds:rate1h",
    "cost_per_audio_hour": "whisper:cost_usd_per_audio_hour:ratio1h",
    "fleet_hourly_cost": "whisper:fleet_cost_usd_per_hour:sum",
    "fleet_cost_per_audio_hour": "whisper:fleet_cost_usd_per_audio_hour:ratio1h",
    "utilization": "whisper:billed_capacity_utilization:ratio",
    "idle_cost": "whisper:idle_cost_usd_per_hour:sum",
    "fleet_idle_cost": "whisper:fleet_idle_cost_usd_per_hour:sum",
}
"""Recording rule per :class:`CostQueries` field (Prometheus ``level:metric:operations`` names)."""


def recording_rules(groups: Sequence[CostGroup]) -> tuple[RecordingRule, ...]:
    """The AMP recording rules of the cost row; empty when no group is priced."""
    if not groups:
        return ()
    queries = cost_queries(groups)
    return tuple(RecordingRule(RECORD_NAMES[name], getattr(queries, name)) for name in RECORD_NAMES)


__all__ = [
    "AUDIO_HOURS_PER_HOUR",
    "BILLED_INSTANCES",
    "COST_WINDOW",
    "RECORD_NAMES",
    "UNIT_USD",
    "CostGroup",
    "CostQueries",
    "cost_groups",
    "cost_queries",
    "recording_rules",
    "unpriced_groups",
]
