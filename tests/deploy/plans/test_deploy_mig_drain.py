"""A group is drained before step stacks changes its MIG layout and resumed after (NVIDIA/mig-parted#485)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from botocore.exceptions import ClientError
from k8s_support import config_with

from settings import load_config
from whisper_build.deploy import mig_drain
from whisper_build.deploy.aws_session import AwsSession
from whisper_build.deploy.deploy_plan import deploy_steps

MIG_EXAMPLE = "config/examples/mig.yaml"


def _instance_group(name: str, layout: str | None) -> dict[str, Any]:
    current = {"nvidia.com/mig.config": layout} if layout else {}
    return {"InstanceGroupName": name, "KubernetesConfig": {"CurrentLabels": {"other": "x", **current}}}


@pytest.fixture(scope="module")
def mig_config():
    from cdk_assembly import REPO_ROOT

    return load_config(REPO_ROOT / MIG_EXAMPLE)


def test_only_groups_whose_deployed_layout_differs_are_drained(mig_config) -> None:
    mig = next(g for g in mig_config.gpu_groups if g.mig is not None)
    whole = next(g for g in mig_config.gpu_groups if g.mig is None)
    same = [_instance_group(mig.name, mig.mig.mig_config), _instance_group(whole.name, None)]
    assert mig_drain.layout_changes(mig_config, same) == {}
    changed = [_instance_group(mig.name, "all-3g.40gb"), _instance_group(whole.name, "all-1g.10gb")]
    assert mig_drain.layout_changes(mig_config, changed) == {
        mig.name: f"all-3g.40gb->{mig.mig.mig_config}",
        whole.name: "all-1g.10gb->none",  # MIG removed: the group's pods must go too
    }
    assert mig_drain.layout_changes(mig_config, []) == {}  # not deployed yet


class _Sagemaker:
    def __init__(self, groups: list[dict[str, Any]] | None) -> None:
        self.groups = groups

    def describe_cluster(self, ClusterName: str) -> dict[str, Any]:  # noqa: N803 (boto3's keyword)
        if self.groups is None:
            raise ClientError({"Error": {"Code": "ResourceNotFound", "Message": "no"}}, "DescribeCluster")
        return {"ClusterName": ClusterName, "InstanceGroups": self.groups}


def _session(config, groups, deployments: list[dict[str, Any]] | None = None) -> tuple[AwsSession, list[list[str]]]:
    ran: list[list[str]] = []

    def kubectl(argv: Sequence[str]) -> str:
        ran.append(list(argv))
        return json.dumps({"items": deployments or []}) if "get" in argv else ""

    session = AwsSession(config, "123456789012", "arn:aws:iam::123456789012:role/me",
                         lambda service, region_name: _Sagemaker(groups), lambda *a, **k: None, lambda _: None,
                         kubectl)  # fmt: skip
    return session, ran


def test_drain_pauses_keda_then_scales_to_zero_then_waits_for_the_pods(mig_config) -> None:
    mig = next(g for g in mig_config.gpu_groups if g.mig is not None)
    session, ran = _session(mig_config, [_instance_group(mig.name, "all-3g.40gb")])
    session.drain_mig_changes()
    verbs = [argv[argv.index("-n") + 2 : argv.index("-n") + 4] for argv in ran]
    assert verbs == [
        ["annotate", f"scaledobject/whisper-{mig.name}"],
        ["annotate", f"deployment/whisper-{mig.name}"],
        ["scale", f"deployment/whisper-{mig.name}"],
        ["wait", "--for=delete"],
    ]
    assert "autoscaling.keda.sh/paused-replicas=0" in ran[0] and "--replicas=0" in ran[2]
    assert f"app.kubernetes.io/name=whisper,whisper-hyperpod.io/gpu-group={mig.name}" in ran[3]
    assert all(
        argv[:3] == ["kubectl", "--context", f"arn:aws:eks:us-east-1:123456789012:cluster/{mig_config.project_name}"]
        for argv in ran
    )


def test_first_deploy_and_unchanged_layouts_drain_nothing(mig_config) -> None:
    session, ran = _session(mig_config, None)  # DescribeCluster: ResourceNotFound
    assert session.mig_layout_changes() == {}
    session.drain_mig_changes()
    assert ran == []


def test_without_keda_the_drain_and_resume_leave_scaled_objects_alone() -> None:
    config = config_with(observability={"enabled": False})
    group = config.gpu_groups[0]
    drain = mig_drain.drain_argvs(config, "1", group, "none->all-1g.10gb")
    resume = mig_drain.resume_argvs(config, "1", group)
    assert not [argv for argv in drain + resume if any("scaledobject" in part for part in argv)]
    assert f"--replicas={group.baseline_replicas}" in resume[0]


def test_resume_scales_back_every_marked_group_whatever_run_drained_it(mig_config) -> None:
    mig = next(g for g in mig_config.gpu_groups if g.mig is not None)
    marked = {"metadata": {"name": f"whisper-{mig.name}", "labels": {"whisper-hyperpod.io/gpu-group": mig.name},
                           "annotations": {mig_drain.DRAINED_ANNOTATION: "all-3g.40gb->all-1g.10gb"}}}  # fmt: skip
    unmarked = {"metadata": {"name": "whisper-other", "labels": {"whisper-hyperpod.io/gpu-group": "other"}}}
    session, ran = _session(mig_config, [], [marked, unmarked])
    assert session.drained_groups() == [mig.name]
    session.resume_drained_groups()
    resumed = [argv for argv in ran if "get" not in argv]
    assert [argv[argv.index("-n") + 2] for argv in resumed] == ["scale", "annotate", "annotate"]
    assert f"--replicas={mig.baseline_replicas}" in resumed[0]
    assert f"{mig_drain.DRAINED_ANNOTATION}-" in resumed[1] and "autoscaling.keda.sh/paused-replicas-" in resumed[2]


def test_the_drain_comes_before_stacks_and_the_resume_after(mig_config) -> None:
    names = [step.name for step in deploy_steps(mig_config, "c.yaml", "1")]
    assert names.index("mig-drain") < names.index("stacks") < names.index("kubectl") < names.index("mig-resume")
    assert names.index("mig-resume") < names.index("serving")


def test_a_fleet_without_mig_is_told_when_the_drain_step_applies_to_it(mig_config) -> None:
    """The default config lists mig-drain only as the way out of a deployed MIG layout, never as always on."""
    default = next(s for s in deploy_steps(load_config(), "config/default.yaml", "<account>") if s.name == "mig-drain")
    assert default.title.startswith("only when a deployed group still has a MIG layout this config removes")
    assert "always on a first deploy" not in (default.skip or ("",))[0]
    mig = next(s for s in deploy_steps(mig_config, MIG_EXAMPLE, "<account>") if s.name == "mig-drain")
    assert mig.title.startswith("before a GPU group's MIG layout")


@pytest.mark.usefixtures("kubectl_installed")
def test_the_dry_run_lists_the_mig_steps_only_for_a_fleet_with_mig() -> None:
    from deploy_helpers import _dry_run_lines

    from settings import DEFAULT_CONFIG_PATH
    from whisper_build.paths import REPO_ROOT

    def steps(config) -> list[str]:
        return [line.split(":")[0].split("] ")[1] for line in _dry_run_lines("deploy", config) if line.startswith("[")]

    assert "mig-drain" not in steps(DEFAULT_CONFIG_PATH) and "mig-resume" not in steps(DEFAULT_CONFIG_PATH)
    with_mig = steps(REPO_ROOT / MIG_EXAMPLE)
    assert with_mig.index("mig-drain") < with_mig.index("stacks") < with_mig.index("mig-resume")
