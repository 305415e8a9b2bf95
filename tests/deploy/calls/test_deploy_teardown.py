"""``make destroy``'s AWS calls beyond ``cdk destroy`` (:mod:`whisper_build.deploy.teardown`): stack states
on a re-run, the controller's load balancers; moto, or Stubber for CloudFormation's states."""

from __future__ import annotations

import pytest
from botocore.stub import Stubber
from deploy_helpers import (
    LBC_TAGS,
    REGION,
    _client,
    _controller_network,
    _missing,
    _status,
)
from moto import mock_aws

from whisper_build.deploy import (
    aws,
    teardown,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_deletions_in_progress_are_waited_for_and_gone_stacks_skipped() -> None:
    cloudformation = _client("cloudformation")
    stub = Stubber(cloudformation)
    _missing(stub, "PNetwork")
    _status(stub, "PCluster", "DELETE_IN_PROGRESS")
    _missing(stub, "PNetwork")
    _status(stub, "PCluster", "DELETE_FAILED")
    reports: list[str] = []
    sleeps: list[float] = []
    with stub:
        states = teardown.wait_for_deletes(cloudformation, ["PNetwork", "PCluster"], reports.append, poll_s=5,
                                           sleep=sleeps.append)  # fmt: skip
    assert states == {"PNetwork": None, "PCluster": "DELETE_FAILED"}
    assert reports == ["PCluster: DELETE_IN_PROGRESS (an earlier run's deletion), waiting for it"] and sleeps == [5]


def test_delete_failed_names_the_blocking_resource() -> None:
    cloudformation = _client("cloudformation")
    stub = Stubber(cloudformation)
    summaries = [
        {"LogicalResourceId": "Vpc", "ResourceType": "AWS::EC2::VPC", "PhysicalResourceId": "vpc-1",
         "ResourceStatus": "DELETE_FAILED", "ResourceStatusReason": "The vpc 'vpc-1' has dependencies",
         "LastUpdatedTimestamp": "2026-11-30T00:00:00Z"},
        {"LogicalResourceId": "Logs", "ResourceType": "AWS::Logs::LogGroup", "PhysicalResourceId": "lg",
         "ResourceStatus": "DELETE_COMPLETE", "LastUpdatedTimestamp": "2026-11-30T00:00:00Z"},
    ]  # fmt: skip
    stub.add_response("list_stack_resources", {"StackResourceSummaries": summaries}, {"StackName": "PNetwork"})
    with stub:
        (blocked,) = teardown.delete_failures(cloudformation, "PNetwork")
    assert str(blocked) == "PNetwork: Vpc (AWS::EC2::VPC vpc-1): The vpc 'vpc-1' has dependencies"


def test_a_deletion_still_running_after_the_wait_names_the_stack_and_what_to_do() -> None:
    cloudformation = _client("cloudformation")
    stub = Stubber(cloudformation)
    for _ in range(3):
        _status(stub, "PCluster", "DELETE_IN_PROGRESS")
    sleeps: list[float] = []
    with stub, pytest.raises(aws.DeployError) as raised:
        teardown.wait_for_deletes(cloudformation, ["PCluster"], lambda line: None, poll_s=30, timeout_s=60,
                                  sleep=sleeps.append)  # fmt: skip
    assert sleeps == [30, 30]
    message = str(raised.value)
    assert message.startswith("PCluster still DELETE_IN_PROGRESS after 1 min")
    assert "aws cloudformation describe-stack-events --stack-name PCluster --region us-east-1" in message
    assert "run the same make destroy again" in message


@mock_aws
def test_wait_for_no_load_balancers_polls_until_the_controller_deleted_them() -> None:
    tagging, elbv2, ec2 = _client("resourcegroupstaggingapi"), _client("elbv2"), _client("ec2")
    vpc, subnets = _controller_network(ec2, elbv2)
    lb = elbv2.create_load_balancer(Name="k8s-whisper", Subnets=subnets, Type="network", Tags=LBC_TAGS)
    arn = lb["LoadBalancers"][0]["LoadBalancerArn"]
    elbv2.create_target_group(Name="k8s-whisper-tg", Protocol="TCP", Port=8080, VpcId=vpc, Tags=LBC_TAGS)
    reports: list[str] = []

    def controller_deletes(seconds: float) -> None:
        elbv2.delete_load_balancer(LoadBalancerArn=arn)

    left = teardown.wait_for_no_load_balancers(tagging, elbv2, ec2, "whisper-hyperpod", REGION, reports.append,
                                               poll_s=15, sleep=controller_deletes)  # fmt: skip
    assert left == [] and reports == ["waiting for the AWS Load Balancer Controller to delete 1 load balancer(s)"]

    elbv2.create_load_balancer(Name="k8s-stuck", Subnets=subnets, Type="network", Tags=LBC_TAGS)
    left = teardown.wait_for_no_load_balancers(tagging, elbv2, ec2, "whisper-hyperpod", REGION, reports.append,
                                               poll_s=15, timeout_s=30, sleep=lambda s: None)  # fmt: skip
    assert [item.kind for item in left] == ["load-balancer"]  # the target group is not waited for
    assert left[0].delete.startswith("aws elbv2 delete-load-balancer --load-balancer-arn arn:aws:elasticloadbalancing")


@mock_aws
def test_target_groups_are_listed_and_ones_deleted_meanwhile_left_out() -> None:
    tagging, elbv2, ec2 = _client("resourcegroupstaggingapi"), _client("elbv2"), _client("ec2")
    vpc, _ = _controller_network(ec2, elbv2)
    group = elbv2.create_target_group(Name="k8s-whisper-tg", Protocol="TCP", Port=8080, VpcId=vpc,
                                      Tags=LBC_TAGS)["TargetGroups"][0]["TargetGroupArn"]  # fmt: skip
    elbv2.create_target_group(Name="other", Protocol="TCP", Port=80, VpcId=vpc,
                              Tags=[{"Key": teardown.LBC_CLUSTER_TAG, "Value": "another-cluster"}])  # fmt: skip
    (found,) = teardown.controller_load_balancers(tagging, elbv2, ec2, "whisper-hyperpod", REGION)
    assert (found.kind, found.id) == ("target-group", group)
    assert found.detail == "made by the AWS Load Balancer Controller for whisper/whisper"
    assert found.delete == f"aws elbv2 delete-target-group --target-group-arn {group} --region {REGION}"

    # the Tagging API still lists what the controller has just deleted; describing it says it is gone
    gone = {"lb": "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/k8s-gone/1",
            "tg": "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/k8s-gone/2"}  # fmt: skip
    tagging_stub, elbv2_stub = Stubber(tagging), Stubber(elbv2)
    tagging_stub.add_response("get_resources", {"ResourceTagMappingList": [
        {"ResourceARN": gone["lb"], "Tags": LBC_TAGS}, {"ResourceARN": gone["tg"], "Tags": LBC_TAGS}]})  # fmt: skip
    elbv2_stub.add_client_error("describe_load_balancers", "LoadBalancerNotFound",
                                expected_params={"LoadBalancerArns": [gone["lb"]]})  # fmt: skip
    elbv2_stub.add_client_error("describe_target_groups", "TargetGroupNotFound",
                                expected_params={"TargetGroupArns": [gone["tg"]]})  # fmt: skip
    with tagging_stub, elbv2_stub:
        assert teardown.controller_load_balancers(tagging, elbv2, ec2, "whisper-hyperpod", REGION) == []
    elbv2_stub.assert_no_pending_responses()
