"""Engine build stack: one CodeBuild project per GPU architecture, least-privilege roles, the Job it
starts, the CodeBuild-fleet switch, buildspecs. Synthesis is shared with the other stack tests
(tests/support/cdk_assembly.py); the fleet variant synthesizes the engine build stack alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import cx_api
from cdk_assembly import CONFIGS, synthesized

from k8s_charts.validation import validate
from k8s_charts.workload import termination_grace_seconds
from settings import labels, parse_config
from stacks import buildspecs, engine_job
from stacks.assembly import cdk_json_context
from stacks.engine_build_stack import EngineBuildStack, build_timeout, engine_project_name, fleet_instance_type
from stacks.gates import read_nag_findings, run_cfn_lint, stack_templates
from stacks.nag import enable_nag
from whisper_build.release import invocations

pytestmark = pytest.mark.slow

ARCHS = ["sm86", "sm89", "sm90"]


def _of_type(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def _flatten(value: Any) -> str:
    """A CloudFormation value as text, tokens written as ``<Ref>``/``<Logical.Attr>`` (for parsing JSON
    that contains deploy-time values)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        return value["Fn::Join"][0].join(_flatten(part) for part in value["Fn::Join"][1])
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return f"<{'.'.join(value['Fn::GetAtt'])}>"
    if isinstance(value, dict) and "Fn::ImportValue" in value:
        return "<import>"
    return json.dumps(value)


@pytest.fixture(scope="module")
def three_groups() -> dict[str, Any]:
    result = synthesized(CONFIGS["three-groups"])
    assert result.stacks is not None and result.stacks.engine_build is not None, result.error
    return result.template_json(result.stacks.engine_build.artifact_id)


