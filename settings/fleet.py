"""The instance groups a config asks HyperPod for: its GPU groups, plus a Spot group per bulk group.

``capacity.bulk_spot`` adds ``<group>-spot`` (``CapacityRequirements: {Spot: {}}``) for every GPU group
that runs bulk workers. Shared by the cluster stack, the NodePools and the request checks.
docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

from settings.bulk import worker_groups
from settings.capacity import SPOT_SUFFIX
from settings.schema import DeploymentConfig, GpuGroup


def spot_group_name(group: GpuGroup) -> str:
    """The Spot instance group of ``group`` for bulk workers, e.g. ``g5-spot``."""
    return group.name + SPOT_SUFFIX


def spot_instance_types(group: GpuGroup) -> list[str]:
    """The types of ``group``'s Spot instance group: its first listed type only.

    Spot and flexible together is undocumented (docs/deploy.md "When a GPU type runs out").
    """
    return [group.instance_type]


def spot_groups(config: DeploymentConfig) -> list[GpuGroup]:
    """GPU groups that get a Spot instance group (``capacity.bulk_spot``: the bulk groups), in config order."""
    if not (config.capacity.bulk_spot and config.bulk.enabled):
        return []
    return worker_groups(config.bulk, config.gpu_groups)


def needs_continuous(config: DeploymentConfig) -> bool:
    """``NodeProvisioningMode: Continuous``: required by Karpenter, by flexible groups and by Spot groups."""
    return config.cluster.node_autoscaling or any(g.flexible for g in config.gpu_groups) or bool(spot_groups(config))
