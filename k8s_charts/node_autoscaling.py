"""Node autoscaling (``cluster.node_autoscaling``): HyperPod-managed Karpenter, per GPU group.

HyperPod runs Karpenter itself once the cluster has ``AutoScaling: {Mode: Enable,
AutoScalerType: Karpenter}`` and a cluster role (foundation stack). Here, per GPU group: a
``HyperpodNodeClass`` naming the group's instance group and a ``karpenter.sh/v1`` NodePool that
provisions only that instance type (HyperPod docs, "Create a NodePool": the supported requirement
keys are ``node.kubernetes.io/instance-type``, ``topology.kubernetes.io/zone`` and
``kubernetes.io/arch``).

The NodePool template carries the labels and the GPU taint the instance group puts on its nodes,
so that Karpenter's scheduling simulation sees what the real node will have: a serving pod
requires the group label and HyperPod's ``node-health-status=Schedulable``, which Karpenter
would otherwise treat as undefined on the new node and never provision for.
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from constructs import Construct

from k8s_charts import naming, placement
from k8s_charts.hyperpod import GROUP as NODECLASS_GROUP
from k8s_charts.hyperpod import KIND as NODECLASS_KIND
from k8s_charts.hyperpod import HyperpodNodeClass
from k8s_charts.imports.sh import karpenter
from settings import capacity, labels
from settings.fleet import spot_group_name, spot_groups
from settings.schema import DeploymentConfig, GpuGroup

CONSOLIDATE_AFTER = "10m"
"""A GPU node must stay empty this long before Karpenter removes it: engine loads take minutes, so
churning nodes on short dips costs more than it saves."""


def node_pool_name(group: GpuGroup) -> str:
    """NodeClass and NodePool name of a group, e.g. ``whisper-g5``."""
    return naming.workload_name(group)


def bulk_pool_name(group: GpuGroup) -> str:
    """NodeClass and NodePool name of a group's Spot-first bulk capacity, e.g. ``whisper-g5-bulk``."""
    return f"{naming.workload_name(group)}-bulk"


class GpuNodeAutoscaling(Construct):
    """One HyperpodNodeClass + NodePool per GPU group; with ``capacity.bulk_spot`` one more per bulk group.

    The bulk NodeClass lists the group's Spot instance group first and its On-Demand group after it (HyperPod's
    Spot page: Spot groups are preferred, the others are the fallback); its NodePool carries the Spot taint
    that only bulk workers tolerate and outranks the serving pools (weight 100).
    """

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig) -> None:
        super().__init__(scope, id)
        weights = capacity.weights(config.capacity.group_priority or [])
        for group in config.gpu_groups:
            name = node_pool_name(group)
            HyperpodNodeClass(
                self, f"{group.name}-class", name=name, instance_groups=[group.name], labels=naming.app_labels()
            )
            node_labels = {  # the instance type comes from the requirement below
                key: values[0]
                for key, values in placement.node_requirements(group).items()
                if key != labels.INSTANCE_TYPE_LABEL
            }
            self._pool(group, name, node_labels, weight=weights.get(group.name), spot=False)
        for group in spot_groups(config):
            name = bulk_pool_name(group)
            HyperpodNodeClass(
                self,
                f"{group.name}-bulk-class",
                name=name,
                instance_groups=[spot_group_name(group), group.name],
                labels=naming.app_labels(),
            )
            node_labels = {
                key: values[0]
                for key, values in placement.node_requirements(group).items()
                if key != labels.INSTANCE_TYPE_LABEL
            }
            self._pool(group, name, node_labels, weight=capacity.SPOT_POOL_WEIGHT, spot=True)

    def _pool(self, group: GpuGroup, name: str, node_labels: dict[str, str], *, weight: int | None, spot: bool) -> None:
        taints = [
            karpenter.NodePoolSpecTemplateSpecTaints(
                key=labels.GPU_TAINT_KEY,
                value=labels.GPU_TAINT_VALUE,
                effect=karpenter.NodePoolSpecTemplateSpecTaintsEffect.NO_SCHEDULE,
            )
        ]
        if spot:
            taints.append(
                karpenter.NodePoolSpecTemplateSpecTaints(
                    key=labels.SPOT_TAINT_KEY,
                    value=labels.SPOT_TAINT_VALUE,
                    effect=karpenter.NodePoolSpecTemplateSpecTaintsEffect.NO_SCHEDULE,
                )
            )
        karpenter.NodePool(
            self,
            f"{group.name}-{'bulk-' if spot else ''}pool",
            metadata={"name": name, "labels": naming.app_labels()},
            spec=karpenter.NodePoolSpec(
                weight=weight,
                template=karpenter.NodePoolSpecTemplate(
                    metadata=karpenter.NodePoolSpecTemplateMetadata(labels=node_labels),
                    spec=karpenter.NodePoolSpecTemplateSpec(
                        node_class_ref=karpenter.NodePoolSpecTemplateSpecNodeClassRef(
                            group=NODECLASS_GROUP, kind=NODECLASS_KIND, name=name
                        ),
                        requirements=[
                            karpenter.NodePoolSpecTemplateSpecRequirements(
                                key=labels.INSTANCE_TYPE_LABEL,
                                operator=karpenter.NodePoolSpecTemplateSpecRequirementsOperator.IN,
                                values=list(group.instance_types),
                            )
                        ],
                        taints=taints,
                        expire_after="Never",
                    ),
                ),
                disruption=karpenter.NodePoolSpecDisruption(
                    consolidation_policy=karpenter.NodePoolSpecDisruptionConsolidationPolicy.WHEN_EMPTY,
                    consolidate_after=CONSOLIDATE_AFTER,
                ),
            ),
        )