def _projects(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """CodeBuild projects by name."""
    return {p["Properties"]["Name"]: p for p in _of_type(template, "AWS::CodeBuild::Project").values()}


def _env(project: dict[str, Any]) -> dict[str, Any]:
    return {e["Name"]: e["Value"] for e in project["Properties"]["Environment"].get("EnvironmentVariables", [])}


def test_one_engine_project_per_architecture_plus_image_and_rollout(three_groups):
    names = set(_projects(three_groups))
    # Checks that a three-group config yields exactly three architecture builds, one per arch.
    assert names == {f"whisper-hyperpod-engine-{arch}" for arch in ARCHS} | {
        "whisper-hyperpod-serving-image",
        "whisper-hyperpod-rollout",
    }
    for arch in ARCHS:
        assert _env(_projects(three_groups)[f"whisper-hyperpod-engine-{arch}"])["GPU_ARCH"] == arch


def test_each_job_targets_its_group_with_one_gpu(three_groups):
    config = synthesized(CONFIGS["three-groups"]).config
    for arch in ARCHS:
        env = _env(_projects(three_groups)[engine_project_name(config, arch)])
        manifest = json.loads(_flatten(env["JOB_MANIFEST"]))
        service_account, job = manifest["items"]
        pod = job["spec"]["template"]["spec"]
        group = config.groups_for_arch(arch)[0]
        # Pinned to the nodes of the group (and arch) the engine will serve on.
        assert pod["nodeSelector"] == {labels.GPU_GROUP_LABEL: group.name, labels.GPU_ARCH_LABEL: arch}
        container = pod["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert container["image"].endswith(f"/whisper-hyperpod/whisper-serving:{config.serving.image_tag}")
        command = container["command"]
        assert command[:3] == ["python3", "-m", "whisper_build.release.engine_build"]
        assert command[command.index("--expect-arch") + 1] == arch
        assert "--publish-bucket" in command
        assert pod["serviceAccountName"] == service_account["metadata"]["name"] == f"engine-builder-{arch}"
        assert job["metadata"]["name"] == engine_job.JOB_NAME_PLACEHOLDER
        # Each architecture's Job and service account live in that architecture's own namespace.
        assert job["metadata"]["namespace"] == service_account["metadata"]["namespace"] == f"whisper-build-{arch}"
        assert env["NAMESPACE"] == f"whisper-build-{arch}" and env["SERVING_NAMESPACE"] == "whisper"
        assert env["SERVING_SELECTOR"] == (
            f"{labels.APP_NAME_LABEL}=whisper,{labels.GPU_GROUP_LABEL}={group.name},{labels.GPU_ARCH_LABEL}={arch}"
        )
        assert env["SERVING_REPLICAS"] == str(max(group.min_replicas, 1))
        assert env["KEDA_ENABLED"] == ("true" if config.observability.enabled else "false")


def _access_entries(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Access entries by the name of the CodeBuild project whose role they admit."""
    by_role = {
        project["Properties"]["ServiceRole"]["Fn::GetAtt"][0]: project["Properties"]["Name"]
        for project in _of_type(template, "AWS::CodeBuild::Project").values()
    }
    return {
        by_role[entry["Properties"]["PrincipalArn"]["Fn::GetAtt"][0]]: entry["Properties"]
        for entry in _of_type(template, "AWS::EKS::AccessEntry").values()
    }


def test_access_entries_are_namespace_scoped_edit(three_groups):
    entries = _access_entries(three_groups)
    assert len(entries) == 4  # three engine projects + rollout
    namespaces = {}
    for project_name, entry in entries.items():
        (policy,) = entry["AccessPolicies"]
        assert _flatten(policy["PolicyArn"]).endswith(":cluster-access-policy/AmazonEKSEditPolicy")
        assert policy["AccessScope"]["Type"] == "namespace"
        namespaces[project_name] = policy["AccessScope"]["Namespaces"]
    # Each engine project may edit its own architecture's build namespace only, never the serving
    # namespace (where the other architectures' pods and Secrets are); only the rollout edits there.
    assert namespaces == {
        **{f"whisper-hyperpod-engine-{arch}": [f"whisper-build-{arch}"] for arch in ARCHS},
        "whisper-hyperpod-rollout": ["whisper"],
    }
    for arch in ARCHS:
        assert entries[f"whisper-hyperpod-engine-{arch}"]["KubernetesGroups"] == [f"whisper-engine-build-{arch}"]
    assert "KubernetesGroups" not in entries["whisper-hyperpod-rollout"]


def _applied_manifests(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Kubernetes objects the stack applies through the cluster's kubectl provider."""
    resources = _of_type(template, "Custom::AWSCDK-EKS-KubernetesResource")
    return [obj for resource in resources.values() for obj in json.loads(_flatten(resource["Properties"]["Manifest"]))]


def test_one_restricted_build_namespace_per_architecture(three_groups):
    namespaces = [m for m in _applied_manifests(three_groups) if m["kind"] == "Namespace"]
    assert sorted(n["metadata"]["name"] for n in namespaces) == [f"whisper-build-{arch}" for arch in ARCHS]
    for namespace in namespaces:
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_serving_namespace_rights_are_limited_to_pausing_the_build_group(three_groups):
    config = synthesized(CONFIGS["three-groups"]).config
    manifests = _applied_manifests(three_groups)
    roles = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "Role"}
    bindings = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "RoleBinding"}
    assert sorted(roles) == sorted(bindings) == [f"whisper-engine-build-{arch}" for arch in ARCHS]
    for arch in ARCHS:
        name = f"whisper-engine-build-{arch}"
        workload = f"whisper-{config.groups_for_arch(arch)[0].name}"
        role, binding = roles[name], bindings[name]
        assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == "whisper"
        # Bound to the group on that project's access entry only.
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}]
        assert binding["roleRef"]["name"] == name
        for rule in role["rules"]:
            # Never Secrets, pods' logs/exec, or creating anything.
            assert set(rule["resources"]) <= {"deployments", "deployments/scale", "scaledobjects", "pods"}, rule
            assert not set(rule["verbs"]) & {"create", "delete", "deletecollection", "*"}, rule
            if {"patch", "update"} & set(rule["verbs"]):
                # Changes only the build group's own Deployment / ScaledObject, not other groups'.
                assert rule["resourceNames"] == [workload], rule


