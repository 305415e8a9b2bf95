"""The observability stack synthesizes clean under cdk-nag (AwsSolutions) and cfn-lint, and its
scraper, rules and dashboard come from observability/ (one source of truth)."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match, Template
from cfnlint.api import ManualArgs, lint

from observability import cost_queries, dashboard, rules, scrape_config
from settings import DEFAULT_CONFIG_PATH, load_config
from stacks.nag import enable_nag
from stacks.observability_stack import ObservabilityStack

CLUSTER_ARN = "arn:aws:eks:us-east-1:123456789012:cluster/whisper-hyperpod"
SUBNETS = ["subnet-0123456789abcdef0", "subnet-0123456789abcdef1"]
SECURITY_GROUP = "sg-0123456789abcdef0"


def _synth(config, tmp_path, subnets=SUBNETS) -> tuple[ObservabilityStack, dict]:
    app = cdk.App(outdir=str(tmp_path))
    stack = ObservabilityStack(
        app,
        "Observability",
        config=config,
        cluster_arn=CLUSTER_ARN,
        subnet_ids=subnets,
        security_group_id=SECURITY_GROUP,
        env=cdk.Environment(region=config.region),
    )
    enable_nag(app)
    assembly = app.synth()  # raises ValidationFailed on any unacknowledged cdk-nag finding
    return stack, assembly.get_stack_by_name(stack.stack_name).template


@pytest.fixture(scope="module")
def config():
    return load_config(DEFAULT_CONFIG_PATH)


@pytest.fixture(scope="module")
def synthesized(config, tmp_path_factory):
    return _synth(config, tmp_path_factory.mktemp("cdk.out"))


def test_cfn_lint_reports_nothing(synthesized, config):
    _, template = synthesized
    matches = lint(json.dumps(template), config=ManualArgs(regions=[config.region]))
    assert [str(m) for m in matches] == []


def test_scraper_uses_the_generated_config_and_two_subnets(synthesized, config):
    _, template = synthesized
    Template.from_json(template).has_resource_properties(
        "AWS::APS::Scraper",
        {
            "Source": {
                "EksConfiguration": {
                    "ClusterArn": CLUSTER_ARN,
                    "SubnetIds": SUBNETS,
                    "SecurityGroupIds": [SECURITY_GROUP],
                }
            },
            "ScrapeConfiguration": {"ConfigurationBlob": scrape_config.scrape_config_yaml(config)},
            "Destination": {"AmpConfiguration": {"WorkspaceArn": Match.any_value()}},
        },
    )


def test_rule_groups_are_the_generated_rules(synthesized, config):
    _, template = synthesized
    groups = [g.name for g in config.gpu_groups]
    Template.from_json(template).has_resource_properties(
        "AWS::APS::RuleGroupsNamespace",
        {
            "Data": rules.rules_yaml(
                groups,
                config.observability.scrape_interval_seconds,
                cost_queries.recording_rules(cost_queries.cost_groups(config)),
            )
        },
    )


def test_grafana_workspace_with_role_allowed_to_query_amp(synthesized):
    _, template = synthesized
    t = Template.from_json(template)
    t.has_resource_properties(
        "AWS::Grafana::Workspace",
        {
            "AccountAccessType": "CURRENT_ACCOUNT",
            "AuthenticationProviders": ["AWS_SSO"],
            "PermissionType": "CUSTOMER_MANAGED",
            "RoleArn": Match.any_value(),
        },
    )
    t.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with([Match.object_like({"Action": Match.array_with(["aps:QueryMetrics"])})])
            }
        },
    )


def test_dashboard_custom_resource_carries_the_generated_dashboard(synthesized, config):
    _, template = synthesized
    Template.from_json(template).has_resource_properties(
        "Custom::GrafanaDashboard",
        {
            "DashboardJson": dashboard.dashboard_json(config),
            "DatasourceUid": dashboard.DATASOURCE_UID,
            "PrometheusUrl": Match.any_value(),
        },
    )


def test_query_url_output_is_the_workspace_url_without_api_suffix(synthesized, config):
    stack, template = synthesized
    workspace = stack.resolve(stack.get_logical_id(stack.workspace))
    expected = {
        "Fn::Join": [
            "",
            [
                f"https://aps-workspaces.{config.region}.amazonaws.com/workspaces/",
                {"Fn::GetAtt": [workspace, "WorkspaceId"]},
            ],
        ]
    }
    assert stack.resolve(stack.prometheus_query_url) == expected
    assert template["Outputs"]["PrometheusQueryUrl"]["Value"] == expected


def test_grafana_can_be_turned_off(config, tmp_path):
    off = config.model_copy(update={"observability": config.observability.model_copy(update={"grafana": False})})
    stack, template = _synth(off, tmp_path)
    assert stack.grafana_workspace is None
    types = {r["Type"] for r in template["Resources"].values()}
    assert "AWS::Grafana::Workspace" not in types and "Custom::GrafanaDashboard" not in types
    assert "AWS::APS::Scraper" in types


def test_one_subnet_is_refused(config, tmp_path):
    with pytest.raises(ValueError, match="two subnets"):
        _synth(config, tmp_path, subnets=SUBNETS[:1])
