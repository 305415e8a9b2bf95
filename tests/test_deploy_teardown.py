"""``make deploy``'s capacity step, ``make destroy``'s stack states / load balancers / billing check, the
pod diagnosis (``make pods``) and the endpoint wait (``make endpoint``): boto3 calls against moto, or
botocore's Stubber where moto lacks the API (Service Quotas' list calls, CloudFormation's states)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from moto import mock_aws

from settings import DEFAULT_CONFIG_PATH, load_config, names, parse_config
from whisper_build.podstart import preflight
from whisper_build.workstation.deploy import aws, capacity, cli, kube, pods, retained, teardown
from whisper_build.workstation.deploy.plan import Step
from whisper_build.workstation.deploy.prereqs import check_aws_cli, check_kubectl

REGION = "us-east-1"
DRY_CONTEXT = "arn:aws:eks:us-east-1:<account>:cluster/whisper-hyperpod"
CONTEXT = "arn:aws:eks:us-east-1:123456789012:cluster/whisper-hyperpod"


def _client(service: str, region: str = REGION) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x")


def _quota(code: str, name: str, value: float) -> dict[str, Any]:
    return {"QuotaCode": code, "QuotaName": name, "Value": value, "ServiceCode": "x"}


def _stub_quotas(
    client: Any, sagemaker_defaults: list[Any], sagemaker_applied: list[Any], codebuild: list[Any]
) -> Stubber:
    stub = Stubber(client)
    for code, defaults, applied in (("codebuild", codebuild, []), ("sagemaker", sagemaker_defaults, sagemaker_applied)):
        stub.add_response("list_aws_default_service_quotas", {"Quotas": defaults}, {"ServiceCode": code})
        stub.add_response("list_service_quotas", {"Quotas": applied}, {"ServiceCode": code})
    return stub


CODEBUILD_LARGE = _quota("L-CB1", "Concurrently running builds for Linux/Large environment", 1)


# ---------------------------------------------------------------- capacity (step 1 of make deploy)
@mock_aws
def test_capacity_names_the_missing_quota_and_how_to_request_it() -> None:
    config = load_config()
    quotas = _client("service-quotas")
    stub = _stub_quotas(
        quotas,
        [_quota("L-G5", "ml.g5.2xlarge for cluster usage", 0), _quota("L-G6E", "ml.g6e.2xlarge for cluster usage", 0)],
        [_quota("L-G5", "ml.g5.2xlarge for cluster usage", 2)],  # raised by the account: applied value wins
        [CODEBUILD_LARGE],
    )
    with stub:
        problems = capacity.capacity_problems(_client("ec2"), quotas, config)
    stub.assert_no_pending_responses()
    assert problems == [
        "quota 'ml.g6e.2xlarge for cluster usage' (sagemaker, L-G6E) is 0 in us-east-1; this config needs 1 for "
        "HyperPod instances of GPU group(s) g6e. Request an increase (approval can take days): aws service-quotas "
        "request-service-quota-increase --service-code sagemaker --quota-code L-G6E --desired-value 1 --region "
        "us-east-1  -- or Service Quotas console -> sagemaker -> 'ml.g6e.2xlarge for cluster usage' -> Request increase"
    ]


@mock_aws
def test_capacity_passes_when_offered_and_quotas_suffice_and_sums_groups_of_one_type() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data["gpu_groups"].append({**data["gpu_groups"][0], "name": "g5b", "instance_count": 2})
    config = parse_config(data, "two g5 groups")
    needs = {n.name: n.needed for n in capacity.quota_needs(config)}
    assert needs["ml.g5.2xlarge for cluster usage"] == 3
    quotas = _client("service-quotas")
    stub = _stub_quotas(
        quotas,
        [_quota("L-G5", "ml.g5.2xlarge for cluster usage", 3), _quota("L-G6E", "ml.g6e.2xlarge for cluster usage", 1)],
        [],
        [],  # no CodeBuild quota matches: unchecked, not a failure
    )
    with stub:
        assert capacity.capacity_problems(_client("ec2"), quotas, config) == []


@mock_aws
def test_make_capacity_output_in_the_docs_is_what_a_passing_run_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    quotas = _client("service-quotas")
    stub = _stub_quotas(
        quotas,
        [_quota("L-G5", "ml.g5.2xlarge for cluster usage", 1), _quota("L-G6E", "ml.g6e.2xlarge for cluster usage", 1)],
        [],
        [CODEBUILD_LARGE],
    )
    fake_boto3 = type("FakeBoto3", (), {
        "client": staticmethod(lambda name, **kw: quotas if name == "service-quotas" else _client(name)),
        "resource": staticmethod(boto3.resource),
    })  # fmt: skip
    lines: list[str] = []
    with stub:
        status = cli.main(["deploy", "--config", str(DEFAULT_CONFIG_PATH), "--only", "capacity"],
                          out=lines.append, boto3_module=fake_boto3)  # fmt: skip
    assert status == 0
    doc = (Path(__file__).resolve().parent.parent / "docs" / "deploy.md").read_text(encoding="utf-8")
    shown = doc.split("A passing check prints", 1)[1].split("```", 2)[1]

    def normalized(text: str) -> list[str]:  # durations differ from run to run
        return [re.sub(r"\d+m\d\ds", "<m>m<ss>s", line.strip()) for line in text.strip().splitlines()]

    assert normalized("\n".join(lines)) == normalized(shown)


@mock_aws
def test_capacity_refuses_types_the_region_lacks() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data["region"] = "sa-east-1"
    data.setdefault("observability", {})["grafana"] = False
    config = parse_config(data, "sa-east-1")
    quotas = _client("service-quotas", "sa-east-1")
    stub = _stub_quotas(quotas, [_quota("L-G5", "ml.g5.2xlarge for cluster usage", 1)], [], [CODEBUILD_LARGE])
    with stub:
        problems = capacity.capacity_problems(_client("ec2", "sa-east-1"), quotas, config)
    assert problems[0].startswith("EC2 does not offer g6e.2xlarge in sa-east-1")  # moto's offering data
    assert "no Service Quotas entry 'ml.g6e.2xlarge for cluster usage' (sagemaker) in sa-east-1" in problems[1]
    assert len(problems) == 2


def test_node_autoscaling_needs_the_instances_max_replicas_take_rounded_up() -> None:
    data = yaml.safe_load((DEFAULT_CONFIG_PATH.parent / "examples" / "mig.yaml").read_text(encoding="utf-8"))
    data["cluster"]["node_autoscaling"] = True
    data["gpu_groups"][0]["max_replicas"] = 3  # g5.2xlarge: 1 GPU, 1 pod per instance
    data["gpu_groups"][2]["max_replicas"] = 57  # p5.48xlarge, 1g.10gb: 8 GPUs x 7 slices = 56 pods per instance
    needs = {n.name: n.needed for n in capacity.quota_needs(parse_config(data, "autoscaling"))}
    assert needs == {"ml.g5.2xlarge for cluster usage": 3, "ml.g6e.2xlarge for cluster usage": 1,
                     "ml.p5.48xlarge for cluster usage": 2, "Linux/Large": 1}  # fmt: skip


@mock_aws
def test_a_codebuild_quota_of_zero_fails_the_capacity_check() -> None:
    quotas = _client("service-quotas")
    enough = [
        _quota("L-G5", "ml.g5.2xlarge for cluster usage", 1),
        _quota("L-G6E", "ml.g6e.2xlarge for cluster usage", 1),
    ]
    stub = _stub_quotas(quotas, enough, [], [{**CODEBUILD_LARGE, "Value": 0}])
    with stub:
        (problem,) = capacity.capacity_problems(_client("ec2"), quotas, load_config())
    assert problem.startswith(
        "quota 'Concurrently running builds for Linux/Large environment' (codebuild, L-CB1) is 0 in us-east-1; "
        "this config needs 1 for the serving-image build (CodeBuild BUILD_GENERAL1_LARGE)"
    )
    assert "--service-code codebuild --quota-code L-CB1 --desired-value 1" in problem


def test_capacity_dry_run_text_names_types_and_quotas() -> None:
    text = capacity.capacity_commands(load_config())
    assert "Values=m6i.large,g5.2xlarge,g6e.2xlarge --region us-east-1" in text
    assert "'ml.g5.2xlarge for cluster usage' >= 1" in text and "--service-code codebuild" in text


# ---------------------------------------------------------------- stack states (re-running make destroy)
def _missing(stub: Stubber, stack: str) -> None:
    stub.add_client_error("describe_stacks", "ValidationError", f"Stack with id {stack} does not exist",
                          expected_params={"StackName": stack})  # fmt: skip


def _status(stub: Stubber, stack: str, status: str) -> None:
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": stack, "StackStatus": status, "CreationTime": "2026-11-30T00:00:00Z"}]},
        {"StackName": stack},
    )


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


def _session(clients: dict[str, Any], lines: list[str], kubectl: Any = None) -> cli.AwsSession:
    return cli.AwsSession(load_config(), "123456789012", "arn:aws:iam::123456789012:user/me",
                          lambda service, region_name: clients.get(service) or _client(service),
                          lambda service, region_name: boto3.resource(service, region_name=region_name),
                          lines.append, kubectl)  # fmt: skip


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


# ---------------------------------------------------------------- what still bills after the stacks are gone
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


# ---------------------------------------------------------------- destroy's plan, re-run and closing notes
def _dry_run(argv: list[str]) -> tuple[int, list[str]]:
    lines: list[str] = []
    code = cli.main([*argv, "--dry-run"], out=lines.append, run_command=lambda a: None, boto3_module=object())
    return code, lines


def test_destroy_dry_run_deletes_the_endpoint_before_the_stacks_and_ends_with_the_billing_check() -> None:
    code, lines = _dry_run(["destroy", "--config", str(DEFAULT_CONFIG_PATH)])
    assert code == 0
    steps = [line.split(":")[0] for line in lines if line.startswith("[")]
    assert steps == ["[1/4] endpoint", "[2/4] stacks", "[3/4] retained", "[4/4] billing"]
    commands = [line.strip() for line in lines if line.strip().startswith("$ ")]
    delete = commands.index(f"$ kubectl --context '{DRY_CONTEXT}' -n whisper delete service/whisper --ignore-not-found "
                            "--wait=true --timeout=10m")  # fmt: skip
    destroy = commands.index("$ npx cdk destroy --all --force -c config=config/default.yaml")
    assert delete < destroy
    text = "\n".join(lines)
    assert "Key=elbv2.k8s.aws/cluster,Values=whisper-hyperpod" in text
    assert "kubectl config delete-context arn:aws:eks:us-east-1:<account>:cluster/whisper-hyperpod" in text
    assert "aws cloudformation delete-stack --stack-name CDKToolkit --region us-east-1" in text


class DestroySession:
    """A re-run after everything but the retained resources is gone."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def cluster_active(self) -> bool:
        return False

    def stacks_gone(self) -> bool:
        return True

    def report_retained(self, purge: bool) -> None:
        self.calls.append("retained")

    def check_billing(self) -> None:
        self.calls.append("billing")


