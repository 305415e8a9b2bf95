"""The workloads stack: AWS Load Balancer Controller, KEDA with its AMP identity, and the charts
applied in dependency order. Synthesized once for the module (cdk-nag on, cfn-lint clean)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from cfnlint.api import ManualArgs, lint
from k8s_support import three_groups

from stacks.assembly import cdk_json_context
from stacks.nag import enable_nag
from stacks.observability_stack import AMP_QUERY_ACTIONS
from stacks.storage_stack import SERVING_IMAGE_REPOSITORY
from stacks.whisper_app import add_whisper_stacks, stack_environment
from stacks.workloads_stack import KEDA_CHART_VERSION, WorkloadsStack

pytestmark = pytest.mark.slow

WORKSPACE_ID = "ws-12345678-abcd-1234-abcd-123456789012"
WORKSPACE_ARN = f"arn:aws:aps:us-east-1:123456789012:workspace/{WORKSPACE_ID}"
MANIFEST = "Custom::AWSCDK-EKS-KubernetesResource"


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory):
    config = three_groups()
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")), context=cdk_json_context())
    stacks = add_whisper_stacks(app, config)
    workloads = WorkloadsStack(
        app,
        "Workloads",
        config=config,
        cluster_stack=stacks.cluster,
        serving_repository_name=f"{config.project_name}/{SERVING_IMAGE_REPOSITORY}",
        amp_workspace_id=WORKSPACE_ID,
        amp_workspace_arn=WORKSPACE_ARN,
        env=stack_environment(config),
    )
    enable_nag(app)
    assembly = app.synth()  # raises on any unacknowledged cdk-nag finding
    return config, stacks, workloads, assembly.get_stack_by_name(workloads.stack_name).template


def _logical_id(template: dict, type_: str, needle: str) -> str:
    (found,) = [k for k, v in template["Resources"].items() if v["Type"] == type_ and needle in json.dumps(v)]
    return found


def test_cfn_lint_reports_nothing(synthesized) -> None:
    config, _, _, template = synthesized
    assert [str(m) for m in lint(json.dumps(template), config=ManualArgs(regions=[config.region]))] == []


def test_keda_is_pinned_and_may_query_the_workspace_through_pod_identity(synthesized) -> None:
    _, _, _, template = synthesized
    assertions = Template.from_json(template)
    assertions.has_resource_properties(
        "Custom::AWSCDK-EKS-HelmChart",
        {
            "Chart": "keda",
            "Repository": "https://kedacore.github.io/charts",
            "Version": KEDA_CHART_VERSION,
            "Namespace": "keda",
            "CreateNamespace": True,
        },
    )
    assertions.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation",
        {
            "Namespace": "keda",
            "ServiceAccount": "keda-operator",
            "RoleArn": {"Fn::GetAtt": [Match.string_like_regexp("KedaOperatorRole"), "Arn"]},
        },
    )
    assertions.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                # sorted: the aws-iam:minimizePolicies flag (cdk.json) renders actions in order
                "Statement": [{"Action": sorted(AMP_QUERY_ACTIONS), "Effect": "Allow", "Resource": WORKSPACE_ARN}]
            },
            "Roles": [{"Ref": Match.string_like_regexp("KedaOperatorRole")}],
        },
    )
    assertions.has_resource_properties(
        "AWS::IAM::Role",
        {
            "AssumeRolePolicyDocument": {
                "Statement": [
                    {
                        "Action": ["sts:AssumeRole", "sts:TagSession"],
                        "Effect": "Allow",
                        "Principal": {"Service": "pods.eks.amazonaws.com"},
                    }
                ]
            },
            "Description": Match.string_like_regexp("KEDA operator"),
        },
    )


def test_charts_are_applied_after_what_they_need(synthesized) -> None:
    _, stacks, workloads, template = synthesized
    resources = template["Resources"]
    serving = _logical_id(template, MANIFEST, "s3.csi.aws.com")
    endpoint = _logical_id(template, MANIFEST, "aws-load-balancer-nlb-target-type")
    autoscaling = _logical_id(template, MANIFEST, "ScaledObject")
    alb = _logical_id(template, "Custom::AWSCDK-EKS-HelmChart", "aws-load-balancer-controller")
    keda = _logical_id(template, "Custom::AWSCDK-EKS-HelmChart", "kedacore")
    assert {serving, alb} <= set(resources[endpoint]["DependsOn"])
    assert {serving, keda} <= set(resources[autoscaling]["DependsOn"])
    # the HyperPod cluster and the Mountpoint driver are in the cluster stack: a stack dependency
    assert stacks.cluster in workloads.dependencies
    # the GPU metrics exporters (a chart of their own) are applied too, one DaemonSet per group, behind
    # their namespace's default deny + scrape ingress
    gpu_metrics = json.loads(resources[_logical_id(template, MANIFEST, "dcgm-exporter")]["Properties"]["Manifest"])
    kinds = [m["kind"] for m in gpu_metrics]
    assert kinds == ["Namespace", "NetworkPolicy", "NetworkPolicy", "DaemonSet", "DaemonSet", "DaemonSet"]


def test_manifests_carry_the_stack_values_not_placeholders(synthesized) -> None:
    config, _, _, template = synthesized
    text = json.dumps(template)
    assert "REPLACE-WITH" not in text
    assert f"workspaces/{WORKSPACE_ID}" in text
    # the image is the storage stack's ECR repository (by name), tagged with the configured tag
    assert f"/{config.project_name}/{SERVING_IMAGE_REPOSITORY}:{config.serving.image_tag}" in text
