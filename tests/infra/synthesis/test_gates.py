"""Gates over every synthesized template of the default and the three-group config: cfn-lint with
zero errors/warnings/informational findings (ignores only in .cfnlintrc) and cdk-nag AwsSolutions
with zero unacknowledged findings. New stacks are covered automatically: the gates iterate over
every stack in the cloud assembly."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3
from cdk_assembly import CONFIGS, synthesized

from stacks.gates import read_nag_findings, run_cfn_lint, stack_templates
from stacks.nag import acknowledge, enable_nag, nag_string

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_cfn_lint_reports_nothing(config_name: str) -> None:
    result = synthesized(CONFIGS[config_name])
    assert len(result.templates) >= 3, result.templates
    findings = run_cfn_lint(list(result.templates.values()))
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_cdk_nag_reports_nothing_unacknowledged(config_name: str) -> None:
    result = synthesized(CONFIGS[config_name])
    findings = read_nag_findings(result.outdir)
    assert findings == [], "\n".join(map(str, findings))
    assert result.error is None


def test_gates_see_stacks_inside_stages(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path))
    cdk.Stack(app, "Top")
    cdk.Stack(cdk.Stage(app, "Prod"), "Nested")
    templates = stack_templates(app.synth())
    assert set(templates) == {"Top", "Prod/Nested"}
    assert all(path.is_file() for path in templates.values())


def test_cfn_lint_gate_catches_a_broken_template(tmp_path: Path) -> None:
    template = tmp_path / "Broken.template.json"
    template.write_text(
        json.dumps({"Resources": {"Bucket": {"Type": "AWS::S3::Bucket", "Properties": {"BucketNam": "x"}}}}),
        encoding="utf-8",
    )
    findings = run_cfn_lint([template])
    assert [f.rule for f in findings] == ["E3002"]
    assert findings[0].location == "Broken.template.json:1"


def test_cdk_nag_gate_catches_an_unencrypted_transport_bucket(tmp_path: Path) -> None:
    app = cdk.App(outdir=str(tmp_path), context={"@aws-cdk/core:validationReportJson": True})
    stack = cdk.Stack(app, "Probe")
    s3.Bucket(stack, "Plain")
    enable_nag(app)
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    rules = {f.rule for f in read_nag_findings(tmp_path)}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules


def test_acknowledgement_needs_a_specific_reason() -> None:
    stack = cdk.Stack(cdk.App(), "Probe")
    with pytest.raises(ValueError, match="needs a specific reason"):
        acknowledge(stack, "AwsSolutions-S1", "not needed")


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("arn:aws:s3:::b/*", "arn:aws:s3:::b/*"),
        ({"Ref": "AWS::AccountId"}, "<AWS::AccountId>"),
        ({"Fn::GetAtt": ["Handler1", "Arn"]}, "<Handler1.Arn>"),
        ({"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::b/*"]]}, "arn:<AWS::Partition>:s3:::b/*"),
        (
            {"Fn::Sub": "arn:${AWS::Partition}:s3:::cdk-${AWS::AccountId}/*"},
            "arn:<AWS::Partition>:s3:::cdk-<AWS::AccountId>/*",
        ),
        ({"Fn::ImportValue": "Stack:Export"}, "Stack:Export"),
        ({"Fn::If": ["C", "a", {"Ref": "AWS::NoValue"}]}, '{"Fn::If":["C","a",{"Ref":"AWS::NoValue"}]}'),
    ],
)
def test_nag_string_renders_like_cdk_nag(value: object, rendered: str) -> None:
    assert nag_string(value) == rendered