def test_destroy_rerun_skips_the_endpoint_and_the_stacks_already_gone() -> None:
    from whisper_build.workstation.deploy.plan import destroy_steps  # noqa: PLC0415

    commands: list[str] = []
    lines: list[str] = []
    session = DestroySession()
    steps = destroy_steps(load_config(), "c.yaml", False, "123456789012")
    cli.Runner(steps, session, lines.append, lambda argv: commands.append(" ".join(argv))).run()  # type: ignore[arg-type]
    assert commands == [] and session.calls == ["retained", "billing"]
    assert sum(line.strip() == "skipped: already done" for line in lines) == 2


def test_a_failing_step_prints_its_diagnosis_before_the_error() -> None:
    def fail(session: Any) -> None:
        raise aws.DeployError("boom")

    from whisper_build.workstation.deploy.plan import AwsCall  # noqa: PLC0415

    step = Step("serving", "t", "1 min", "", (AwsCall("x", fail),), diagnose=lambda s: ["pod-a: waiting: …"])
    lines: list[str] = []
    with pytest.raises(aws.DeployError, match="step 'serving' failed"):
        cli.Runner([step], object(), lines.append, lambda argv: None).run()  # type: ignore[arg-type]
    assert "    why: pod-a: waiting: …" in lines


def test_retained_resources_are_counted_per_deploy_destroy_cycle() -> None:
    found = [aws.Retained("kms-key", f"k{i}", "tagged") for i in range(5)]
    found += [aws.Retained("s3-bucket", f"log{i}", retained.ACCESS_LOG_WHY) for i in range(3)]
    found.append(aws.Retained("s3-bucket", "models", "model engines"))
    (line,) = retained.cycle_summary(found)
    assert line.startswith(
        "accumulated: 5 KMS key(s) = 5 USD a month (1 USD per key-month, https://aws.amazon.com/kms/pricing/)"
    )
    assert "3 access-log bucket(s), from about 3 deploy/destroy cycle(s); 2 of them before the latest" in line
    assert retained.cycle_summary([aws.Retained("s3-bucket", "models", "model engines")]) == []


