"""The engine build as data: its command line and the Kubernetes Job that runs it on a GPU group.

Pure functions of the :class:`settings.DeploymentConfig`; the CodeBuild projects of
:mod:`stacks.engine_build_stack` embed their output. One engine per GPU architecture: an engine
compiled on one architecture does not load on another (NVIDIA/TensorRT-LLM#222 on GitHub), so the Job is
pinned to the nodes of a group of that architecture and the tool itself re-checks the GPU
(``--expect-arch``). A group served on MIG slices has an engine of its own, built on one slice
(``nvidia.com/mig-<profile>: 1``) and sized to its memory: every ``arch`` argument below is an
*engine target* (``GpuGroup.engine_target``: ``sm86`` or ``sm90-1g.10gb``); Kubernetes names use its
dot-free form (:func:`settings.storage.kubernetes_name`, ``sm90-1g-10gb``).

Entry point: :func:`engine_build_manifests` (the details, in its docstring).
Docs: docs/engines.md, "The pieces".
"""

from __future__ import annotations

from typing import Any

from k8s_charts import naming
from k8s_charts.security import POD_SECURITY_ENFORCE_LABEL, SERVING_GID, SERVING_UID
from k8s_charts.workload import termination_grace_seconds
from settings import labels
from settings.schema import DeploymentConfig, GpuGroup
from settings.storage import kubernetes_name
from whisper_build.release.invocations import WORK_DIR, engine_build_command, target_group

JOB_NAME_PLACEHOLDER = "__JOB_NAME__"
"""Replaced by the CodeBuild run with a unique name (Jobs are immutable; each build is a new Job)."""

ENGINE_BUILD_APP = "whisper-engine-build"
WORK_VOLUME_GIB = 200
"""Scratch space: HF checkpoint + OpenAI ``.pt`` + TensorRT-LLM checkpoint + engines of large-v3
(about 3 GB each in fp16) with generous headroom."""

JOB_DEADLINE_SECONDS = 3 * 3600
"""``activeDeadlineSeconds``: a large-v3 build takes minutes to tens of minutes; hours mean a hang."""
JOB_TTL_SECONDS = 7 * 24 * 3600
"""Finished Jobs (and their pods' logs) are kept a week for debugging, then garbage-collected."""


NAMESPACE_MAX_LENGTH = 63
"""Namespace names are RFC 1123 DNS labels: at most 63 characters (Kubernetes "Object Names and IDs")."""

KEDA_PAUSE_ANNOTATION = labels.KEDA_PAUSE_ANNOTATION


def build_namespace(config: DeploymentConfig, arch: str) -> str:
    """Namespace of ``arch``'s build Job and service account, e.g. ``whisper-build-sm86``.

    Raises:
        ValueError: the name would exceed 63 characters (shorten ``serving.namespace``).
    """
    name = f"{config.serving.namespace}-build-{kubernetes_name(arch)}"
    if len(name) > NAMESPACE_MAX_LENGTH:
        raise ValueError(
            f"build namespace {name!r} is longer than {NAMESPACE_MAX_LENGTH} characters; shorten serving.namespace"
        )
    return name


def kubernetes_group(arch: str) -> str:
    """Kubernetes RBAC group of ``arch``'s engine project, e.g. ``whisper-engine-build-sm86``.

    Set on its EKS access entry and bound to :func:`serving_access_manifests`' Role.
    """
    return f"{ENGINE_BUILD_APP}-{kubernetes_name(arch)}"


def serving_selector(config: DeploymentConfig, arch: str) -> str:
    """Label selector of the serving Deployment, pods and ScaledObject of ``arch``'s build group.

    The build group is :func:`build_group`'s, e.g.
    ``app.kubernetes.io/name=whisper,whisper-hyperpod.io/gpu-group=g5,...``.

    Only the build group gives its GPU up: other groups of the same architecture keep serving. The
    labels are those the charts put on those objects (:func:`k8s_charts.naming.group_labels`).
    """
    return ",".join(f"{key}={value}" for key, value in naming.group_labels(build_group(config, arch)).items())


DRAIN_MARGIN_SECONDS = 120


def drain_timeout_seconds(config: DeploymentConfig) -> int:
    """How long a build waits for its group's serving pods to be gone after scaling to 0, in seconds.

    Their ``terminationGracePeriodSeconds`` (:func:`k8s_charts.workload.termination_grace_seconds`) plus
    :data:`DRAIN_MARGIN_SECONDS` for the API server and kubelet.
    """
    return termination_grace_seconds(config) + DRAIN_MARGIN_SECONDS


def service_account_name(arch: str) -> str:
    """Service account of one architecture's build pods, e.g. ``engine-builder-sm86``.

    Its Pod Identity role may write only that architecture's S3 prefix.
    """
    return f"engine-builder-{kubernetes_name(arch)}"


def build_group(config: DeploymentConfig, arch: str) -> GpuGroup:
    """The GPU group whose nodes build ``arch``'s engine: the first configured group of that engine target.

    Raises:
        ValueError: no group has that engine target.
    """
    return target_group(config, arch)


