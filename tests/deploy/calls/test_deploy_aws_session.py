"""The boto3 session (:class:`whisper_build.deploy.aws_session.AwsSession`) against moto and Stubber:
retained resources, the storage failure report, stacks left, the billing check, cluster status,
load balancers left."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber
from deploy_helpers import (
    LBC_TAGS,
    OPERATOR_CONFIG,
    REGION,
    _client,
    _controller_network,
    _missing,
    _session,
    _status,
)
from moto import mock_aws

from settings import load_config
from whisper_build.deploy import (
    aws,
    aws_session,
    retained,
    teardown,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


@mock_aws
def test_retained_resources_are_listed_and_purged() -> None:
    config = load_config()
    s3 = _client("s3")
    ecr = _client("ecr")
    models = f"whisper-hyperpod-models-123456789012-{REGION}"
    logs = "whisperhyperpodstorage-accesslogs-1x2y3z"
    for bucket in (models, logs):
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_tagging(Bucket=logs, Tagging={"TagSet": [{"Key": "project", "Value": "whisper-hyperpod"}]})
    for version in (b"v1", b"v2"):
        s3.put_object(Bucket=models, Key="models/large-v3-turbo/sm86/current.json", Body=version)
    ecr.create_repository(repositoryName="whisper-hyperpod/whisper-serving")
    tags = [{"TagKey": "project", "TagValue": "whisper-hyperpod"}]
    kms = _client("kms")
    key = kms.create_key(Description="whisper-hyperpod: envelope encryption of Kubernetes Secrets (EKS)", Tags=tags)
    pending = kms.create_key(Description="already scheduled", Tags=tags)["KeyMetadata"]["KeyId"]
    kms.schedule_key_deletion(KeyId=pending, PendingWindowInDays=7)
    kms.create_key(Description="another project", Tags=[{"TagKey": "project", "TagValue": "other"}])
    secrets = _client("secretsmanager")
    old_secret = secrets.create_secret(Name="whisper-hyperpod/gateway-api-keys", SecretString="{}",
                                       Tags=[{"Key": "project", "Value": "whisper-hyperpod"}])["ARN"]  # fmt: skip
    logs_client = _client("logs")
    for group in ("/aws/eks/whisper-hyperpod/cluster", "/aws/codebuild/whisper-hyperpod-engine-sm86",
                  "/aws/lambda/WhisperHyperpodCluster-KubectlHandler-abc", "/aws/eks/whisper-hyperpod-2/cluster",
                  "/aws/lambda/WhisperHyperpodProdCluster-Handler-x"):  # fmt: skip
        logs_client.create_log_group(logGroupName=group)
    lines: list[str] = []
    session = aws_session.AwsSession(config, "123456789012", "arn:aws:iam::123456789012:user/me",
                             lambda service, region_name: _client(service),
                             lambda service, region_name: boto3.resource(service, region_name=region_name),
                             lines.append)  # fmt: skip

    session.report_retained(purge=False)
    listed = "\n".join(lines)
    assert f"s3-bucket {models}: model engines" in listed
    assert f"s3-bucket {logs}: server access logs" in listed
    assert "ecr-repository whisper-hyperpod/whisper-serving: serving images" in listed
    assert "make destroy CONFIG=<this config> PURGE=1" in listed
    assert "aws ecr delete-repository --repository-name whisper-hyperpod/whisper-serving --force" in listed
    key_id = key["KeyMetadata"]["KeyId"]
    assert f"kms-key {key_id}: KMS key tagged with the project" in listed and pending not in listed
    assert f"aws kms schedule-key-deletion --key-id {key_id} --pending-window-in-days 7 --region {REGION}" in listed
    assert f"secret {old_secret}: secret tagged with the project" in listed
    assert f"aws secretsmanager delete-secret --secret-id {old_secret} --force-delete-without-recovery" in listed
    listed_groups = {item.name for item in session.retained() if item.kind == "log-group"}
    assert listed_groups == {"/aws/eks/whisper-hyperpod/cluster", "/aws/codebuild/whisper-hyperpod-engine-sm86",
                             "/aws/lambda/WhisperHyperpodCluster-KubectlHandler-abc"}  # fmt: skip
    assert f"aws logs delete-log-group --log-group-name /aws/eks/whisper-hyperpod/cluster --region {REGION}" in listed

    session.report_retained(purge=True)
    assert session.retained() == []
    assert s3.list_buckets()["Buckets"] == []
    assert ecr.describe_repositories()["repositories"] == []
    assert kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"] == "PendingDeletion"
    assert {g["logGroupName"] for g in logs_client.describe_log_groups()["logGroups"]} == {
        "/aws/eks/whisper-hyperpod-2/cluster", "/aws/lambda/WhisperHyperpodProdCluster-Handler-x"}  # fmt: skip


def test_storage_failure_report_names_the_failed_import_and_the_ways_out() -> None:
    config = load_config()
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    stub = Stubber(cloudformation)
    stack = {"StackName": "WhisperHyperpodStorage", "StackStatus": "ROLLBACK_COMPLETE", "CreationTime": "2026-12-01"}
    stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "WhisperHyperpodStorage"})
    event = {
        "StackId": "id", "EventId": "e1", "StackName": "WhisperHyperpodStorage", "Timestamp": "2026-12-01",
        "LogicalResourceId": "ModelBucket", "ResourceType": "AWS::S3::Bucket", "ResourceStatus": "IMPORT_FAILED",
        "ResourceStatusReason": "Resource import failed: the bucket's properties differ",
    }  # fmt: skip
    ok_event = {**event, "EventId": "e0", "ResourceStatus": "CREATE_COMPLETE"}
    stub.add_response(
        "describe_stack_events", {"StackEvents": [event, ok_event]}, {"StackName": "WhisperHyperpodStorage"}
    )
    stub.activate()
    session = aws_session.AwsSession(config, "123456789012", "arn", lambda *a, **k: cloudformation, lambda *a, **k: None,
                             lambda _: None)  # fmt: skip
    bucket = "whisper-hyperpod-models-123456789012-us-east-1"
    session.retained = lambda: [  # type: ignore[method-assign]
        aws.Retained("s3-bucket", bucket, "model engines"),
        aws.Retained("ecr-repository", "whisper-hyperpod/whisper-serving", "images"),
        aws.Retained("s3-bucket", "whisper-hyperpod-storage-logs-x", retained.ACCESS_LOG_WHY),
        aws.Retained("kms-key", "key-1", "key"),
    ]
    report = "\n".join(session.storage_failure_report())
    stub.assert_no_pending_responses()
    assert report.startswith("WhisperHyperpodStorage: ROLLBACK_COMPLETE")
    assert "ModelBucket (AWS::S3::Bucket) IMPORT_FAILED: Resource import failed" in report
    assert "CREATE_COMPLETE" not in report
    assert "aws cloudformation delete-stack --stack-name WhisperHyperpodStorage --region us-east-1" in report
    assert f"aws s3 rb s3://{bucket} --region us-east-1" in report
    assert "aws ecr delete-repository --repository-name whisper-hyperpod/whisper-serving --force" in report
    assert "storage-logs" not in report and "key-1" not in report  # only what the import is about
    assert "new project_name" in report


@mock_aws
def test_a_stack_left_after_destroy_is_reported_with_what_blocked_it_and_the_load_balancer() -> None:
    elbv2, ec2 = _client("elbv2"), _client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"us-east-1{z}")["Subnet"]
               ["SubnetId"] for i, z in ((1, "a"), (2, "b"))]  # fmt: skip
    lb = elbv2.create_load_balancer(Name="k8s-whisper-whisper-abc", Subnets=subnets, Type="network",
                                    Scheme="internal", Tags=[{"Key": teardown.LBC_CLUSTER_TAG,
                                                              "Value": "whisper-hyperpod"},
                                                             {"Key": "service.k8s.aws/stack",
                                                              "Value": "whisper/whisper"}])["LoadBalancers"][0]  # fmt: skip
    elbv2.create_load_balancer(Name="other", Subnets=subnets, Type="network",
                               Tags=[{"Key": teardown.LBC_CLUSTER_TAG, "Value": "another-cluster"}])  # fmt: skip
    cloudformation = _client("cloudformation")
    stub = Stubber(cloudformation)
    for stack in ("Network", "Storage", "Cluster", "Observability", "Workloads", "EngineBuild"):
        if stack == "Network":
            _status(stub, f"WhisperHyperpod{stack}", "DELETE_FAILED")
            stub.add_response("list_stack_resources", {"StackResourceSummaries": [
                {"LogicalResourceId": "PrivateSubnet1", "ResourceType": "AWS::EC2::Subnet", "PhysicalResourceId":
                 subnets[0], "ResourceStatus": "DELETE_FAILED", "ResourceStatusReason": "has dependencies",
                 "LastUpdatedTimestamp": "2026-11-30T00:00:00Z"}]}, {"StackName": "WhisperHyperpodNetwork"})  # fmt: skip
        else:
            _missing(stub, f"WhisperHyperpod{stack}")
    lines: list[str] = []
    session = _session({"cloudformation": cloudformation, "elbv2": elbv2, "ec2": ec2}, lines)
    with stub:
        message = "\n".join(session.stack_failure_report())
    assert "WhisperHyperpodNetwork: DELETE_FAILED" in message
    assert (
        f"blocked by WhisperHyperpodNetwork: PrivateSubnet1 (AWS::EC2::Subnet {subnets[0]}): has dependencies"
        in message
    )
    assert f"aws elbv2 delete-load-balancer --load-balancer-arn {lb['LoadBalancerArn']} --region us-east-1" in message
    assert "other" not in message.replace("another", "")
    stub = Stubber(cloudformation)
    _status(stub, "WhisperHyperpodNetwork", "DELETE_FAILED")
    for stack in ("Storage", "Cluster", "Observability", "Workloads", "EngineBuild"):
        _missing(stub, f"WhisperHyperpod{stack}")
    with stub, pytest.raises(aws.DeployError, match=r"stacks left after cdk destroy: WhisperHyperpodNetwork \(why"):
        session.check_stacks_gone()


@mock_aws
def test_billing_check_lists_what_still_bills_and_passes_when_nothing_does() -> None:
    ec2, eks, sagemaker, elbv2 = _client("ec2"), _client("eks"), _client("sagemaker"), _client("elbv2")
    clients = {"ec2": ec2, "eks": eks, "sagemaker": sagemaker, "elbv2": elbv2}
    lines: list[str] = []
    session = _session(clients, lines)
    session.check_billing()
    assert lines == ["    nothing of whisper-hyperpod bills by the hour in us-east-1"]

    tag = {"Key": "project", "Value": "whisper-hyperpod"}
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    eip = ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": [tag]}])
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=eip["AllocationId"],
                                 TagSpecifications=[{"ResourceType": "natgateway", "Tags": [tag]}])["NatGateway"]  # fmt: skip
    volume = ec2.create_volume(AvailabilityZone="us-east-1a", Size=500,
                               TagSpecifications=[{"ResourceType": "volume", "Tags": [tag]}])["VolumeId"]  # fmt: skip
    eni = ec2.create_network_interface(SubnetId=subnet, TagSpecifications=[{"ResourceType": "network-interface",
        "Tags": [{"Key": teardown.VPC_CNI_CLUSTER_TAG, "Value": "whisper-hyperpod"}]}])["NetworkInterface"]  # fmt: skip
    ec2.create_security_group(GroupName="k8s-traffic-whisper", Description="lbc", VpcId=vpc, TagSpecifications=[
        {"ResourceType": "security-group", "Tags": [{"Key": teardown.LBC_CLUSTER_TAG, "Value": "whisper-hyperpod"}]}])  # fmt: skip
    eks.create_cluster(name="whisper-hyperpod", roleArn="arn:aws:iam::123456789012:role/eks",
                       resourcesVpcConfig={"subnetIds": [subnet]})  # fmt: skip
    sagemaker.create_cluster(ClusterName="whisper-hyperpod-hp", InstanceGroups=[{
        "InstanceCount": 1, "InstanceGroupName": "g5", "InstanceType": "ml.g5.2xlarge",
        "LifeCycleConfig": {"SourceS3Uri": "s3://sagemaker-lifecycle/l", "OnCreate": "on_create.sh"},
        "ExecutionRole": "arn:aws:iam::123456789012:role/x", "ThreadsPerCore": 2}])  # fmt: skip
    with pytest.raises(aws.DeployError) as raised:
        session.check_billing()
    message = str(raised.value)
    for expected in (
        "hyperpod-cluster whisper-hyperpod-hp",
        "aws sagemaker delete-cluster --cluster-name whisper-hyperpod-hp --region us-east-1",
        "eks-cluster whisper-hyperpod",
        f"aws ec2 delete-nat-gateway --nat-gateway-id {nat['NatGatewayId']}",
        f"aws ec2 release-address --allocation-id {eip['AllocationId']}",
        f"aws ec2 delete-volume --volume-id {volume}",
        f"aws ec2 delete-network-interface --network-interface-id {eni['NetworkInterfaceId']}",
        "security-group sg-",
    ):
        assert expected in message, expected


def test_cluster_active_reads_the_eks_status() -> None:
    eks = _client("eks")
    stub = Stubber(eks)
    params = {"name": "whisper-hyperpod"}
    for status in ("ACTIVE", "DELETING"):
        stub.add_response("describe_cluster", {"cluster": {"name": "whisper-hyperpod", "status": status}}, params)
    stub.add_client_error("describe_cluster", "ResourceNotFoundException", expected_params=params)
    stub.add_client_error("describe_cluster", "AccessDeniedException", expected_params=params)
    session = _session({"eks": eks}, [])
    with stub:
        assert session.cluster_active() is True
        assert session.cluster_active() is False
        assert session.cluster_active() is False
        with pytest.raises(aws.ClientError, match="AccessDenied"):
            session.cluster_active()
    stub.assert_no_pending_responses()


@mock_aws
def test_billing_check_of_the_operator_target_lists_its_sagemaker_endpoint() -> None:
    sagemaker = _client("sagemaker")
    lines: list[str] = []
    session = aws_session.AwsSession(load_config(OPERATOR_CONFIG), "123456789012", "arn:aws:iam::123456789012:user/me",
                             lambda service, region_name: _client(service), boto3.resource, lines.append)  # fmt: skip
    session.check_billing()  # no endpoint: passes
    sagemaker.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/sm",
                           PrimaryContainer={"Image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1"})  # fmt: skip
    sagemaker.create_endpoint_config(EndpointConfigName="c", ProductionVariants=[
        {"VariantName": "v", "ModelName": "m", "InitialInstanceCount": 1, "InstanceType": "ml.g4dn.xlarge"}])  # fmt: skip
    sagemaker.create_endpoint(EndpointName="whisper-hyperpod", EndpointConfigName="c")
    with pytest.raises(aws.DeployError) as raised:
        session.check_billing()
    message = str(raised.value)
    assert "sagemaker-endpoint whisper-hyperpod (status" in message
    assert "aws sagemaker delete-endpoint --endpoint-name whisper-hyperpod --region us-east-1" in message


@mock_aws
def test_the_session_raises_naming_load_balancers_left_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    elbv2, ec2 = _client("elbv2"), _client("ec2")
    lines: list[str] = []
    session = _session({}, lines)
    session.wait_load_balancers_gone()  # none: returns at once
    assert lines == []
    _, subnets = _controller_network(ec2, elbv2)
    elbv2.create_load_balancer(Name="k8s-stuck", Subnets=subnets, Type="network", Tags=LBC_TAGS)
    original = teardown.wait_for_no_load_balancers
    monkeypatch.setattr(teardown, "wait_for_no_load_balancers",
                        lambda *args: original(*args, poll_s=300, sleep=lambda s: None))  # fmt: skip
    with pytest.raises(aws.DeployError, match=r"did not delete these within 10 min .*aws elbv2 delete-load-balancer"):
        session.wait_load_balancers_gone()
    assert lines[0] == "    waiting for the AWS Load Balancer Controller to delete 1 load balancer(s)"
