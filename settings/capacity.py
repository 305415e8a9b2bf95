"""Priority lists of instance types per GPU group, Spot for bulk work and the cluster limits they meet.

A group's ``instance_types`` is an ordered list (HyperPod "flexible instance group": the first type is
tried first, then the next when capacity is short). Every entry must carry the same GPU model, GPU
memory and GPU count per node, because the group's engine, storage prefix, node labels, MIG layout,
throughput and pod count are per group. Limits (SageMaker API ``ClusterInstanceTypes`` 1–20, at most
20 instance groups per cluster; HyperPod autoscaling docs: at most 10 groups per ``HyperpodNodeClass``)
and the regional offerings of cfn-lint's ``AWS::SageMaker::Cluster`` data (the list its E3644 rule
applies to ``InstanceType`` only) are checked here. docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from settings import gpu_catalog

MAX_INSTANCE_TYPES = 20
"""``ClusterInstanceTypes``: 1–20 entries (botocore SageMaker model; create-cluster developer guide)."""
MAX_INSTANCE_GROUPS = 20
"""Instance groups per HyperPod cluster (create-cluster developer guide)."""
MAX_GROUPS_PER_NODE_CLASS = 10
"""``HyperpodNodeClass.spec.instanceGroups``: at most 10 (HyperPod autoscaling docs, "NodeClass")."""
SPOT_SUFFIX = "-spot"
"""A GPU group's Spot instance group for bulk work is ``<group>-spot``."""


class CapacitySettings(BaseModel):
    """The ``capacity:`` section: how the fleet meets GPU shortages (docs/deploy.md "When a GPU type runs out")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    group_priority: list[str] | None = Field(
        None,
        min_length=1,
        description="GPU group names, most preferred first: NodePool weights (100, 90, …) and the ranks of "
        "pod-deletion-cost. Only pods that may run on several groups (bulk workers) choose between groups.",
    )
    bulk_spot: bool = Field(
        False,
        description="Bulk workers run on a Spot instance group per bulk GPU group (`<group>-spot`), "
        "On-Demand after it; needs bulk.enabled and cluster.node_autoscaling.",
    )


def check_instance_types(types: Sequence[str]) -> list[str]:
    """Refuse a priority list that cannot be one instance group; return it unchanged.

    Args:
        types: ``ml.*`` instance types, most preferred first; each already known to the catalog.

    Raises:
        ValueError: outside 1–20 entries, a duplicate, or entries that differ in GPU model, GPU memory or
            GPUs per node (one sentence naming the first differing entry and what to do).
    """
    if not 1 <= len(types) <= MAX_INSTANCE_TYPES:
        raise ValueError(f"lists {len(types)} types; HyperPod takes 1–{MAX_INSTANCE_TYPES} per instance group")
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ValueError(f"lists {', '.join(duplicates)} more than once; remove the duplicate (HyperPod refuses it)")
    first = types[0]
    first_gpu, first_spec = gpu_catalog.gpu_for(first), gpu_catalog.instance_spec_for(first)
    for other in types[1:]:
        gpu, spec = gpu_catalog.gpu_for(other), gpu_catalog.instance_spec_for(other)
        if first_gpu is None or first_spec is None or gpu is None or spec is None:
            continue  # an unknown type is reported by the group's own check
        if (gpu.name, gpu.memory_gib, spec.gpus) != (first_gpu.name, first_gpu.memory_gib, first_spec.gpus):
            raise ValueError(
                f"{other} ({spec.gpus} × {gpu.name} {gpu.memory_gib} GiB) differs from {first} ({first_spec.gpus} × "
                f"{first_gpu.name} {first_gpu.memory_gib} GiB): one group shares one engine, storage prefix and pod "
                "count, so every listed type needs the same GPU model, GPU memory and GPUs per node; put the "
                "other GPU in its own gpu_groups entry"
            )
    return list(types)


def smallest(types: Sequence[str]) -> str:
    """The listed type with the fewest vCPUs, then the least memory (pods are sized to fit it)."""

    def size(instance_type: str) -> tuple[int, int]:
        spec = gpu_catalog.instance_spec_for(instance_type)
        assert spec is not None, f"{instance_type} is validated to be in the catalog"
        return spec.vcpus, spec.memory_gib

    return min(types, key=size)


@functools.lru_cache(maxsize=1)
def _regional_offerings() -> dict[str, frozenset[str]]:
    """cfn-lint's per-region ``AWS::SageMaker::Cluster`` instance types (from the AWS pricing API)."""
    data = resources.files("cfnlint.data.schemas.extensions.aws_sagemaker_cluster").joinpath("instancetype_enum.json")
    return {
        region: frozenset(entry["enum"])
        for region, entry in json.loads(data.read_text()).items()
        if isinstance(entry, dict) and "enum" in entry
    }


