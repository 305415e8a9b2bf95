"""The HyperPod capacity report (:mod:`whisper_build.deploy.cluster_progress`): DescribeCluster and ListClusterEvents
responses fed through botocore's Stubber, which checks each response against the pinned SageMaker model's shapes."""

from __future__ import annotations

import datetime as dt

import boto3
import pytest
from botocore.stub import Stubber

from whisper_build.deploy import cluster_progress

ARN = "arn:aws:sagemaker:us-east-1:123456789012:cluster/abc123def456"
WHEN = dt.datetime(2026, 5, 1, 10, 0, tzinfo=dt.UTC)


def _sagemaker():
    return boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def _described() -> dict:
    return {
        "ClusterArn": ARN,
        "ClusterStatus": "InService",
        "NodeProvisioningMode": "Continuous",
        "InstanceGroups": [
            {
                "InstanceGroupName": "g5",
                "CurrentCount": 1,
                "TargetCount": 2,
                "Status": "InService",
                "InstanceRequirements": {
                    "CurrentInstanceTypes": ["ml.g5.4xlarge"],
                    "DesiredInstanceTypes": ["ml.g5.2xlarge", "ml.g5.4xlarge"],
                },
                "InstanceTypeDetails": [{"InstanceType": "ml.g5.4xlarge", "CurrentCount": 1}],
            },
            {
                "InstanceGroupName": "g5-spot",
                "InstanceType": "ml.g5.2xlarge",
                "CurrentCount": 0,
                "TargetCount": 0,
                "Status": "InService",
                "CapacityRequirements": {"Spot": {}},
            },
        ],
    }


def _event(level: str, description: str, group: str = "g5") -> dict:
    return {
        "EventId": f"e-{level}",
        "ClusterArn": ARN,
        "ClusterName": "whisper-hyperpod-hp",
        "InstanceGroupName": group,
        "ResourceType": "InstanceGroup",
        "EventTime": WHEN,
        "Description": description,
        "EventLevel": level,
    }


def test_nodes_per_type_and_capacity_errors_are_reported() -> None:
    client = _sagemaker()
    stub = Stubber(client)
    stub.add_response("describe_cluster", _described(), {"ClusterName": "whisper-hyperpod-hp"})
    events = [
        _event("Error", "Insufficient capacity for ml.g5.2xlarge in use1-az4; trying ml.g5.4xlarge"),
        _event("Info", "Instance i-0abc joined"),
    ]
    stub.add_response(
        "list_cluster_events",
        {"Events": events},
        {"ClusterName": "whisper-hyperpod-hp", "SortOrder": "Descending", "MaxResults": 50},
    )
    with stub:
        lines = cluster_progress.progress(client, "whisper-hyperpod-hp")
    stub.assert_no_pending_responses()
    assert lines == [
        "g5: 1/2 nodes (ml.g5.4xlarge 1, ml.g5.2xlarge 0), InService",
        "g5-spot: 0/0 nodes Spot (ml.g5.2xlarge 0), InService",
        "g5: Error 2026-05-01T10:00:00+00:00: Insufficient capacity for ml.g5.2xlarge in use1-az4; trying ml.g5.4xlarge",
    ]


def test_without_continuous_provisioning_no_events_are_asked_for() -> None:
    client = _sagemaker()
    stub = Stubber(client)
    described = {**_described(), "InstanceGroups": _described()["InstanceGroups"][1:]}
    described.pop("NodeProvisioningMode")
    stub.add_response("describe_cluster", described, {"ClusterName": "c"})
    with stub:
        assert cluster_progress.progress(client, "c") == ["g5-spot: 0/0 nodes Spot (ml.g5.2xlarge 0), InService"]
    stub.assert_no_pending_responses()


def test_the_serving_wait_report_puts_hyperpod_capacity_before_the_pods() -> None:
    from settings import load_config
    from whisper_build.deploy.aws_session import AwsSession

    client = _sagemaker()
    stub = Stubber(client)
    described = {**_described()}
    described.pop("NodeProvisioningMode")
    stub.add_response("describe_cluster", described, {"ClusterName": "whisper-hyperpod-hp"})
    pending = (
        '{"items": [{"metadata": {"name": "whisper-g5-x", "labels": {"whisper-hyperpod.io/gpu-group": "g5"}}, '
        '"status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", '
        '"message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}}]}'
    )
    session = AwsSession(
        load_config(), "123456789012", "arn", lambda *a, **k: client, lambda *a, **k: None, print, lambda argv: pending
    )
    with stub:
        lines = session.pod_report()
    assert lines[0] == "g5: 1/2 nodes (ml.g5.4xlarge 1, ml.g5.2xlarge 0), InService"
    assert lines[2].startswith("whisper-g5-x: waiting: Pending for capacity: no node of GPU group g5")


