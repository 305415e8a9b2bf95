"""config/examples/capacity.yaml through the full app synthesis (the shared cache of tests/support/cdk_assembly.py):
the flexible groups, Continuous mode, the Spot group, the bulk NodeClass's order and the NodePool weights."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_assembly import CONFIGS, Synthesized, synthesized

pytestmark = pytest.mark.slow

MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


@pytest.fixture(scope="module")
def result() -> Synthesized:
    synthesis = synthesized(CONFIGS["capacity"])
    assert synthesis.error is None and synthesis.stacks is not None, synthesis.error
    return synthesis


def _cluster(result: Synthesized) -> dict[str, Any]:
    assert result.stacks is not None
    template = result.template_json(result.stacks.cluster.artifact_id)
    (cluster,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::SageMaker::Cluster"]
    return cluster["Properties"]


def _manifests(result: Synthesized) -> list[dict[str, Any]]:
    """Every Kubernetes object the app applies (CloudFormation tokens inside a manifest become ``"TOKEN"``)."""
    objects = []
    for template in result.all_templates().values():
        for resource in template["Resources"].values():
            if resource["Type"] != MANIFEST:
                continue
            body = resource["Properties"]["Manifest"]
            if isinstance(body, dict):  # {"Fn::Join": ["", [parts…]]}
                body = "".join(part if isinstance(part, str) else "TOKEN" for part in body["Fn::Join"][1])
            objects += json.loads(body)
    return objects


def _by_name(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def test_both_groups_are_flexible_in_continuous_mode_with_a_spot_twin_for_bulk(result: Synthesized) -> None:
    cluster = _cluster(result)
    assert cluster["NodeProvisioningMode"] == "Continuous"
    groups = {g["InstanceGroupName"]: g for g in cluster["InstanceGroups"]}
    assert list(groups) == ["g5", "g6e", "g6e-spot"]
    assert groups["g5"]["InstanceRequirements"] == {
        "InstanceTypes": ["ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge"]
    }
    assert groups["g6e"]["InstanceRequirements"] == {"InstanceTypes": ["ml.g6e.2xlarge", "ml.g6e.4xlarge"]}
    assert not any("InstanceType" in groups[name] for name in ("g5", "g6e"))  # exclusive with the list
    spot = groups["g6e-spot"]
    assert spot["CapacityRequirements"] == {"Spot": {}} and spot["InstanceType"] == "ml.g6e.2xlarge"
    assert spot["InstanceCount"] == 0 and "InstanceRequirements" not in spot
    assert {"Key": "whisper-hyperpod.io/capacity", "Value": "spot", "Effect": "NoSchedule"} in spot["KubernetesConfig"][
        "Taints"
    ]
    assert all("CapacityRequirements" not in groups[name] for name in ("g5", "g6e"))  # serving: On-Demand


def test_the_bulk_node_class_lists_spot_first_and_the_pools_are_weighted_by_priority(result: Synthesized) -> None:
    manifests = _manifests(result)
    classes = _by_name(manifests, "HyperpodNodeClass")
    assert classes["whisper-g6e-bulk"]["spec"]["instanceGroups"] == ["g6e-spot", "g6e"]
    assert classes["whisper-g6e"]["spec"]["instanceGroups"] == ["g6e"]
    assert classes["whisper-g5"]["spec"]["instanceGroups"] == ["g5"]
    pools = {name: pool["spec"] for name, pool in _by_name(manifests, "NodePool").items()}
    # capacity.group_priority [g6e, g5]: 90, 80; the Spot-first bulk pool above both
    assert {name: spec.get("weight") for name, spec in pools.items()} == {
        "whisper-g5": 80,
        "whisper-g6e": 90,
        "whisper-g6e-bulk": 100,
    }
    requirements = {r["key"]: r["values"] for r in pools["whisper-g5"]["template"]["spec"]["requirements"]}
    assert requirements["node.kubernetes.io/instance-type"] == ["ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge"]
    spot_exporter = _by_name(manifests, "DaemonSet")["dcgm-exporter-g6e-g6e-2xlarge-spot"]
    assert {"key": "whisper-hyperpod.io/capacity", "operator": "Equal", "value": "spot", "effect": "NoSchedule"} in (
        spot_exporter["spec"]["template"]["spec"]["tolerations"]
    )