def not_offered(region: str, types: Sequence[str]) -> list[str]:
    """The entries of ``types`` that cfn-lint's regional data says HyperPod does not offer in ``region``.

    An empty list when the region is not in the data (nothing to check against).
    """
    offered = _regional_offerings().get(region)
    return [] if offered is None else [t for t in types if t not in offered]


SPOT_POOL_WEIGHT = 100
"""NodePool ``weight`` of a Spot-first bulk pool: above every serving pool, so a bulk pod that fits both goes there."""
SPOT_MAX_DRAIN_SECONDS = 60
"""Longest ``bulk.drain_seconds`` on Spot: the worker's grace is the drain + 30 s of stops (``k8s_charts.bulk``),
so at most 90 s, well inside the two-minute interruption notice (which is best-effort)."""


def weights(priority: Sequence[str]) -> dict[str, int]:
    """NodePool ``weight`` per group name by rank: 90, 80, …, at least 1 (Karpenter: 1–100, higher first).

    Below :data:`SPOT_POOL_WEIGHT`. A group not in ``priority`` gets no weight (Karpenter's default, 0).
    """
    return {name: max(1, 90 - 10 * rank) for rank, name in enumerate(priority)}


def config_problems(
    *,
    region: str,
    groups: Sequence[tuple[str, Sequence[str], int | None]],
    capacity: CapacitySettings,
    bulk_groups: Sequence[str] | None,
    node_autoscaling: bool,
    bulk_drain_seconds: int = SPOT_MAX_DRAIN_SECONDS,
) -> list[str]:
    """Every capacity rule a whole config breaks, each ``<field>: <what and the fix>``; empty when none.

    Args:
        region: The config's region.
        groups: Per GPU group, in config order: ``(name, instance_types, min_instance_count)``.
        capacity: The ``capacity:`` section.
        bulk_groups: GPU groups that run bulk workers, or ``None`` when bulk is off.
        node_autoscaling: ``cluster.node_autoscaling``.
        bulk_drain_seconds: ``bulk.drain_seconds``.
    """
    problems = []
    names = [name for name, _, _ in groups]
    for index, (_, types, min_count) in enumerate(groups):
        if len(types) > 1 and (missing := not_offered(region, types)):
            problems.append(
                f"gpu_groups.{index}.instance_types: {', '.join(missing)} not offered by HyperPod in {region} "
                "(cfn-lint's AWS::SageMaker::Cluster regional data, from the AWS pricing API); remove it from the "
                "list or choose another region"
            )
        if node_autoscaling and min_count:
            problems.append(
                f"gpu_groups.{index}.min_instance_count: Karpenter-managed groups start at 0 instances "
                "(cluster.node_autoscaling: true); remove min_instance_count or set it to 0"
            )
    spot_groups = list(bulk_groups or []) if capacity.bulk_spot else []
    if capacity.bulk_spot and (bulk_groups is None or not node_autoscaling):
        problems.append(
            "capacity.bulk_spot: Spot instance groups serve bulk workers through Karpenter; set bulk.enabled: true "
            "and cluster.node_autoscaling: true, or remove capacity.bulk_spot"
        )
    if capacity.bulk_spot and bulk_drain_seconds > SPOT_MAX_DRAIN_SECONDS:
        problems.append(
            f"bulk.drain_seconds: {bulk_drain_seconds} s plus 30 s of stops does not fit well inside a Spot node's "
            f"two-minute notice; set it to at most {SPOT_MAX_DRAIN_SECONDS} with capacity.bulk_spot"
        )
    if len(groups) + len(spot_groups) > MAX_INSTANCE_GROUPS:
        problems.append(
            f"gpu_groups: {len(groups)} groups + {len(spot_groups)} Spot groups exceed the {MAX_INSTANCE_GROUPS} "
            "instance groups of one HyperPod cluster; merge groups of one GPU model into a priority list "
            "(instance_types) or turn off capacity.bulk_spot"
        )
    priority = capacity.group_priority or []
    unknown = [name for name in priority if name not in names]
    if unknown:
        problems.append(
            f"capacity.group_priority: {', '.join(unknown)} not a GPU group name (groups: {', '.join(names)})"
        )
    if len(set(priority)) != len(priority):
        problems.append("capacity.group_priority: a group is listed twice; list each group once")
    return problems
