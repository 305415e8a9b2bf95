"""Drain a GPU group before its MIG layout changes, resume it after (NVIDIA/mig-parted#485).

A group's ``mig_profile`` becomes the ``nvidia.com/mig.config`` label of its instance group; when
step ``stacks`` changes it, the MIG manager stops the node's GPU clients and repartitions, and a
client that does not stop in time leaves the node ``pending`` with no GPUs. So before step
``stacks`` every group whose deployed label (``sagemaker:DescribeCluster``) differs from the
config's is drained (KEDA paused at 0, Deployment scaled to 0 and marked with
:data:`DRAINED_ANNOTATION`, pods waited out); after it every marked Deployment is resumed — the
marker is the state, so an interrupted run resumes correctly. Entry points: :func:`layout_changes`,
:func:`drain_argvs`, :func:`resume_argvs` (kubectl argvs; :class:`~whisper_build.deploy.aws_session.AwsSession`
runs them). Docs: docs/mig.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from settings import labels, names
from settings.schema import DeploymentConfig, GpuGroup
from whisper_build.deploy import kube

DRAINED_ANNOTATION = "whisper-hyperpod.io/drained-for-mig-change"
"""Deployment annotation ``<old layout>-><new layout>`` while the group is drained for a MIG change."""
DRAIN_TIMEOUT_SECONDS = 15 * 60
"""Longest wait for a drained group's pods to be gone (their grace period is at most the longest request)."""
NO_LAYOUT = "none"


def desired_layout(group: GpuGroup) -> str | None:
    """The ``nvidia.com/mig.config`` value the config gives the group's nodes (``None``: whole GPUs)."""
    return group.mig.mig_config if group.mig is not None else None


def layout_changes(config: DeploymentConfig, instance_groups: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Group name → ``<deployed layout>-><config's layout>`` for every group whose MIG label changes.

    Args:
        config: The config about to be deployed.
        instance_groups: ``InstanceGroups`` of ``DescribeCluster``; groups not deployed yet are left out.
    """
    deployed = {
        group["InstanceGroupName"]: (group.get("KubernetesConfig") or {})
        .get("CurrentLabels", {})
        .get(labels.MIG_CONFIG_LABEL)
        for group in instance_groups
    }
    return {
        group.name: f"{deployed[group.name] or NO_LAYOUT}->{desired_layout(group) or NO_LAYOUT}"
        for group in config.gpu_groups
        if group.name in deployed and deployed[group.name] != desired_layout(group)
    }


def keda_scales(config: DeploymentConfig) -> bool:
    """True when the groups have ScaledObjects (KEDA is installed with observability on the deployments target)."""
    return config.observability.enabled and config.serving.target == "deployments"


def group_selector(group_name: str) -> str:
    """Label selector of one group's Deployment, pods and ScaledObject (``k8s_charts.naming.group_labels``)."""
    return f"{labels.APP_NAME_LABEL}={labels.APP_NAME},{labels.GPU_GROUP_LABEL}={group_name}"


def drain_argvs(config: DeploymentConfig, account: str, group: GpuGroup, change: str) -> list[tuple[str, ...]]:
    """Kubectl argvs that drain one group: pause KEDA at 0, mark and scale the Deployment, wait for its pods."""
    deployment = f"deployment/{names.workload_name(group)}"
    argvs = []
    if keda_scales(config):
        argvs.append(
            kube.kubectl_argv(
                config,
                account,
                "annotate",
                f"scaledobject/{names.workload_name(group)}",
                f"{labels.KEDA_PAUSE_ANNOTATION}=0",
                "--overwrite",
            )  # fmt: skip
        )
    argvs += [
        kube.kubectl_argv(config, account, "annotate", deployment, f"{DRAINED_ANNOTATION}={change}", "--overwrite"),
        kube.kubectl_argv(config, account, "scale", deployment, "--replicas=0"),
        kube.kubectl_argv(
            config,
            account,
            "wait",
            "--for=delete",
            "pod",
            "-l",
            group_selector(group.name),
            f"--timeout={DRAIN_TIMEOUT_SECONDS}s",
        ),  # fmt: skip
    ]
    return argvs


def drained_groups(deployments_json: str) -> list[str]:
    """Names of the groups whose Deployment carries :data:`DRAINED_ANNOTATION` (``kubectl get deployments -o json``)."""
    items = json.loads(deployments_json).get("items", [])
    return sorted(
        item["metadata"]["labels"][labels.GPU_GROUP_LABEL]
        for item in items
        if DRAINED_ANNOTATION in (item["metadata"].get("annotations") or {})
        and labels.GPU_GROUP_LABEL in (item["metadata"].get("labels") or {})
    )


def list_deployments_argv(config: DeploymentConfig, account: str) -> tuple[str, ...]:
    """``kubectl … get deployments -l app.kubernetes.io/name=whisper -o json``."""
    return kube.kubectl_argv(config, account, "get", "deployments", "-l",
                             f"{labels.APP_NAME_LABEL}={labels.APP_NAME}", "-o", "json")  # fmt: skip


def resume_argvs(config: DeploymentConfig, account: str, group: GpuGroup) -> list[tuple[str, ...]]:
    """Kubectl argvs that resume a drained group: scale back, unmark, un-pause KEDA (which autoscales from there)."""
    deployment = f"deployment/{names.workload_name(group)}"
    argvs = [
        kube.kubectl_argv(config, account, "scale", deployment, f"--replicas={group.baseline_replicas}"),
        kube.kubectl_argv(config, account, "annotate", deployment, f"{DRAINED_ANNOTATION}-"),
    ]
    if keda_scales(config):
        argvs.append(
            kube.kubectl_argv(
                config,
                account,
                "annotate",
                f"scaledobject/{names.workload_name(group)}",
                f"{labels.KEDA_PAUSE_ANNOTATION}-",
            )  # fmt: skip
        )
    return argvs
