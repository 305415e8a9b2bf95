"""CDK Pipelines delivery (config/examples/pipeline.yaml: three GPU groups + a source): stages and
waves, the synth step, the trigger roles, the gates over every stack; and the workstation path
without a source."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from cdk_assembly import CONFIGS, PIPELINE_CONFIG, REPO_ROOT, synthesized

from settings import parse_config
from stacks.assembly import cdk_json_context
from stacks.gates import read_nag_findings, run_cfn_lint
from stacks.pipeline_stack import PipelineStack, join_as_sub, repository_path, synth_commands

pytestmark = pytest.mark.slow

PIPELINE_STACK = "WhisperHyperpodPipeline"


@pytest.fixture(scope="module")
def result():
    return synthesized(PIPELINE_CONFIG)


@pytest.fixture(scope="module")
def template(result) -> dict[str, Any]:
    return result.template_json(PIPELINE_STACK)


def _pipeline(template: dict[str, Any]) -> dict[str, Any]:
    (pipeline,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"]
    return pipeline["Properties"]


def _stages(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {stage["Name"]: stage["Actions"] for stage in _pipeline(template)["Stages"]}


def test_stage_order(template):
    # Source → synth → self-mutation → assets → deploy → image → engines → rollout.
    assert list(_stages(template)) == [
        "Source", "Build", "UpdatePipeline", "Assets", "Deploy", "ServingImage", "Engines", "Rollout",
    ]  # fmt: skip
    assert [a["Name"] for a in _stages(template)["UpdatePipeline"]] == ["SelfMutate"]


def test_engines_of_every_architecture_build_in_parallel(template):
    engines = _stages(template)["Engines"]
    # Three groups → three architecture builds, all in one run order (parallel).
    assert sorted(a["Name"] for a in engines) == ["BuildEngine-sm86", "BuildEngine-sm89", "BuildEngine-sm90"]
    assert {a["RunOrder"] for a in engines} == {1}


def test_manual_approval_precedes_every_deployment(template):
    deploy = _stages(template)["Deploy"]
    approvals = [a for a in deploy if a["ActionTypeId"]["Category"] == "Approval"]
    assert [a["Name"] for a in approvals] == ["ApproveProduction"]
    others = [a["RunOrder"] for a in deploy if a["ActionTypeId"]["Category"] != "Approval"]
    assert approvals[0]["RunOrder"] < min(others)
    deployed = {a["Configuration"]["StackName"] for a in deploy if "StackName" in a.get("Configuration", {})}
    # The stage deploys the same stacks as the workstation path, engine build projects included.
    assert {"Deploy-WhisperHyperpodEngineBuild", "Deploy-WhisperHyperpodCluster"} <= deployed


def test_source_is_the_configured_connection(template, result):
    (source,) = _stages(template)["Source"]
    assert source["ActionTypeId"]["Provider"] == "CodeStarSourceConnection"
    settings = result.config.pipeline
    assert source["Configuration"] == {
        "ConnectionArn": settings.connection_arn,
        "FullRepositoryId": settings.repository,
        "BranchName": settings.branch,
    }


def _projects(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"]


def test_synth_step_deploys_the_gated_assembly(template):
    expected = synth_commands("config/examples/pipeline.yaml")
    # make synth writes cdk.out only when the three gates pass; no second synthesis after them
    assert expected == ["make test", "make synth CONFIG=config/examples/pipeline.yaml"]
    buildspecs = [json.loads(p["Properties"]["Source"]["BuildSpec"]) for p in _projects(template)]
    synth = [b for b in buildspecs if b.get("phases", {}).get("build", {}).get("commands") == expected]
    assert len(synth) == 1
    assert synth[0]["artifacts"]["base-directory"] == "cdk.out"


def test_trigger_steps_may_only_start_their_own_project(template):
    triggers = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        # The trigger steps' own statements (CDK Pipelines adds StopBuild to the ones it writes).
        if sorted(s["Action"]) == ["codebuild:BatchGetBuilds", "codebuild:StartBuild"]
    ]
    targets = sorted(json.dumps(s["Resource"]).split(":project/")[1].split('"')[0] for s in triggers)
    assert targets == sorted(
        ["whisper-hyperpod-serving-image", "whisper-hyperpod-rollout"]
        + [f"whisper-hyperpod-engine-{arch}" for arch in ("sm86", "sm89", "sm90")]
    )


def test_pipeline_config_passes_the_gates(result):
    # cfn-lint and cdk-nag over the pipeline stack and every stack of its stage.
    assert result.error is None, result.error
    assert len(result.templates) >= 5, result.templates
    assert run_cfn_lint(list(result.templates.values())) == []
    assert read_nag_findings(result.outdir) == []


def test_workstation_path_has_no_pipeline():
    default = synthesized(CONFIGS["default"])
    assert default.stacks is not None and default.stacks.engine_build is not None, default.error
    assert not [name for name in default.templates if "Pipeline" in name]


def test_approval_is_optional():
    data = yaml.safe_load(PIPELINE_CONFIG.read_text(encoding="utf-8"))
    data["pipeline"]["manual_approval"] = False
    config = parse_config(data)
    app = cdk.App(context=cdk_json_context())
    stack = PipelineStack(app, "P", config=config, config_path="c.yaml", env=cdk.Environment(region=config.region))
    deploy = next(s for s in stack.pipeline.pipeline.stages if s.stage_name == "Deploy")
    assert not [a for a in deploy.actions if a.action_properties.category.value == "Approval"]


def test_pipeline_needs_a_source():
    config = parse_config(yaml.safe_load(CONFIGS["default"].read_text(encoding="utf-8")))
    with pytest.raises(ValueError, match="connection_arn and pipeline.repository"):
        PipelineStack(cdk.App(), "P", config=config, config_path="c.yaml")


def test_repository_path():
    assert repository_path("config/examples/pipeline.yaml") == "config/examples/pipeline.yaml"
    assert repository_path(REPO_ROOT / "config" / "default.yaml") == "config/default.yaml"
    with pytest.raises(ValueError, match="outside the repository"):
        repository_path("/etc/whisper.yaml")


def test_join_as_sub():
    arn = {"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::", {"Ref": "AWS::AccountId"}, ":role/x"]]}
    assert join_as_sub(arn) == {"Fn::Sub": "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/x"}
    assert join_as_sub({"Fn::Join": [",", ["a", "b"]]}) is None
    assert join_as_sub({"Fn::Join": ["", ["a", {"Fn::GetAtt": ["R", "Arn"]}]]}) is None
    assert join_as_sub("plain") is None


def test_engine_triggers_outlive_their_projects(result, template):
    """A trigger step that timed out first would fail the pipeline while its build (and the serving
    pause it holds) still runs."""
    engine_template = result.template_json(next(name for name in result.templates if name.endswith("EngineBuild")))
    project_minutes = {
        r["Properties"]["Name"]: r["Properties"]["TimeoutInMinutes"]
        for r in engine_template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
    }
    trigger_minutes = [
        r["Properties"]["TimeoutInMinutes"]
        for r in template["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
        and "BuildEngine" in json.dumps(r["Properties"].get("Description", ""))
    ]
    assert len(trigger_minutes) == 3, trigger_minutes
    engine_minutes = [m for name, m in project_minutes.items() if "-engine-" in name]
    assert min(trigger_minutes) > max(engine_minutes) > 0
