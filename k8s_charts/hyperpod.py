"""Typed construct for SageMaker HyperPod's ``HyperpodNodeClass`` (no public CRD to import).

Fields from the SageMaker HyperPod documentation, "Create a NodeClass"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-autoscaling-nodeclass.html):
``apiVersion: karpenter.sagemaker.amazonaws.com/v1``, ``kind: HyperpodNodeClass``, cluster-scoped,
``spec.instanceGroups`` lists 1 to 10 pre-existing HyperPod instance group names (whose subnets are
in one Availability Zone, without deep health checks, on-demand). Status (set by HyperPod):
conditions ``InstanceGroupReady``, ``SubnetsReady``, ``Ready``. The tests validate synthesized
objects against ``tests/data/crds/karpenter.sagemaker.amazonaws.com_hyperpodnodeclasses.yaml``,
a schema written from the same page.
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cdk8s import ApiObject, ApiObjectMetadata, JsonPatch
from constructs import Construct

from settings.schema import HYPERPOD_NAME_PATTERN

API_VERSION = "karpenter.sagemaker.amazonaws.com/v1"
KIND = "HyperpodNodeClass"
GROUP = "karpenter.sagemaker.amazonaws.com"
MAX_INSTANCE_GROUPS = 10
"""HyperPod docs: "You can specify up to 10 instance groups in a NodeClass"."""


class HyperpodNodeClass(ApiObject):
    """A ``HyperpodNodeClass`` mapping Karpenter provisioning onto HyperPod instance groups.

    Args:
        name: Object name (cluster-scoped), referenced by a NodePool's ``nodeClassRef``.
        instance_groups: HyperPod instance group names, 1 to 10, each matching HyperPod's
            ``InstanceGroupName`` pattern.
        labels: Object labels.

    Raises:
        ValueError: no or more than 10 instance groups, a duplicate, or a name HyperPod would reject.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        name: str,
        instance_groups: Sequence[str],
        labels: dict[str, str] | None = None,
    ) -> None:
        groups = list(instance_groups)
        if not 1 <= len(groups) <= MAX_INSTANCE_GROUPS:
            raise ValueError(
                f"HyperpodNodeClass '{name}' needs 1 to {MAX_INSTANCE_GROUPS} instance groups, got {len(groups)}"
            )
        if len(set(groups)) != len(groups):
            raise ValueError(f"HyperpodNodeClass '{name}' lists an instance group twice: {groups}")
        for group in groups:
            if not re.match(HYPERPOD_NAME_PATTERN, group) or len(group) > 63:
                raise ValueError(
                    f"HyperpodNodeClass '{name}': '{group}' is not a HyperPod instance group name "
                    f"({HYPERPOD_NAME_PATTERN}, at most 63 characters)"
                )
        super().__init__(
            scope,
            id,
            api_version=API_VERSION,
            kind=KIND,
            metadata=ApiObjectMetadata(name=name, labels=labels),
        )
        self.instance_groups = tuple(groups)
        self.add_json_patch(JsonPatch.add("/spec", {"instanceGroups": groups}))