# ---------------------------------------------------------------- account selection
class FakeBoto3:
    """boto3 stand-in whose STS says the credentials are for ``account`` (made before AWS_PROFILE is set)."""

    def __init__(self, account: str) -> None:
        self.sts = _client("sts")
        stub = Stubber(self.sts)
        stub.add_response("get_caller_identity", {"Account": account, "Arn": f"arn:aws:iam::{account}:user/me",
                                                  "UserId": "AIDA"})  # fmt: skip
        stub.activate()

    def client(self, service: str, region_name: str) -> Any:
        assert service == "sts"
        return self.sts

    def resource(self, service: str, region_name: str) -> Any:
        raise AssertionError("not needed")


def test_a_pinned_account_refuses_other_credentials_and_says_how_to_pick_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data["account"] = "111111111111"
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setattr(cli.prereqs, "check_all", lambda version: [])
    fake = FakeBoto3("222222222222")
    monkeypatch.setenv("AWS_PROFILE", "sandbox")
    lines: list[str] = []

    def no_commands(argv: Sequence[str]) -> None:
        raise AssertionError("nothing may run in the wrong account")

    code = cli.main(["deploy", "--config", str(path)], out=lines.append, run_command=no_commands,
                    boto3_module=fake)  # fmt: skip
    assert code == 2
    assert "deploy INTO account 222222222222, region us-east-1, as arn:aws:iam::222222222222:user/me " \
        "(AWS_PROFILE=sandbox)" in lines  # fmt: skip
    err = capsys.readouterr().err
    assert "the config pins account 111111111111 (account:) but your credentials (AWS_PROFILE=sandbox)" in err
    assert "AWS_PROFILE=<profile> make deploy" in err


