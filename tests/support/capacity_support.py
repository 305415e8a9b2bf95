"""Configs with priority lists and a Spot bulk group, and the HyperPod cluster of one synthesized alone."""

from __future__ import annotations

import copy
import os
from typing import Any

import yaml

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App, Stack  # noqa: E402
from aws_cdk import aws_ec2 as ec2  # noqa: E402
from aws_cdk import aws_s3 as s3  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402
from cdk_assembly import REPO_ROOT  # noqa: E402

from settings import DeploymentConfig, parse_config  # noqa: E402
from stacks.hyperpod import HyperPodCluster  # noqa: E402

G5_LIST = ["ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge"]


def default_data() -> dict[str, Any]:
    return yaml.safe_load((REPO_ROOT / "config" / "default.yaml").read_text())


def with_groups(data: dict[str, Any], **first_group: Any) -> dict[str, Any]:
    """``data`` with the first GPU group's keys replaced (``instance_type`` dropped when ``instance_types`` is given)."""
    data = copy.deepcopy(data)
    group = data["gpu_groups"][0]
    if "instance_types" in first_group:
        group.pop("instance_type", None)
    group.update(first_group)
    return data


def config(data: dict[str, Any]) -> DeploymentConfig:
    return parse_config(data, "test")


def spot_data() -> dict[str, Any]:
    """Priority list on g5, Karpenter, bulk on g5 with Spot."""
    data = with_groups(default_data(), instance_types=G5_LIST)
    data["cluster"]["node_autoscaling"] = True
    data["bulk"] = {"enabled": True, "gpu_groups": ["g5"], "drain_seconds": 45}
    data["capacity"] = {"bulk_spot": True, "group_priority": ["g5", "g6e"]}
    return data


def cluster_properties(cfg: DeploymentConfig) -> dict[str, Any]:
    """``Properties`` of the ``AWS::SageMaker::Cluster`` the construct synthesizes for ``cfg`` (a stack of its own)."""
    stack = Stack(App(), "T")
    vpc = ec2.Vpc(stack, "Vpc", max_azs=2, nat_gateways=0)
    HyperPodCluster(
        stack,
        "HyperPod",
        config=cfg,
        eks_cluster_arn="arn:aws:eks:us-east-1:123456789012:cluster/test",
        subnets=vpc.isolated_subnets or vpc.private_subnets or vpc.public_subnets,
        security_group=ec2.SecurityGroup(stack, "Sg", vpc=vpc),
        lifecycle_bucket=s3.Bucket(stack, "Bucket"),
    )
    (resource,) = Template.from_stack(stack).find_resources("AWS::SageMaker::Cluster").values()
    return resource["Properties"]


def gpu_nodes(properties: dict[str, Any]) -> list[tuple[str, dict[str, str], list[dict[str, str]]]]:
    """One node per instance group and type of a synthesized cluster: ``(name, labels, taints)``.

    Labels are the group's ``KubernetesConfig.Labels`` plus what HyperPod sets itself (the instance type,
    a healthy node); taints its ``KubernetesConfig.Taints`` (``Key``/``Value``/``Effect``).
    """
    nodes = []
    for group in properties["InstanceGroups"]:
        types = (group.get("InstanceRequirements") or {}).get("InstanceTypes") or [group["InstanceType"]]
        for instance_type in types:
            node_labels = {
                **group["KubernetesConfig"]["Labels"],
                "node.kubernetes.io/instance-type": instance_type,
                "sagemaker.amazonaws.com/node-health-status": "Schedulable",
            }
            nodes.append(
                (f"{group['InstanceGroupName']}/{instance_type}", node_labels, group["KubernetesConfig"]["Taints"])
            )
    return nodes


def _matches(expression: dict[str, Any], node_labels: dict[str, str]) -> bool:
    key, op = expression["key"], expression["operator"]
    if op == "In":
        return node_labels.get(key) in expression["values"]
    if op == "NotIn":
        return node_labels.get(key) not in expression["values"]
    if op == "Exists":
        return key in node_labels
    if op == "DoesNotExist":
        return key not in node_labels
    raise AssertionError(f"operator {op} not modelled")


def schedulable(pod: dict[str, Any], node_labels: dict[str, str], taints: list[dict[str, str]]) -> bool:
    """Whether the kube-scheduler may place ``pod`` (a pod spec) on the node: required node affinity (any term
    whose expressions all match) and every ``NoSchedule``/``NoExecute`` taint tolerated (Kubernetes docs,
    "Assigning Pods to Nodes" and "Taints and Tolerations")."""
    required = pod.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not any(
        all(_matches(e, node_labels) for e in term.get("matchExpressions", []))
        for term in required["nodeSelectorTerms"]
    ):
        return False

    def tolerated(taint: dict[str, str]) -> bool:
        return any(
            t.get("key") in (None, taint["Key"])
            and t.get("effect") in (None, taint["Effect"])
            and (t.get("operator") == "Exists" or t.get("value") == taint["Value"])
            for t in pod.get("tolerations", [])
        )

    return all(tolerated(t) for t in taints if t["Effect"] in ("NoSchedule", "NoExecute"))