def build_resources(group: GpuGroup) -> dict[str, dict[str, str]]:
    """Requests/limits of a build pod on ``group``'s nodes.

    One GPU (or MIG slice of the group's profile, ``GpuGroup.gpu_resource``), up to 4 vCPU (half the
    node), up to 24 GiB requested (half the node's memory; checkpoint conversion holds the model in
    host memory) and at most three quarters of the node's memory as the limit, so the request always
    fits the instance (``settings.gpu_catalog`` sizes).
    """
    spec = group.instance
    memory_request = max(4, min(24, spec.memory_gib // 2))
    memory_limit = max(memory_request, spec.memory_gib * 3 // 4)
    cpu = max(1, min(4, spec.vcpus // 2))
    return {
        "requests": {"cpu": str(cpu), "memory": f"{memory_request}Gi", group.gpu_resource: "1"},
        "limits": {"memory": f"{memory_limit}Gi", group.gpu_resource: "1"},
    }


def engine_build_manifests(
    config: DeploymentConfig, arch: str, *, image_uri: str, bucket_name: str, region: str
) -> list[dict[str, Any]]:
    """The ServiceAccount and Job that build ``arch``'s engine on its GPU group.

    Args:
        config: the deployment config.
        arch: GPU architecture, e.g. ``sm86`` (one of ``config.gpu_archs``).
        image_uri: the serving image (contains TensorRT-LLM and this project).
        bucket_name: the model bucket (may be a CloudFormation token at synth time).
        region: AWS region for the SDK inside the pod.

    Returns:
        ``[ServiceAccount, Job]`` in :func:`build_namespace`; the Job's name is
        :data:`JOB_NAME_PLACEHOLDER`. The pod meets the "restricted" Pod Security Standard
        (the serving image's uid/gid, :mod:`k8s_charts.security`).

    Isolation: each architecture's Job runs in a namespace of its own (:func:`build_namespace`), where
    only that architecture's CodeBuild role may create objects, so no project can run a pod as another
    architecture's build service account (whose Pod Identity role writes that architecture's S3
    prefix). In the serving namespace a project may only pause and scale its build group's serving
    Deployment (:func:`serving_access_manifests`), to free the GPU the Job needs.
    """
    group = build_group(config, arch)
    namespace = build_namespace(config, arch)
    pod_labels = {labels.APP_NAME_LABEL: ENGINE_BUILD_APP, labels.GPU_ARCH_LABEL: group.arch}
    service_account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": service_account_name(arch), "namespace": namespace, "labels": pod_labels},
    }
    container = {
        "name": "build",
        "image": image_uri,
        "command": engine_build_command(config, arch, bucket_name),
        "env": [
            {"name": "AWS_REGION", "value": region},
            {"name": "AWS_DEFAULT_REGION", "value": region},
            # The image runs as a non-root user: keep every cache on the scratch volume.
            {"name": "HOME", "value": WORK_DIR},
            {"name": "HF_HOME", "value": f"{WORK_DIR}/hf"},
        ],
        "resources": build_resources(group),
        "volumeMounts": [{"name": "work", "mountPath": WORK_DIR}],
        # the "restricted" Pod Security Standard that the build namespace enforces
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": JOB_NAME_PLACEHOLDER, "namespace": namespace, "labels": pod_labels},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": JOB_DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": JOB_TTL_SECONDS,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "serviceAccountName": service_account_name(arch),
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": SERVING_UID,
                        "runAsGroup": SERVING_GID,
                        "fsGroup": SERVING_GID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "nodeSelector": {labels.GPU_GROUP_LABEL: group.name, labels.GPU_ARCH_LABEL: group.arch},
                    "tolerations": [
                        {
                            "key": labels.GPU_TAINT_KEY,
                            "operator": "Equal",
                            "value": labels.GPU_TAINT_VALUE,
                            "effect": labels.GPU_TAINT_EFFECT,
                        }
                    ],
                    "containers": [container],
                    "volumes": [{"name": "work", "emptyDir": {"sizeLimit": f"{WORK_VOLUME_GIB}Gi"}}],
                },
            },
        },
    }
    return [service_account, job]


def build_namespace_manifest(config: DeploymentConfig, arch: str) -> dict[str, Any]:
    """The Namespace of ``arch``'s builds, enforcing the "restricted" Pod Security Standard."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": build_namespace(config, arch),
            "labels": {
                labels.APP_NAME_LABEL: ENGINE_BUILD_APP,
                labels.GPU_ARCH_LABEL: build_group(config, arch).arch,
                POD_SECURITY_ENFORCE_LABEL: "restricted",
            },
        },
    }


def serving_access_manifests(config: DeploymentConfig, arch: str) -> list[dict[str, Any]]:
    """Role + RoleBinding in the serving namespace for :func:`kubernetes_group` of ``arch``.

    Just what the build's pause step needs (:func:`stacks.buildspecs.hyperpod_job_buildspec`):
    list Deployments, ScaledObjects and pods; get/patch (annotate, scale) only the build group's
    Deployment and ScaledObject (both named :func:`k8s_charts.naming.workload_name`); watch pods to
    wait for them to go. ``kubectl scale`` patches (older clients update) the ``scale`` subresource.
    No Secrets, no pod creation, nothing of another group.

    Returns:
        ``[Role, RoleBinding]``, both named ``<kubernetes_group(arch)>``.
    """
    name = kubernetes_group(arch)
    namespace = config.serving.namespace
    workload = [naming.workload_name(build_group(config, arch))]
    metadata = {"name": name, "namespace": namespace, "labels": {labels.APP_NAME_LABEL: ENGINE_BUILD_APP}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata,
        "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"], "resourceNames": workload},
            {
                "apiGroups": ["apps"],
                "resources": ["deployments/scale"],
                "verbs": ["get", "patch", "update"],
                "resourceNames": workload,
            },
            {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["list"]},
            {
                "apiGroups": ["keda.sh"],
                "resources": ["scaledobjects"],
                "verbs": ["get", "patch"],
                "resourceNames": workload,
            },
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}],
    }
    return [role, binding]