def _statements(template: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (logical_id, statement)
        for logical_id, policy in _of_type(template, "AWS::IAM::Policy").items()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_roles_hold_no_service_wide_wildcards(three_groups):
    for logical_id, statement in _statements(three_groups):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        # Checks least privilege: no "service:*" action anywhere in this stack.
        assert not [a for a in actions if a.endswith(":*") or a == "*"], logical_id
        # Publishing never deletes: old versions stay for rollback.
        assert not [a for a in actions if a.startswith("s3:Delete")], logical_id
        if "eks:DescribeCluster" in actions:
            assert "*" not in json.dumps(statement["Resource"]), logical_id


def test_build_pods_write_only_their_architecture_prefix(three_groups):
    writes = [
        (logical_id, statement)
        for logical_id, statement in _statements(three_groups)
        if "s3:PutObject" in statement["Action"]
    ]
    assert sorted(logical_id.split("ModelPrefixWrite")[1][:4] for logical_id, _ in writes) == ARCHS
    for logical_id, statement in writes:
        arch = logical_id.split("ModelPrefixWrite")[1][:4]
        assert _flatten(statement["Resource"]).endswith(f"/models/large-v3-turbo/{arch}/*"), logical_id
    associations = _of_type(three_groups, "AWS::EKS::PodIdentityAssociation")
    assert sorted((a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]) for a in associations.values()) == [
        (f"whisper-build-{arch}", f"engine-builder-{arch}") for arch in ARCHS
    ]


def test_image_project_is_privileged_and_pushes_only_to_the_serving_repository(three_groups):
    project = _projects(three_groups)["whisper-hyperpod-serving-image"]
    assert project["Properties"]["Environment"]["PrivilegedMode"] is True
    assert _env(project)["DOCKERFILE"] == "whisper_build/image/Dockerfile"
    pushes = [s for _, s in _statements(three_groups) if "ecr:PutImage" in s["Action"]]
    assert len(pushes) == 1
    assert _flatten(pushes[0]["Resource"]).endswith(":repository/whisper-hyperpod/whisper-serving")


# ------------------------------------------------------------------------------ fleet variant


@pytest.fixture(scope="module")
def fleet_assembly() -> Path:
    """Engine build stack alone for a config whose g6e group builds on a CodeBuild GPU fleet."""
    data = yaml.safe_load(CONFIGS["three-groups"].read_text(encoding="utf-8"))
    data["gpu_groups"][1]["engine_builder"] = "codebuild_fleet"
    config = parse_config(data)
    outdir = tempfile.mkdtemp(prefix="engine-build-fleet-")
    app = cdk.App(outdir=outdir, context=cdk_json_context())
    env = cdk.Environment(region=config.region)
    base = cdk.Stack(app, "Base", env=env)
    vpc = ec2.Vpc(base, "Vpc", max_azs=2, flow_logs={"All": ec2.FlowLogOptions()})
    EngineBuildStack(
        app,
        "EngineBuild",
        config=config,
        cluster_name="whisper-hyperpod",
        kubectl_provider=eks.KubectlProvider.from_kubectl_provider_attributes(
            base, "Kubectl", service_token="arn:aws:lambda:us-east-1:123456789012:function:kubectl"
        ),
        model_bucket_name=f"whisper-hyperpod-models-{cdk.Aws.ACCOUNT_ID}-{config.region}",
        serving_repository_name="whisper-hyperpod/whisper-serving",
        vpc=vpc,
        cluster_security_group=ec2.SecurityGroup(base, "Sg", vpc=vpc),
        env=env,
    )
    enable_nag(app)
    app.synth()
    yield Path(outdir)
    shutil.rmtree(outdir, ignore_errors=True)


def test_fleet_switch_builds_on_a_matching_gpu_fleet(fleet_assembly):
    template = json.loads((fleet_assembly / "EngineBuild.template.json").read_text())
    (fleet,) = _of_type(template, "AWS::CodeBuild::Fleet").values()
    assert fleet["Properties"]["ComputeType"] == "CUSTOM_INSTANCE_TYPE"
    assert fleet["Properties"]["EnvironmentType"] == "LINUX_GPU_CONTAINER"
    # AWS::CodeBuild::Fleet spells ComputeConfiguration's keys in camelCase (CloudFormation reference).
    assert fleet["Properties"]["ComputeConfiguration"]["instanceType"] == "g6e.2xlarge"
    projects = _projects(template)
    fleet_project = projects["whisper-hyperpod-engine-sm89"]
    assert "Fleet" in fleet_project["Properties"]["Environment"]
    assert "JOB_MANIFEST" not in _env(fleet_project)  # builds itself, no Kubernetes Job
    buildspec = _flatten(fleet_project["Properties"]["Source"]["BuildSpec"])
    assert "whisper_build.release.engine_build" in buildspec and "--expect-arch sm89" in buildspec
    # skipped when the published engine has this build's key, unless forced
    assert "whisper_build.release.publish current" in buildspec and "FORCE_ENGINE_BUILD" in buildspec
    assert (
        invocations.engine_build_key(parse_config(yaml.safe_load(CONFIGS["three-groups"].read_text())), "sm89")
        in buildspec
    )
    # The other architectures keep the HyperPod Job runner, and the fleet project needs no cluster access.
    assert "JOB_MANIFEST" in _env(projects["whisper-hyperpod-engine-sm86"])
    assert len(_of_type(template, "AWS::EKS::AccessEntry")) == 3