def _shortage() -> tuple[dict, list[dict]]:
    """g5 wants one node of its list and has none; HyperPod says why (a DescribeCluster, a ListClusterEvents page)."""
    described = _described()
    described["InstanceGroups"][0].update(CurrentCount=0, TargetCount=1, InstanceTypeDetails=[])
    events = [
        _event("Info", "Scaling g5 to 1"),
        _event("Error", "ml.g5.2xlarge InsufficientCapacity in use1-az4, trying ml.g5.4xlarge"),
        _event("Error", "an older error"),
    ]
    return described, events


def _stubbed(described: dict, events: list[dict], name: str = "whisper-hyperpod-hp") -> tuple[object, Stubber]:
    client = _sagemaker()
    stub = Stubber(client)
    stub.add_response("describe_cluster", described, {"ClusterName": name})
    stub.add_response(
        "list_cluster_events", {"Events": events}, {"ClusterName": name, "SortOrder": "Descending", "MaxResults": 50}
    )
    return client, stub


def test_the_wait_line_of_a_group_gives_its_nodes_per_type_and_its_newest_error() -> None:
    client, stub = _stubbed(*_shortage())
    with stub:
        lines = cluster_progress.wait_progress(client, "whisper-hyperpod-hp")
    stub.assert_no_pending_responses()
    assert lines == [
        "g5: 0/1 nodes (ml.g5.2xlarge 0, ml.g5.4xlarge 0), InService; newest error: ml.g5.2xlarge "
        "InsufficientCapacity in use1-az4, trying ml.g5.4xlarge",
        "g5-spot: 0/0 nodes Spot (ml.g5.2xlarge 0), InService",
    ]
    missing = _sagemaker()
    with Stubber(missing) as gone:
        gone.add_client_error("describe_cluster", "ResourceNotFound", "Cluster not found")
        assert cluster_progress.wait_progress(missing, "c") == [
            "HyperPod cluster c: not found (step 'stacks' creates it)"
        ]


def test_the_serving_wait_reports_hyperpod_capacity_while_it_waits_not_only_when_it_gives_up() -> None:
    import dataclasses
    import threading

    from settings import load_config
    from whisper_build.deploy.aws_session import AwsSession
    from whisper_build.deploy.deploy_plan import deploy_steps
    from whisper_build.deploy.runner import Runner
    from whisper_build.deploy.steps import WaitAll
    from whisper_build.paths import REPO_ROOT

    config = load_config(REPO_ROOT / "config" / "examples" / "capacity.yaml")
    (serving,) = [step for step in deploy_steps(config, "c.yaml", "123456789012") if step.name == "serving"]
    (wait,) = serving.actions
    assert isinstance(wait, WaitAll) and wait.progress_every_s == 60  # once a minute in the real journey
    client, stub = _stubbed(*_shortage())
    session = AwsSession(config, "123456789012", "arn", lambda *a, **k: client, lambda *a, **k: None, print, None)
    lines: list[str] = []
    reported = threading.Event()

    def out(line: str) -> None:
        lines.append(line)
        if line.startswith("    progress: g5: 0/1 nodes"):
            reported.set()

    def rollout_status(argv) -> None:  # kubectl still waiting when the report comes
        assert reported.wait(10), "no progress line while kubectl waited"

    with stub:
        Runner([], session, out, rollout_status).wait_all(dataclasses.replace(wait, progress_every_s=0.01))
    assert (
        "    progress: g5: 0/1 nodes (ml.g5.2xlarge 0, ml.g5.4xlarge 0), InService; newest error: ml.g5.2xlarge "
        "InsufficientCapacity in use1-az4, trying ml.g5.4xlarge"
    ) in lines


@pytest.mark.usefixtures("kubectl_installed")
def test_make_pods_puts_hyperpod_capacity_before_the_pods() -> None:
    from deploy_helpers import _kubectl_main

    client, stub = _stubbed(*_shortage())
    out: list[str] = []
    with stub:
        code = _kubectl_main(
            ["pods", "--config", "config/examples/capacity.yaml"],
            sagemaker=client,
            out=out.append,
            kubectl=lambda argv: '{"items": []}',
        )
    stub.assert_no_pending_responses()
    assert code == 0
    assert out[:4] == [
        "hyperpod: g5: 0/1 nodes (ml.g5.2xlarge 0, ml.g5.4xlarge 0), InService",
        "hyperpod: g5-spot: 0/0 nodes Spot (ml.g5.2xlarge 0), InService",
        "hyperpod: g5: Error 2026-05-01T10:00:00+00:00: ml.g5.2xlarge InsufficientCapacity in use1-az4, trying "
        "ml.g5.4xlarge",
        "hyperpod: g5: Error 2026-05-01T10:00:00+00:00: an older error",
    ]
