"""The HyperPod cluster of a config with priority lists and Spot: template shape, and the CreateCluster request
it becomes, checked by the pinned botocore's validation and the service model's own rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from capacity_support import (
    G5_LIST,
    cluster_properties,
    config,
    default_data,
    gpu_nodes,
    schedulable,
    spot_data,
    with_groups,
)
from k8s_support import of_kind, synth

from settings import ConfigError
from stacks.cluster_request import request_problems


@pytest.fixture(scope="module")
def spot_cluster() -> dict[str, Any]:
    return cluster_properties(config(spot_data()))


@pytest.fixture(scope="module")
def flexible_cluster() -> dict[str, Any]:
    return cluster_properties(config(with_groups(default_data(), instance_types=G5_LIST, min_instance_count=1)))


def _groups(properties: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["InstanceGroupName"]: g for g in properties["InstanceGroups"]}


def test_a_list_renders_a_flexible_group_and_switches_on_continuous_provisioning(flexible_cluster) -> None:
    g5, g6e = _groups(flexible_cluster)["g5"], _groups(flexible_cluster)["g6e"]
    assert g5["InstanceRequirements"] == {"InstanceTypes": G5_LIST} and "InstanceType" not in g5
    assert g5["MinInstanceCount"] == 1
    assert g6e["InstanceType"] == "ml.g6e.2xlarge" and "InstanceRequirements" not in g6e
    assert flexible_cluster["NodeProvisioningMode"] == "Continuous"
    assert "AutoScaling" not in flexible_cluster  # a list alone does not turn Karpenter on


def test_bulk_spot_adds_a_tainted_empty_spot_group_of_the_first_type(spot_cluster) -> None:
    spot = _groups(spot_cluster)["g5-spot"]
    assert spot["CapacityRequirements"] == {"Spot": {}}
    assert (spot["InstanceType"], spot["InstanceCount"]) == ("ml.g5.2xlarge", 0)
    assert {"Key": "whisper-hyperpod.io/capacity", "Value": "spot", "Effect": "NoSchedule"} in spot["KubernetesConfig"][
        "Taints"
    ]
    assert spot["KubernetesConfig"]["Labels"]["whisper-hyperpod.io/gpu-group"] == "g5"
    assert "CapacityRequirements" not in _groups(spot_cluster)["g5"]  # serving stays On-Demand


def test_every_synthesized_group_is_a_valid_create_cluster_request(flexible_cluster, spot_cluster) -> None:
    assert request_problems(flexible_cluster) == []
    assert request_problems(spot_cluster) == []


@pytest.mark.parametrize(
    ("break_it", "expected"),
    [
        (lambda g: g.update(InstanceType="ml.g5.2xlarge"), "exactly one of InstanceType and InstanceRequirements"),
        (lambda g: g["InstanceRequirements"].update(InstanceTypes=["ml.g5.2xlarge"] * 2), "duplicates"),
        (
            lambda g: g["InstanceRequirements"].update(InstanceTypes=[f"ml.g5.{i}xlarge" for i in range(21)]),
            "allowed 1–20",
        ),
        (
            lambda g: g["InstanceRequirements"].update(InstanceTypes=["ml.g5.3xlarge"]),
            "not in the ClusterInstanceType enum",
        ),
        (lambda g: g["InstanceRequirements"].update(InstanceTypes=[]), "Invalid length for parameter"),
        (lambda g: g.pop("ExecutionRole"), 'Missing required parameter in InstanceGroups[0]: "ExecutionRole"'),
        (lambda g: g.update(InstanceCount="one"), "Invalid type for parameter InstanceGroups[0].InstanceCount"),
    ],
)
def test_a_broken_group_is_reported(flexible_cluster, break_it, expected: str) -> None:
    broken = copy.deepcopy(flexible_cluster)
    break_it(broken["InstanceGroups"][0])
    assert any(expected in line for line in request_problems(broken)), request_problems(broken)


def test_a_flexible_group_without_continuous_provisioning_is_reported(flexible_cluster) -> None:
    broken = {k: v for k, v in flexible_cluster.items() if k != "NodeProvisioningMode"}
    assert request_problems(broken) == [
        "InstanceGroups[0] (g5): a flexible instance group needs NodeProvisioningMode Continuous"
    ]


def test_every_gpu_node_runs_exactly_one_gpu_metrics_exporter_whatever_its_taints(spot_cluster) -> None:
    exporters = of_kind(synth(config(spot_data())), "DaemonSet")
    for node, node_labels, taints in gpu_nodes(spot_cluster):
        landing = [
            name for name, ds in exporters.items() if schedulable(ds["spec"]["template"]["spec"], node_labels, taints)
        ]
        assert len(landing) == 1, f"{node} (taints {taints}) runs {landing or 'no exporter'}"
    spot = exporters["dcgm-exporter-g5-g5-2xlarge-spot"]["spec"]["template"]["metadata"]["labels"]
    assert spot["whisper-hyperpod.io/capacity"] == "spot"  # its series say Spot (priced as Spot)


def test_no_serving_pod_can_land_on_a_spot_node_and_no_field_opts_serving_into_spot(spot_cluster) -> None:
    manifests = synth(config(spot_data()))
    spot_nodes = [
        (node, node_labels, taints)
        for node, node_labels, taints in gpu_nodes(spot_cluster)
        if node_labels.get("whisper-hyperpod.io/capacity") == "spot"
    ]
    assert spot_nodes  # the example has Spot nodes to test against
    spot_groups = {g["InstanceGroupName"] for g in spot_cluster["InstanceGroups"] if "CapacityRequirements" in g}
    assert spot_groups == {"g5-spot"}  # only the bulk group's Spot twin is Spot
    for name, deployment in of_kind(manifests, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        if "nvidia.com/gpu" not in str(pod.get("containers", [{}])[0].get("resources", {})):
            continue  # no GPU pod (gateway-less helpers such as the pod ranker)
        lands = [node for node, node_labels, taints in spot_nodes if schedulable(pod, node_labels, taints)]
        assert lands == ([n for n, *_ in spot_nodes] if name.startswith("whisper-bulk") else []), name
    for section in ("capacity", "serving"):  # a Spot opt-in for serving is refused, not ignored
        data = spot_data()
        data.setdefault(section, {})["serving_spot"] = True
        with pytest.raises(ConfigError, match=f"{section}.serving_spot"):
            config(data)


def test_the_request_check_needs_no_aws_profile(flexible_cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-for-whisper-tests")  # make synth runs offline, any profile
    assert request_problems(flexible_cluster) == []