def test_fleet_variant_passes_the_gates(fleet_assembly):
    templates = stack_templates(cx_api.CloudAssembly(str(fleet_assembly)))
    assert run_cfn_lint([templates["EngineBuild"]]) == []
    assert [f for f in read_nag_findings(fleet_assembly) if f.location.startswith("EngineBuild/")] == []


# ------------------------------------------------------------------------------ pure parts


def test_fleet_instance_type_drops_the_sagemaker_prefix():
    config = synthesized(CONFIGS["three-groups"]).config
    assert [fleet_instance_type(g) for g in config.gpu_groups] == ["g5.2xlarge", "g6e.2xlarge", "p5.48xlarge"]


@pytest.mark.parametrize("arch", ARCHS)
def test_job_manifests_are_valid_kubernetes(arch):
    config = synthesized(CONFIGS["three-groups"]).config
    manifests = engine_job.engine_build_manifests(
        config, arch, image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", bucket_name="b", region="us-east-1"
    )
    manifests += [engine_job.build_namespace_manifest(config, arch), *engine_job.serving_access_manifests(config, arch)]
    for manifest in manifests:
        if manifest["kind"] == "Job":
            manifest = {**manifest, "metadata": {**manifest["metadata"], "name": f"engine-build-{arch}-1"}}
        assert validate(manifest, config.cluster.kubernetes_version).startswith("k8s:")


def test_build_resources_fit_the_instance():
    config = synthesized(CONFIGS["three-groups"]).config
    for group in config.gpu_groups:
        resources = engine_job.build_resources(group)
        assert int(resources["requests"]["memory"].removesuffix("Gi")) <= group.instance.memory_gib // 2
        assert int(resources["limits"]["memory"].removesuffix("Gi")) < group.instance.memory_gib
        assert int(resources["requests"]["cpu"]) <= group.instance.vcpus


def test_unknown_architecture_is_refused():
    config = synthesized(CONFIGS["three-groups"]).config
    with pytest.raises(ValueError, match="no GPU group with engine target sm75"):
        engine_job.build_group(config, "sm75")


def test_buildspecs_apply_then_wait_and_fail_on_a_failed_job():
    spec = buildspecs.hyperpod_job_buildspec()
    build = "\n".join(spec["phases"]["build"]["commands"])
    assert "kubectl apply -f job.json" in build
    assert "--for=condition=complete" in build and "--for=condition=failed" in build
    assert spec["env"]["shell"] == "bash"
    trigger = "\n".join(buildspecs.start_build_commands())
    assert "aws codebuild start-build" in trigger and "SUCCEEDED)" in trigger and "exit 1" in trigger


# ------------------------------------------------------------------------------ buildspec behaviour

FAKE_KUBECTL = """#!/usr/bin/env bash
# Records every call; answers like a cluster with one serving pod and a Job that ends $FAKE_JOB_OUTCOME.
echo "$*" >> "$KUBECTL_LOG"
case "$*" in
  *"get pod"*) echo "pod/whisper-g5-abc" ;;
  *"--for=condition=complete"*) [ "$FAKE_JOB_OUTCOME" = complete ] ;;
  *"--for=condition=failed"*) [ "$FAKE_JOB_OUTCOME" = failed ] ;;
  *"scale deployment"*) [ "$FAKE_SCALE" != fail ] ;;
  *) true ;;
esac
"""


def _run_phases(spec: dict[str, Any], workdir: Path, env: dict[str, str]) -> list[str]:
    """Run a buildspec's ``build`` and ``post_build`` commands as CodeBuild does: one bash, variables
    kept from command to command, a failing command ends its phase, and post_build runs after a
    failed build phase (CodeBuild User Guide, "Build phase transitions"). Returns the phases' outcomes."""
    env_file = workdir / "env.sh"
    env_file.write_text("")
    outcomes = []
    for phase in ("build", "post_build"):
        outcome = "SUCCEEDED"
        for command in spec["phases"][phase]["commands"]:
            # set -a: shell variables set by one command (JOB_NAME=...) reach the next ones, as in CodeBuild
            script = f"set -a\nsource {env_file}\n{command}\nrc=$?\nexport -p > {env_file}\nexit $rc\n"
            result = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True)
            if result.returncode != 0:
                outcome = "FAILED"
                break
        outcomes.append(outcome)
    return outcomes