# ---------------------------------------------------------------- make endpoint: the wait and its timeout
@pytest.fixture(autouse=True)
def _kubectl_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """make pods / make endpoint check kubectl and the AWS CLI first; here both are taken as installed."""
    monkeypatch.setattr(cli.prereqs, "check_aws_cli", lambda: [])
    monkeypatch.setattr(cli.prereqs, "check_kubectl", lambda version: [])


def _kubectl_main(argv: list[str], **kwargs: Any) -> int:
    """``cli.main`` of make pods / make endpoint with credentials of account 123456789012 (a Stubber STS)."""
    return cli.main(argv, boto3_module=FakeBoto3("123456789012"), **kwargs)


def test_endpoint_timeout_exits_1_with_what_to_check_and_how_to_resume(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    kubectl=lambda argv: json.dumps({"status": {}}), endpoint_wait_s=0)  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "the load balancer has no address after 0 s" in err  # the wait it really did
    assert f"kubectl --context {CONTEXT} -n whisper describe service whisper" in err
    assert f"kubectl --context {CONTEXT} -n kube-system logs deployment/aws-load-balancer-controller" in err
    assert "then resume: make endpoint CONFIG=config/default.yaml" in err
    status = {"status": {"loadBalancer": {"ingress": [{"hostname": "internal-k8s-x.elb.us-east-1.amazonaws.com"}]}}}
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    kubectl=lambda argv: json.dumps(status), endpoint_wait_s=0)  # fmt: skip
    assert code == 0 and "Whisper is serving." in "\n".join(lines)


