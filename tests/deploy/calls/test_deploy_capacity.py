"""``make deploy``'s capacity step (:mod:`whisper_build.deploy.capacity`): offerings and quotas against
moto, or botocore's Stubber where moto lacks the API (Service Quotas' list calls)."""

from __future__ import annotations

import re
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber
from deploy_helpers import (
    REPO_ROOT,
    _client,
)
from moto import mock_aws

from settings import DEFAULT_CONFIG_PATH, load_config, parse_config
from whisper_build.deploy import (
    capacity,
    cli,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


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
    doc = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
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


def test_every_type_of_a_priority_list_is_checked_for_offering_and_quota() -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text())
    data["gpu_groups"][0].pop("instance_type")
    data["gpu_groups"][0].update(instance_types=["ml.g5.2xlarge", "ml.g5.4xlarge"], instance_count=2)
    config = parse_config(data, "test")
    assert capacity.ec2_types(config)[1:] == ["g5.2xlarge", "g5.4xlarge", "g6e.2xlarge"]
    needs = {need.name: need.needed for need in capacity.quota_needs(config) if need.service_code == "sagemaker"}
    # a fallback type may have to carry the whole group
    assert needs == {
        "ml.g5.2xlarge for cluster usage": 2,
        "ml.g5.4xlarge for cluster usage": 2,
        "ml.g6e.2xlarge for cluster usage": 1,
    }