@pytest.fixture
def fake_cluster(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "KUBECTL_LOG": str(tmp_path / "kubectl.log"),
        "GPU_ARCH": "sm86",
        "CODEBUILD_BUILD_NUMBER": "7",
        "NAMESPACE": "whisper-build-sm86",
        "JOB_MANIFEST": '{"kind": "List", "items": [{"metadata": {"name": "__JOB_NAME__"}}]}',
        "JOB_TIMEOUT_SECONDS": "5",
        "SERVING_NAMESPACE": "whisper",
        "SERVING_SELECTOR": "whisper-hyperpod.io/gpu-group=g5",
        "SERVING_REPLICAS": "2",
        "KEDA_ENABLED": "true",
        "DRAIN_TIMEOUT_SECONDS": "600",
    }
    return tmp_path, env


def _calls(workdir: Path) -> list[str]:
    return (workdir / "kubectl.log").read_text().splitlines()


PAUSE = (
    "-n whisper annotate scaledobject -l whisper-hyperpod.io/gpu-group=g5 autoscaling.keda.sh/paused-replicas=0"
    " --overwrite"
)
SCALE_DOWN = "-n whisper scale deployment -l whisper-hyperpod.io/gpu-group=g5 --replicas=0"
DRAIN = "-n whisper wait --for=delete pod -l whisper-hyperpod.io/gpu-group=g5 --timeout=600s"
UNPAUSE = "-n whisper annotate scaledobject -l whisper-hyperpod.io/gpu-group=g5 autoscaling.keda.sh/paused-replicas-"
SCALE_BACK = "-n whisper scale deployment -l whisper-hyperpod.io/gpu-group=g5 --replicas=2"


@pytest.mark.parametrize("outcome", ["complete", "failed"])
def test_job_build_frees_the_gpu_first_and_always_resumes_serving(fake_cluster, outcome):
    workdir, env = fake_cluster
    phases = _run_phases(buildspecs.hyperpod_job_buildspec(), workdir, {**env, "FAKE_JOB_OUTCOME": outcome})
    assert phases == ["SUCCEEDED" if outcome == "complete" else "FAILED", "SUCCEEDED"]
    calls = _calls(workdir)
    apply = calls.index("apply -f job.json")
    # Paused, scaled to zero and drained before the Job exists; resumed (after the logs) whatever the Job did.
    assert calls.index(PAUSE) < calls.index(SCALE_DOWN) < calls.index(DRAIN) < apply
    assert calls[-3:] == ["-n whisper-build-sm86 logs job/engine-build-sm86-7 --tail=500", UNPAUSE, SCALE_BACK]
    assert '"name": "engine-build-sm86-7"' in (workdir / "job.json").read_text()


def test_job_build_without_keda_only_scales(fake_cluster):
    workdir, env = fake_cluster
    phases = _run_phases(
        buildspecs.hyperpod_job_buildspec(), workdir, {**env, "FAKE_JOB_OUTCOME": "complete", "KEDA_ENABLED": "false"}
    )
    assert phases == ["SUCCEEDED", "SUCCEEDED"]
    calls = _calls(workdir)
    assert not [c for c in calls if "scaledobject" in c]
    assert calls.index(SCALE_DOWN) < calls.index("apply -f job.json") and calls[-1] == SCALE_BACK


def test_failed_scale_down_never_applies_the_job_but_still_unpauses(fake_cluster):
    workdir, env = fake_cluster
    phases = _run_phases(
        buildspecs.hyperpod_job_buildspec(), workdir, {**env, "FAKE_JOB_OUTCOME": "complete", "FAKE_SCALE": "fail"}
    )
    # The resume step reports its own failed scale too, but the pause annotation is removed first.
    assert phases == ["FAILED", "FAILED"]
    calls = _calls(workdir)
    assert "apply -f job.json" not in calls
    assert UNPAUSE in calls[calls.index(SCALE_DOWN) :]