# ---------------------------------------------------------------- make pods: expected wait vs real failure
def _preflight_message(model_dir: Path, capsys: pytest.CaptureFixture[str]) -> str:
    code = preflight.main(["--model-dir", str(model_dir), "--model", "large-v3-turbo", "--bucket", "b",
                           "--gpu-group", "g5", "--gpu-arch", "sm86", "--compute-capability", "8.6"])  # fmt: skip
    assert code == 1
    return capsys.readouterr().err


def _pod(name: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def _init_failed(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "initContainerStatuses": [{"name": "preflight", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 1, "message": message}}}],
    }  # fmt: skip


def test_pods_tell_the_expected_wait_from_a_real_preflight_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    waiting = _preflight_message(empty, capsys)
    assert "is empty: nothing is published for sm86" in waiting
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "current.json").write_text('{"version": "v9"}', encoding="utf-8")
    failed = _preflight_message(broken, capsys)
    assert "points at version 'v9'" in failed
    listing = {"items": [
        _pod("whisper-g5-a", _init_failed(waiting)),
        _pod("whisper-g6e-b", _init_failed(failed)),
        _pod("whisper-g6e-c", {"phase": "Pending", "initContainerStatuses": [
            {"name": "preflight", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}),
        _pod("whisper-g6e-d", {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "message": "0/2 nodes are available"}]}),
        _pod("whisper-g5-e", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
    ]}  # fmt: skip
    lines = pods.diagnose(json.dumps(listing))
    assert lines[0].startswith("whisper-g5-a: waiting: Init:Error, expected on a first deploy")
    assert "Preflight said: preflight FAILED: the model repository mounted at" in lines[0]
    assert lines[1].startswith("whisper-g6e-b: failed: preflight FAILED (a real mismatch")
    assert lines[2].startswith("whisper-g6e-c: waiting: ImagePullBackOff: the serving image is not in ECR yet")
    assert lines[3].startswith("whisper-g6e-d: waiting: Pending, not scheduled") and "0/2 nodes" in lines[3]
    assert lines[4] == "whisper-g5-e: ready: serving"
    assert lines[5].startswith("at least one pod has a real failure")

    out: list[str] = []
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps({"items": listing["items"][:1]}))  # fmt: skip
    assert code == 0 and out[-1].startswith("nothing has failed")
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps(listing))  # fmt: skip
    assert code == 1


def test_every_not_yet_published_phrase_is_a_real_preflight_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Guards the classifier against the preflight's wording drifting: each phrase comes from a real run."""
    seen = []
    empty = tmp_path / "e"
    empty.mkdir()
    seen.append(_preflight_message(empty, capsys))
    files = tmp_path / "f"
    files.mkdir()
    (files / "junk").write_text("x", encoding="utf-8")
    seen.append(_preflight_message(files, capsys))
    for engine in ("ctranslate2", "torch"):
        assert preflight.main(["--model-dir", str(empty), "--model", "large-v3-turbo", "--bucket", "b",
                               "--engine", engine, "--gpu-arch", "sm86"]) == 1  # fmt: skip
        seen.append(capsys.readouterr().err)
    for phrase in preflight.NOT_YET_PUBLISHED:
        assert any(phrase in message for message in seen), phrase
    assert all(pods.is_not_yet_published(message) for message in seen)


def test_pods_reads_only_the_serving_pods() -> None:
    code, lines = _dry_run(["pods", "--config", str(DEFAULT_CONFIG_PATH)])
    assert code == 0 and lines == [
        f"$ kubectl --context '{DRY_CONTEXT}' -n whisper get pods -l app.kubernetes.io/name=whisper -o json"
    ]


