"""``make sizing`` for a bulk backlog: a priority list per bulk group and its Spot share.

Priority list: the sizes of the group's GPU (same GPU model, memory and count per node, offered by HyperPod in
the region), cheapest per audio hour first; every entry carries the same GPU, so the same audio rate per instance,
and the order is the price order. Spot share: :func:`whisper_build.workstation.sizing.spot_share` at the Spot
price of ``settings.prices`` (a sourced proxy or the ``pricing.spot_discount`` assumption). docs/cost.md, "Sizing".
"""

from __future__ import annotations

import math

from settings import DeploymentConfig, capacity, gpu_catalog
from settings.bulk import worker_groups
from settings.schema import GpuGroup
from whisper_build.workstation import sizing

DEFAULT_SPOT_AVAILABILITY = 0.5
"""Share of its hours a Spot instance is assumed to run when ``--spot-availability`` is not given: an
assumption, not a measurement (AWS publishes interruption frequencies per EC2 type, not for HyperPod)."""


def same_gpu_types(config: DeploymentConfig, group: GpuGroup) -> list[str]:
    """Every HyperPod size of ``group``'s family with its GPU count, offered in the region (listed ones first)."""
    family, _ = gpu_catalog.split_instance_type(group.instance_type)
    gpus = gpu_catalog.instance_spec_for(group.instance_type)
    sizes = [
        f"ml.{family}.{size}"
        for size, spec in gpu_catalog.INSTANCE_SIZES.get(family, {}).items()
        if gpus is not None and spec.gpus == gpus.gpus
    ]
    known = gpu_catalog.hyperpod_instance_types()
    offered = [t for t in sizes if t in known and not capacity.not_offered(config.region, [t])]
    return list(dict.fromkeys([*group.instance_types, *offered]))


def priority_list(config: DeploymentConfig, group: GpuGroup) -> tuple[dict[str, float], list[str]]:
    """``(priced, unpriced)``: the same-GPU types with a price → USD per hour, cheapest first; those without one.

    The unpriced cannot be ranked; no price is invented for them.
    """
    types = same_gpu_types(config, group)
    hourly = {t: price.hourly for t in types if (price := config.pricing.price_of(t)) is not None}
    return dict(sorted(hourly.items(), key=lambda item: item[1])), [t for t in types if t not in hourly]


def bulk_lines(
    config: DeploymentConfig, target: sizing.BulkDeadline, plans: list[sizing.Plan], availability: float
) -> list[str]:
    """Per bulk group: its proposed priority list, then its Spot share (or why there is none)."""
    if not config.bulk.enabled:
        return []
    by_group = {p.offer.group: p for p in plans}
    lines = []
    for group in worker_groups(config.bulk, config.gpu_groups):
        priced, unpriced = priority_list(config, group)
        ranked = ", ".join(f"{t} ({usd:g} USD/h)" for t, usd in priced.items())
        rest = f"; no price, so not ranked: {', '.join(unpriced)}" if unpriced else ""
        lines.append(
            f"bulk {group.name}: priority list {ranked or 'none priced'}{rest} (cheapest per audio hour first: "
            f"every entry has the same {group.gpu.name}, so the same rate per instance)"
        )
        plan = by_group.get(group.name)
        first = next(iter(priced), None)
        on_demand = config.pricing.price_of(first) if first else None
        spot = config.pricing.spot_price_of(first) if first else None
        if plan is None or plan.figure is None or on_demand is None or spot is None:
            why = (
                "no Spot price (pricing.spot_instances or pricing.spot_discount)"
                if spot is None
                else "no rate or price"
            )
            lines.append(f"bulk {group.name}: Spot share: none ({why})")
            continue
        max_instances = math.ceil(config.bulk.max_replicas / group.pods_per_node)
        share = sizing.spot_share(
            plan.per_instance,
            target,
            on_demand_usd=on_demand.hourly,
            spot_usd=spot.hourly,
            availability=availability,
            max_instances=max_instances,
        )
        spot_label = (
            "an ASSUMPTION (pricing.spot_discount)"
            if spot.source.startswith("ASSUMPTION")
            else f"{spot.basis}: {spot.source}, {spot.as_of}"
        )
        criterion = (
            f"the cheapest mix of {first} that finishes by the deadline if Spot runs {availability:.0%} of its hours "
            f"(an assumption: --spot-availability); Spot at {spot.hourly:g} USD/h, {spot_label}"
        )
        if share is None:
            need = math.ceil(sizing.demand(target) / plan.per_instance) * group.pods_per_node
            lines.append(
                f"bulk {group.name}: cannot finish by the deadline within bulk.max_replicas {config.bulk.max_replicas}; "
                f"raise it to at least {need} (all On-Demand)"
            )
            continue
        off = "" if config.capacity.bulk_spot else "; set capacity.bulk_spot: true to use Spot"
        lines.append(
            f"bulk {group.name}: Spot share {share.spot} Spot + {share.on_demand} On-Demand instances = "
            f"{share.cost_usd:,.0f} USD for the job, Spot counted on for {share.spot_audio_share:.0%} of the audio; "
            f"criterion: {criterion}{off}"
        )
    return lines