FAKE_AWS = """#!/usr/bin/env bash
# `aws s3 cp s3://BUCKET/KEY -` served from $FAKE_S3/BUCKET/KEY; a missing object fails like the CLI.
[ "$1 $2 $4" = "s3 cp -" ] || exit 2
cat "$FAKE_S3/${3#s3://}" 2>/dev/null || { echo "fatal error: Not Found" >&2; exit 1; }
"""
KEY = "sha256:" + "a" * 64


@pytest.fixture
def published(fake_cluster) -> tuple[Path, dict[str, str]]:
    """The fake cluster plus a model bucket whose current.json names a version built with KEY."""
    workdir, env = fake_cluster
    aws = workdir / "bin" / "aws"
    aws.write_text(FAKE_AWS)
    aws.chmod(0o755)
    prefix = workdir / "s3" / "models-bucket" / "models" / "large-v3-turbo" / "sm86"
    (prefix / "v1").mkdir(parents=True)
    (prefix / "current.json").write_text('{"version": "v1"}')
    (prefix / "v1" / "manifest.json").write_text(json.dumps({"model": "large-v3-turbo", "build_key": KEY}))
    env = {
        **env,
        "FAKE_S3": str(workdir / "s3"),
        "MODEL_BUCKET": "models-bucket",
        "MODEL_PREFIX": "models/large-v3-turbo/sm86/",
        "FAKE_JOB_OUTCOME": "complete",
    }
    return workdir, env


def test_current_engine_skips_the_build_without_touching_serving(published):
    workdir, env = published
    phases = _run_phases(buildspecs.hyperpod_job_buildspec(), workdir, {**env, "BUILD_KEY": KEY})
    assert phases == ["SUCCEEDED", "SUCCEEDED"]
    assert not (workdir / "kubectl.log").exists()  # no pause, scale, apply or resume
    assert (workdir / buildspecs.ENGINE_CURRENT_MARKER).exists()


@pytest.mark.parametrize(
    "change",
    [
        {"BUILD_KEY": "sha256:" + "b" * 64},  # inputs changed
        {"BUILD_KEY": KEY, "FORCE_ENGINE_BUILD": "true"},  # forced
        {"BUILD_KEY": KEY, "MODEL_PREFIX": "models/large-v3-turbo/sm89/"},  # nothing published there
    ],
)
def test_engine_not_current_builds_as_before(published, change):
    workdir, env = published
    phases = _run_phases(buildspecs.hyperpod_job_buildspec(), workdir, {**env, **change})
    assert phases == ["SUCCEEDED", "SUCCEEDED"]
    calls = _calls(workdir)
    assert calls.index(PAUSE) < calls.index(SCALE_DOWN) < calls.index("apply -f job.json")
    assert calls[-2:] == [UNPAUSE, SCALE_BACK]


def test_engine_projects_carry_the_build_key(three_groups):
    config = synthesized(CONFIGS["three-groups"]).config
    for arch in ARCHS:
        env = _env(_projects(three_groups)[engine_project_name(config, arch)])
        assert env["BUILD_KEY"] == invocations.engine_build_key(config, arch)
        assert env["MODEL_PREFIX"] == f"models/{config.model.name}/{arch}/" and env["FORCE_ENGINE_BUILD"] == "false"


def test_drain_and_build_fit_in_the_project_timeout():
    for config in (synthesized(CONFIGS["three-groups"]).config, synthesized(CONFIGS["default"]).config):
        # The pods' grace period ends before the build stops waiting for them.
        assert engine_job.drain_timeout_seconds(config) > termination_grace_seconds(config)
        waits = engine_job.drain_timeout_seconds(config) + engine_job.JOB_DEADLINE_SECONDS
        assert build_timeout(config).to_seconds() > waits


def test_job_runner_needs_the_kubectl_provider():
    config = synthesized(CONFIGS["three-groups"]).config
    app = cdk.App(context=cdk_json_context())
    base = cdk.Stack(app, "Base")
    vpc = ec2.Vpc(base, "Vpc", max_azs=2)
    with pytest.raises(ValueError, match="kubectl_provider is required"):
        EngineBuildStack(
            app,
            "EngineBuild",
            config=config,
            cluster_name="whisper-hyperpod",
            kubectl_provider=None,
            model_bucket_name="b",
            serving_repository_name="r",
            vpc=vpc,
            cluster_security_group=ec2.SecurityGroup(base, "Sg", vpc=vpc),
        )