def test_a_preflight_that_passes_now_is_not_reported_from_its_previous_run() -> None:
    earlier = {"terminated": {"exitCode": 1, "message": "preflight FAILED: the model repository … is empty"}}
    passed = {"name": "preflight", "state": {"terminated": {"exitCode": 0, "message": "preflight ok"}},
              "lastState": earlier}  # fmt: skip
    running = {"name": "preflight", "state": {"running": {}}, "lastState": earlier}
    loading = {"phase": "Pending", "containerStatuses": [{"name": "triton", "state": {"running": {}}}]}
    for status in (passed, running):
        pod = _pod("whisper-g5-a", {**loading, "initContainerStatuses": [status]})
        assert pods.preflight_message(pod) is None
        assert pods.pod_state(pod) == ("starting", "phase Pending")
    restarting = {"name": "preflight", "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": earlier}
    assert (
        pods.preflight_message(_pod("p", {"initContainerStatuses": [restarting]})) == earlier["terminated"]["message"]
    )
    out: list[str] = []
    listing = {"items": [_pod("whisper-g5-a", {**loading, "initContainerStatuses": [passed]})]}
    code = _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append,
                    kubectl=lambda argv: json.dumps(listing))  # fmt: skip
    assert code == 0 and out[0] == "whisper-g5-a: starting: phase Pending"


def test_a_skip_check_that_fails_on_expired_credentials_says_to_log_in_and_re_run() -> None:
    from whisper_build.workstation.deploy.plan import destroy_steps  # noqa: PLC0415

    eks = _client("eks")
    stub = Stubber(eks)
    stub.add_client_error("describe_cluster", "ExpiredTokenException", "The security token included in the "
                          "request is expired", expected_params={"name": "whisper-hyperpod"})  # fmt: skip
    lines: list[str] = []
    session = _session({"eks": eks}, lines)
    steps = destroy_steps(load_config(), "c.yaml", False, "123456789012")
    with stub, pytest.raises(aws.DeployError) as raised:
        cli.Runner(steps, session, lines.append, lambda argv: None).run()
    message = str(raised.value)
    assert message.startswith("step 'endpoint': could not check whether EKS cluster whisper-hyperpod does not exist")
    assert "ExpiredTokenException" in message and "aws sso login" in message and "destroy included" in message


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


# ---------------------------------------------------------------- kubectl: this config's context, clear failures
def _fake_kubectl(bin_dir: Path, script: str) -> Path:
    """A ``kubectl`` on ``PATH`` that appends its argv to ``calls`` and then runs ``script``."""
    bin_dir.mkdir(exist_ok=True)
    calls = bin_dir / "calls"
    path = bin_dir / "kubectl"
    path.write_text(f'#!/bin/sh\necho "$*" >> {calls}\n{script}\n', encoding="utf-8")
    path.chmod(0o755)
    return calls


def test_make_pods_reads_this_configs_cluster_and_fails_when_kubectl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    calls = _fake_kubectl(bin_dir, """echo '{"items": []}'""")
    out: list[str] = []
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 0
    assert calls.read_text(encoding="utf-8").split() == [
        "--context", CONTEXT, "-n", "whisper", "get", "pods", "-l", "app.kubernetes.io/name=whisper", "-o", "json"
    ]  # fmt: skip
    assert out == ["no pods in namespace whisper yet"]

    _fake_kubectl(bin_dir, "echo 'error: You must be logged in to the server (Unauthorized)' >&2; exit 1")
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 1
    err = capsys.readouterr().err
    assert "error: could not read the pods: kubectl failed: error: You must be logged in to the server" in err
    assert "make kubeconfig CONFIG=" in err and "aws sso login" in err

    _fake_kubectl(bin_dir, "sleep 5")
    monkeypatch.setattr(kube, "KUBECTL_TIMEOUT_SECONDS", 0.3)
    assert _kubectl_main(["pods", "--config", str(DEFAULT_CONFIG_PATH)], out=out.append) == 1
    assert "kubectl did not answer within 0.3 s" in capsys.readouterr().err


def test_make_pods_and_endpoint_check_kubectl_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli.prereqs, "check_aws_cli", check_aws_cli)
    monkeypatch.setattr(cli.prereqs, "check_kubectl", check_kubectl)
    monkeypatch.setenv("PATH", str(tmp_path))  # neither kubectl nor aws

    def never(argv: Sequence[str]) -> str:
        raise AssertionError("kubectl must not be called before the check")

    for action in ("pods", "endpoint"):
        assert cli.main([action, "--config", str(DEFAULT_CONFIG_PATH)], kubectl=never, endpoint_wait_s=0) == 2
        err = capsys.readouterr().err
        assert "missing prerequisites" in err and "kubectl not found on PATH" in err and "aws not found" in err


