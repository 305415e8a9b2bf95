"""The AWS calls of :mod:`whisper_build.deploy.aws` against botocore's Stubber and moto: CodeBuild builds,
ECR images, EKS access entries."""

from __future__ import annotations

import json

import pytest
from botocore.stub import Stubber
from deploy_helpers import (
    _client,
)
from moto import mock_aws

from whisper_build.deploy import (
    aws,
)


def test_run_builds_waits_for_every_build_and_reports_failures() -> None:
    codebuild = _client("codebuild")
    stub = Stubber(codebuild)
    running = {"id": "a:1", "currentPhase": "BUILD", "buildComplete": False, "buildStatus": "IN_PROGRESS"}
    stub.add_response("list_builds_for_project", {}, {"projectName": "a", "sortOrder": "DESCENDING"})
    stub.add_response("start_build", {"build": {"id": "a:1"}}, {"projectName": "a"})
    stub.add_response("list_builds_for_project", {"ids": ["b:0"]}, {"projectName": "b", "sortOrder": "DESCENDING"})
    stub.add_response("batch_get_builds", {"builds": [{"id": "b:0", "buildStatus": "SUCCEEDED"}]}, {"ids": ["b:0"]})
    stub.add_response("start_build", {"build": {"id": "b:1"}}, {"projectName": "b"})
    stub.add_response("batch_get_builds", {"builds": [running, {**running, "id": "b:1", "currentPhase": "PROVISIONING"}]},
                      {"ids": ["a:1", "b:1"]})  # fmt: skip
    stub.add_response(
        "batch_get_builds",
        {"builds": [{**running, "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "SUCCEEDED"},
                    {**running, "id": "b:1", "currentPhase": "BUILD"}]},
        {"ids": ["a:1", "b:1"]},
    )  # fmt: skip
    stub.add_response(
        "batch_get_builds",
        {"builds": [{"id": "b:1", "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "FAILED",
                     "logs": {"deepLink": "https://console/logs/b"}}]},
        {"ids": ["b:1"]},
    )  # fmt: skip
    reports: list[str] = []
    sleeps: list[float] = []
    with stub, pytest.raises(aws.DeployError) as raised:
        aws.run_builds(codebuild, ["a", "b"], reports.append, poll_s=7, sleep=sleeps.append)
    stub.assert_no_pending_responses()
    assert str(raised.value) == "CodeBuild project b ended FAILED (build b:1, logs: https://console/logs/b)"
    assert reports == ["a: build", "b: provisioning", "a: completed", "b: build", "b: completed"]
    assert sleeps == [7, 7]


def test_run_builds_waits_for_a_build_still_running_instead_of_starting_another() -> None:
    codebuild = _client("codebuild")
    stub = Stubber(codebuild)
    stub.add_response("list_builds_for_project", {"ids": ["img:7", "img:6"]},
                      {"projectName": "img", "sortOrder": "DESCENDING"})  # fmt: skip
    stub.add_response(
        "batch_get_builds", {"builds": [{"id": "img:7", "buildStatus": "IN_PROGRESS"}]}, {"ids": ["img:7"]}
    )
    done = {"id": "img:7", "currentPhase": "COMPLETED", "buildComplete": True, "buildStatus": "SUCCEEDED"}
    stub.add_response("batch_get_builds", {"builds": [done]}, {"ids": ["img:7"]})
    reports: list[str] = []
    with stub:
        (result,) = aws.run_builds(codebuild, ["img"], reports.append, sleep=lambda _: None)
    stub.assert_no_pending_responses()  # no start_build
    assert result.build_id == "img:7" and reports[0] == "img: build img:7 already running, waiting for it"


def test_image_exists_reads_ecr_errors() -> None:
    ecr = _client("ecr")
    stub = Stubber(ecr)
    params = {"repositoryName": "p/whisper-serving", "imageIds": [{"imageTag": "0.1.0"}]}
    stub.add_response("describe_images", {"imageDetails": [{"imageTags": ["0.1.0"]}]}, params)
    stub.add_client_error("describe_images", "ImageNotFoundException", expected_params=params)
    stub.add_client_error("describe_images", "RepositoryNotFoundException", expected_params=params)
    stub.add_client_error("describe_images", "AccessDeniedException", expected_params=params)
    with stub:
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is True
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is False
        assert aws.image_exists(ecr, "p/whisper-serving", "0.1.0") is False
        with pytest.raises(aws.ClientError, match="AccessDenied"):
            aws.image_exists(ecr, "p/whisper-serving", "0.1.0")


def test_access_entry_is_created_once_and_scoped_to_the_namespace() -> None:
    eks = _client("eks")
    stub = Stubber(eks)
    role = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_1"
    associate = {
        "clusterName": "c", "principalArn": role, "policyArn": aws.EKS_NAMESPACE_ADMIN_POLICY,
        "accessScope": {"type": "namespace", "namespaces": ["whisper"]},
    }  # fmt: skip
    stub.add_response("create_access_entry", {}, {"clusterName": "c", "principalArn": role})
    stub.add_response("associate_access_policy", {}, associate)
    stub.add_client_error("create_access_entry", "ResourceInUseException")
    stub.add_response("associate_access_policy", {}, associate)
    with stub:
        assert aws.ensure_access_entry(eks, "c", role, "whisper") is True
        assert aws.ensure_access_entry(eks, "c", role, "whisper") is False
    stub.assert_no_pending_responses()


@mock_aws
def test_access_entry_principal_keeps_the_role_path() -> None:
    iam = _client("iam")
    trust = json.dumps({"Version": "2012-10-17", "Statement": []})
    iam.create_role(RoleName="AWSReservedSSO_Admin_1", Path="/aws-reserved/sso.amazonaws.com/",
                    AssumeRolePolicyDocument=trust)  # fmt: skip
    session_arn = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Admin_1/me@example.com"
    principal = aws.access_entry_principal(session_arn, iam)
    assert principal.endswith(":role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_1")
    user = "arn:aws:iam::123456789012:user/ci"
    assert aws.access_entry_principal(user, iam) == user
