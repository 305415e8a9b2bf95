"""Helpers shared by the deploy tool's tests: boto3 clients for moto/Stubber, dry runs, stand-ins.

Imported by name (``tests/deploy/conftest.py`` puts its folder on ``sys.path``, as pytest does for every conftest).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import yaml
from botocore.stub import Stubber

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.deploy import aws_session, cli, teardown
from whisper_build.paths import REPO_ROOT

DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"
REGION = "us-east-1"
DRY_CONTEXT = "arn:aws:eks:us-east-1:<account>:cluster/whisper-hyperpod"
CONTEXT = "arn:aws:eks:us-east-1:123456789012:cluster/whisper-hyperpod"
OPERATOR_CONFIG = DEFAULT_CONFIG_PATH.parent / "examples" / "inference-operator.yaml"


def _client(service: str, region: str = REGION) -> Any:
    return boto3.client(service, region_name=region, aws_access_key_id="x", aws_secret_access_key="x")


def _config(tmp_path: Path, **changes: Any) -> Path:
    """The default config with top-level ``changes``; ``engines={"g6e": "ctranslate2"}`` sets serving engines."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    for group in data["gpu_groups"]:
        group["serving_engine"] = changes.get("engines", {}).get(group["name"], "tensorrt_llm")
    changes.pop("engines", None)
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


class NoBoto:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError("a dry run must not touch AWS")


def _dry_run_lines(action: str, config: Path, *extra: str, expect: int = 0) -> list[str]:
    """``cli.main`` with ``--dry-run``: its lines; fails when it touches AWS, runs a command or exits otherwise."""
    lines: list[str] = []

    def no_commands(argv: Sequence[str]) -> None:
        raise AssertionError(f"a dry run must not run {argv}")

    code = cli.main([action, "--config", str(config), "--dry-run", *extra], out=lines.append,
                    run_command=no_commands, boto3_module=NoBoto())  # fmt: skip
    assert code == expect
    return lines


def _dry_run_argv(argv: list[str]) -> tuple[int, list[str]]:
    """``cli.main(argv + --dry-run)``: its exit status and lines."""
    lines: list[str] = []
    code = cli.main([*argv, "--dry-run"], out=lines.append, run_command=lambda a: None, boto3_module=object())
    return code, lines


def _commands(lines: list[str]) -> list[str]:
    return [line.strip().removeprefix("$ ") for line in lines if line.strip().startswith("$ ")]


def _steps(lines: list[str]) -> list[str]:
    return [line.split(":")[0].split("] ")[1] for line in lines if line.startswith("[")]


def _session(clients: dict[str, Any], lines: list[str], kubectl: Any = None) -> aws_session.AwsSession:
    return aws_session.AwsSession(load_config(), "123456789012", "arn:aws:iam::123456789012:user/me",
                                  lambda service, region_name: clients.get(service) or _client(service),
                                  lambda service, region_name: boto3.resource(service, region_name=region_name),
                                  lines.append, kubectl)  # fmt: skip


HYPERPOD_NOT_FOUND = "hyperpod: HyperPod cluster whisper-hyperpod-hp: not found (step 'stacks' creates it)"
"""make pods' HyperPod line for :class:`FakeBoto3`'s default SageMaker (no cluster yet)."""


class FakeBoto3:
    """boto3 stand-in whose STS says the credentials are for ``account`` (made before AWS_PROFILE is set).

    ``sagemaker``: the SageMaker client make pods reads the HyperPod cluster with; by default a Stubber whose
    ``DescribeCluster`` answers ``ResourceNotFound`` (no cluster yet).
    """

    def __init__(self, account: str, sagemaker: Any = None) -> None:
        self.sts = _client("sts")
        stub = Stubber(self.sts)
        stub.add_response("get_caller_identity", {"Account": account, "Arn": f"arn:aws:iam::{account}:user/me",
                                                  "UserId": "AIDA"})  # fmt: skip
        stub.activate()
        if sagemaker is None:
            sagemaker = _client("sagemaker")
            missing = Stubber(sagemaker)
            missing.add_client_error("describe_cluster", "ResourceNotFound", "Cluster not found")
            missing.activate()
        self.sagemaker = sagemaker

    def client(self, service: str, region_name: str) -> Any:
        assert service in ("sts", "sagemaker"), service
        return self.sts if service == "sts" else self.sagemaker

    def resource(self, service: str, region_name: str) -> Any:
        raise AssertionError("not needed")


def _kubectl_main(argv: list[str], sagemaker: Any = None, **kwargs: Any) -> int:
    """``cli.main`` of make pods / make endpoint with credentials of account 123456789012 (a Stubber STS)."""
    return cli.main(argv, boto3_module=FakeBoto3("123456789012", sagemaker), **kwargs)


def _pod(name: str, status: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": status}


def _init_failed(message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "initContainerStatuses": [{"name": "preflight", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 1, "message": message}}}],
    }  # fmt: skip


def _missing(stub: Stubber, stack: str) -> None:
    stub.add_client_error("describe_stacks", "ValidationError", f"Stack with id {stack} does not exist",
                          expected_params={"StackName": stack})  # fmt: skip


def _status(stub: Stubber, stack: str, status: str) -> None:
    stub.add_response(
        "describe_stacks",
        {"Stacks": [{"StackName": stack, "StackStatus": status, "CreationTime": "2026-11-30T00:00:00Z"}]},
        {"StackName": stack},
    )


def _controller_network(ec2: Any, elbv2: Any) -> tuple[str, list[str]]:
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24", AvailabilityZone=f"us-east-1{z}")["Subnet"]
               ["SubnetId"] for i, z in ((1, "a"), (2, "b"))]  # fmt: skip
    return vpc, subnets


LBC_TAGS = [{"Key": teardown.LBC_CLUSTER_TAG, "Value": "whisper-hyperpod"},
            {"Key": "service.k8s.aws/stack", "Value": "whisper/whisper"}]  # fmt: skip