def test_make_endpoint_says_why_kubectl_gave_no_address(capsys: pytest.CaptureFixture[str]) -> None:
    def missing(argv: Sequence[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", "kubectl")

    assert _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], kubectl=missing, endpoint_wait_s=900) == 1
    assert "cannot run kubectl" in capsys.readouterr().err  # at once, not after the 15 min wait

    def unauthorized(argv: Sequence[str]) -> str:
        raise subprocess.CalledProcessError(1, list(argv), "", "error: You must be logged in to the server")

    lines: list[str] = []
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                         kubectl=unauthorized, endpoint_wait_s=0)  # fmt: skip
    assert code == 1
    assert "could not read the load balancer's address: kubectl failed: error: You must be logged in" in (
        capsys.readouterr().err
    )
    timeout = subprocess.TimeoutExpired(["kubectl"], 60)
    assert "did not answer within 60 s" in kube.describe_error(timeout)


# ---------------------------------------------------------------- the preflight's verdict line survives the cut
def _fallback_to_logs(log: str) -> str:
    """What ``terminationMessagePolicy: FallbackToLogsOnError`` keeps: the last 80 lines, at most 2048 bytes."""
    tail = "\n".join(log.splitlines()[-80:])
    return tail.encode()[-2048:].decode(errors="ignore")


def test_a_long_preflight_message_is_classified_by_its_verdict_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fixes = "".join(f"\n  fix step {i}: aws s3 cp … s3://bucket/models/large-v3-turbo/sm86/ --region us-east-1"
                    for i in range(60))  # fmt: skip
    cases = {  # first line → (what the real check raises for it, expected verdict)
        "the model repository mounted at /models is empty: nothing is published for sm86": (
            preflight.NotYetPublished, "waiting"),
        "GPU architecture mismatch: the engine was built for sm89 but this node's GPU is sm86": (
            preflight.PreflightError, "failed"),
    }  # fmt: skip
    termination_log = tmp_path / "termination-log"
    for first_line, (error, expected) in cases.items():

        def fail(target: Any, compute_capability: Any, message: str = first_line + fixes, error: Any = error) -> Any:
            raise error(message)

        monkeypatch.setattr(preflight, "run_preflight", fail)
        termination_log.write_text("", encoding="utf-8")  # the kubelet provides the file
        args = ["--model-dir", str(tmp_path), "--model", "large-v3-turbo", "--bucket", "b", "--gpu-arch", "sm86",
                "--termination-log", str(termination_log)]  # fmt: skip
        assert preflight.main(args) == 1
        log = capsys.readouterr().err
        assert len(log.encode()) > 4096 and first_line not in _fallback_to_logs(log)  # the first line is cut off
        written = termination_log.read_text(encoding="utf-8")
        assert len(written.encode()) <= preflight.TERMINATION_MESSAGE_BYTES and written.startswith("preflight FAILED")
        for message in (_fallback_to_logs(log), written):
            verdict, _ = pods.pod_state(_pod("whisper-g5-a", _init_failed(message)))
            assert verdict == expected, (first_line, message[-200:])
    (tmp_path / "absent").mkdir()
    assert preflight.main([*args[:-1], str(tmp_path / "absent" / "termination-log")]) == 1
    assert not (tmp_path / "absent" / "termination-log").exists()  # written only where Kubernetes provides it


