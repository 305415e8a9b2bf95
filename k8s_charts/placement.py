"""Where a GPU group's pods may run: its HyperPod nodes, healthy, spread across zones and nodes.

Pinning uses the labels the foundation puts on each HyperPod instance group
(``KubernetesConfig.Labels``: ``settings.labels.GPU_GROUP_LABEL``) plus the instance type label
HyperPod sets itself, and HyperPod's node health label (``sagemaker.amazonaws.com/node-health-status``
= ``Schedulable``; SageMaker HyperPod EKS resiliency docs, "node labels"). GPU nodes carry the
``settings.labels.GPU_TAINT_KEY`` taint, tolerated here.
Docs: docs/kubernetes.md, "The Deployment of one GPU group".
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

from settings import labels
from settings.schema import GpuGroup

NODE_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
NODE_HEALTHY = "Schedulable"
DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"


PREFERRED_TYPE_WEIGHT = 50
"""Weight of the preference for a flexible group's first listed type (the deep-health preference is 100)."""


def _in(key: str, values: list[str]) -> k8s.NodeSelectorRequirement:
    return k8s.NodeSelectorRequirement(key=key, operator="In", values=values)


def group_node_labels(group: GpuGroup) -> dict[str, list[str]]:
    """Node labels that identify the nodes of ``group`` (label → accepted values), whatever their health.

    The instance type accepts every type of the group's priority list (``instance_types``).
    """
    return {labels.GPU_GROUP_LABEL: [group.name], labels.INSTANCE_TYPE_LABEL: list(group.instance_types)}


def node_requirements(group: GpuGroup) -> dict[str, list[str]]:
    """Node labels a serving pod of ``group`` requires (label → accepted values): its nodes, healthy."""
    return {**group_node_labels(group), NODE_HEALTH_LABEL: [NODE_HEALTHY]}


def _required(requirements: dict[str, list[str]]) -> k8s.NodeSelector:
    return k8s.NodeSelector(
        node_selector_terms=[
            k8s.NodeSelectorTerm(match_expressions=[_in(key, values) for key, values in requirements.items()])
        ]
    )


def group_affinity(
    group: GpuGroup, instance_types: list[str] | None = None, *, spot: bool | None = None
) -> k8s.Affinity:
    """Required node affinity: the group's nodes (of ``instance_types`` only, when given), healthy or not.

    For node agents such as the GPU metrics exporter, which must keep reporting on a node HyperPod marks
    unhealthy. ``spot``: ``True`` only the group's Spot nodes (``settings.labels.CAPACITY_LABEL`` = ``spot``),
    ``False`` only its On-Demand nodes (no such label), ``None`` both.
    """
    node_labels = group_node_labels(group)
    if instance_types is not None:
        node_labels[labels.INSTANCE_TYPE_LABEL] = instance_types
    required = _required(node_labels)
    if spot is not None:
        (term,) = required.node_selector_terms
        capacity = (
            _in(labels.CAPACITY_LABEL, [labels.SPOT_TAINT_VALUE])
            if spot
            else k8s.NodeSelectorRequirement(key=labels.CAPACITY_LABEL, operator="DoesNotExist")
        )
        required = k8s.NodeSelector(
            node_selector_terms=[k8s.NodeSelectorTerm(match_expressions=[*(term.match_expressions or []), capacity])]
        )
    return k8s.Affinity(node_affinity=k8s.NodeAffinity(required_during_scheduling_ignored_during_execution=required))


def affinity(group: GpuGroup) -> k8s.Affinity:
    """Required: the group's nodes, healthy. Preferred: deep health check passed, then the first listed type.

    The type preference (weight :data:`PREFERRED_TYPE_WEIGHT`) is added for a flexible group only.
    """
    preferred = [
        k8s.PreferredSchedulingTerm(
            weight=100,
            preference=k8s.NodeSelectorTerm(match_expressions=[_in(DEEP_HEALTH_LABEL, ["Passed"])]),
        )
    ]
    if group.flexible:
        preferred.append(
            k8s.PreferredSchedulingTerm(
                weight=PREFERRED_TYPE_WEIGHT,
                preference=k8s.NodeSelectorTerm(
                    match_expressions=[_in(labels.INSTANCE_TYPE_LABEL, [group.instance_types[0]])]
                ),
            )
        )
    return k8s.Affinity(
        node_affinity=k8s.NodeAffinity(
            required_during_scheduling_ignored_during_execution=_required(node_requirements(group)),
            preferred_during_scheduling_ignored_during_execution=preferred,
        )
    )


def spot_toleration() -> k8s.Toleration:
    """Tolerate the Spot taint (``settings.labels.SPOT_TAINT_KEY``): bulk workers only."""
    return k8s.Toleration(
        key=labels.SPOT_TAINT_KEY, operator="Equal", value=labels.SPOT_TAINT_VALUE, effect=labels.SPOT_TAINT_EFFECT
    )


def gpu_tolerations(*, unhealthy_nodes: bool = False, spot_nodes: bool = False) -> list[k8s.Toleration]:
    """Tolerate the ``nvidia.com/gpu`` taint of GPU nodes (any value).

    With ``unhealthy_nodes`` also HyperPod's ``NoSchedule`` taint on nodes whose health check failed
    (key :data:`NODE_HEALTH_LABEL`, any value), as the NVIDIA device plugin of the HyperPod Helm chart
    does (``helm_chart/HyperPodHelmChart/values.yaml``): for node agents, never for serving pods. With
    ``spot_nodes`` also the Spot taint (:func:`spot_toleration`): for bulk workers and node agents.
    """
    tolerations = [k8s.Toleration(key=labels.GPU_TAINT_KEY, operator="Exists", effect=labels.GPU_TAINT_EFFECT)]
    if unhealthy_nodes:
        tolerations.append(k8s.Toleration(key=NODE_HEALTH_LABEL, operator="Exists", effect="NoSchedule"))
    if spot_nodes:
        tolerations.append(spot_toleration())
    return tolerations


def topology_spread(pod_labels: dict[str, str]) -> list[k8s.TopologySpreadConstraint]:
    """Spread one group's pods over zones, then nodes; soft, so a one-zone instance group still schedules."""
    return [
        k8s.TopologySpreadConstraint(
            max_skew=1,
            topology_key=key,
            when_unsatisfiable="ScheduleAnyway",
            label_selector=k8s.LabelSelector(match_labels=pod_labels),
            match_label_keys=["pod-template-hash"],
        )
        for key in (ZONE_LABEL, HOSTNAME_LABEL)
    ]