def test_the_inference_operators_worker_runs_the_preflight_in_its_main_container(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    message = _preflight_message(empty, capsys)
    assert message.rstrip().endswith("preflight-verdict: waiting-for-publish")
    worker = {"phase": "Running", "containerStatuses": [
        {"name": "worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 1, "message": message}}}]}  # fmt: skip
    verdict, explanation = pods.pod_state(_pod("whisper-abc", worker))
    assert verdict == "waiting" and "Preflight said: preflight FAILED: the model repository" in explanation
    crashing = {"phase": "Running", "containerStatuses": [
        {"name": "worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
         "lastState": {"terminated": {"exitCode": 139, "message": "Segmentation fault"}}}]}  # fmt: skip
    assert pods.pod_state(_pod("whisper-abc", crashing))[0] == "failed"
    assert "keeps crashing" in pods.pod_state(_pod("whisper-abc", crashing))[1]


# ---------------------------------------------------------------- serving.target inference_operator
OPERATOR_CONFIG = DEFAULT_CONFIG_PATH.parent / "examples" / "inference-operator.yaml"


def test_destroy_of_the_operator_target_deletes_its_inference_endpoint_configs_and_checks_its_endpoint() -> None:
    code, lines = _dry_run(["destroy", "--config", str(OPERATOR_CONFIG)])
    assert code == 0
    commands = [line.strip() for line in lines if line.strip().startswith("$ ")]
    assert (
        f"$ kubectl --context '{DRY_CONTEXT}' -n whisper delete inferenceendpointconfigs.inference.sagemaker.aws."
        "amazon.com -l app.kubernetes.io/name=whisper --ignore-not-found --wait=true --timeout=10m" in commands
    )
    assert not any("service/whisper" in command for command in commands)  # the operator target has no Service
    text = "\n".join(lines)
    assert "aws sagemaker describe-endpoint --endpoint-name whisper-hyperpod --region us-east-1" in text
    _, deployments = _dry_run(["destroy", "--config", str(DEFAULT_CONFIG_PATH)])
    assert "describe-endpoint" not in "\n".join(deployments)


@mock_aws
def test_billing_check_of_the_operator_target_lists_its_sagemaker_endpoint() -> None:
    sagemaker = _client("sagemaker")
    lines: list[str] = []
    session = cli.AwsSession(load_config(OPERATOR_CONFIG), "123456789012", "arn:aws:iam::123456789012:user/me",
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


def test_make_pods_and_endpoint_of_the_operator_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _dry_run(["pods", "--config", str(OPERATOR_CONFIG)])
    assert code == 0 and lines == [f"$ kubectl --context '{DRY_CONTEXT}' -n whisper get pods -o json"]
    build = {"metadata": {"name": "engine-sm86-x", "ownerReferences": [{"kind": "Job", "name": "engine-sm86"}]},
             "status": {"phase": "Running"}}  # fmt: skip
    ready = _pod("whisper-abc", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    assert pods.diagnose(json.dumps({"items": [build, ready]})) == ["whisper-abc: ready: serving", "every pod is ready"]

    def never(argv: Sequence[str]) -> str:
        raise AssertionError("the operator target has no Service of ours to read")

    out: list[str] = []
    assert _kubectl_main(["endpoint", "--config", str(OPERATOR_CONFIG)], out=out.append, kubectl=never) == 0
    text = "\n".join(out)
    assert "aws sagemaker describe-endpoint --endpoint-name whisper-hyperpod --region us-east-1" in text
    assert "--sagemaker-endpoint whisper-hyperpod --region us-east-1" in text
    assert f"kubectl --context {CONTEXT} -n whisper describe inferenceendpointconfigs" in text


# ---------------------------------------------------------------- the controller's load balancers (destroy's endpoint step)
def _controller_network(ec2: Any, elbv2: Any) -> tuple[str, list[str]]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"us-east-1{z}")["Subnet"]
               ["SubnetId"] for i, z in ((1, "a"), (2, "b"))]  # fmt: skip
    return vpc, subnets


LBC_TAGS = [{"Key": teardown.LBC_CLUSTER_TAG, "Value": "whisper-hyperpod"},
            {"Key": "service.k8s.aws/stack", "Value": "whisper/whisper"}]  # fmt: skip


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


@pytest.mark.parametrize(
    ("region", "partition"), [("us-east-1", "aws"), ("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")]
)
def test_the_kubectl_context_is_the_cluster_arn_in_the_regions_partition(region: str, partition: str) -> None:
    config = load_config().model_copy(update={"region": region})
    assert kube.context_name(config, "123456789012") == (
        f"arn:{partition}:eks:{region}:123456789012:cluster/{names.cluster_name(config)}"
    )
