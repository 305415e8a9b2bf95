"""Security contexts: the serving pods (Kubernetes "restricted" Pod Security Standard) and one relaxation.

The one relaxation is the GPU metrics exporter (:func:`gpu_metrics_security_context`, which says
why).

Serving pods:

Non-root with a fixed uid/gid, read-only root filesystem (writable paths are ``emptyDir``
volumes), no privilege escalation, every capability dropped, the runtime's default seccomp
profile (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).

The serving image must run as this uid/gid (``USER 1000:1000``, the NGC Triton images'
``triton-server`` user); the same numbers must equal the Mountpoint for S3 ``uid=``/``gid=``
mount options, or the non-root container cannot read the mounted model repository
(mountpoint-s3-csi-driver ``examples/kubernetes/static_provisioning/non_root.yaml``). Docs: docs/deploy.md, "Security".
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

SERVING_UID = 1000
SERVING_GID = 1000

CHECKOV_SKIP_ANNOTATION = "checkov.io/skip{}"
"""checkov skips a Kubernetes check on an object annotated ``checkov.io/skip<N>: <check id>=<reason>``
(checkov docs, "Suppressing/Skipping", Kubernetes)."""

SERVING_IMAGE_SKIPS = {
    "CKV_K8S_15": "the serving image tag comes from the config and ECR tags are immutable "
    "(storage stack), so IfNotPresent cannot run a different image than Always would",
    "CKV_K8S_43": "ECR tags of the serving repository are immutable (storage stack), so the tag pins "
    "one image as a digest would, and stays readable in the config",
    "CKV_K8S_40": "uid/gid 1000 is the NGC Triton images' triton-server user and must equal the "
    "Mountpoint for S3 uid/gid mount options (k8s_charts.security)",
}
"""checkov checks the serving Deployments do not meet, with the reason."""

GPU_METRICS_SKIPS = {
    "CKV_K8S_15": "the DCGM exporter image is pinned to an exact upstream release tag",
    "CKV_K8S_43": "the DCGM exporter image is pinned to an exact upstream release tag (nvcr.io)",
    "CKV_K8S_22": "upstream enables a read-only root filesystem only with tmpfs volumes for paths it "
    "does not document (gpu_metrics_security_context)",
    "CKV_K8S_23": "DCGM's embedded host engine refuses to run as non-root (NVIDIA/dcgm-exporter #402, #407; "
    "gpu_metrics_security_context)",
    "CKV_K8S_25": "CAP_SYS_ADMIN is the one capability DCGM profiling metrics need, as upstream ships it "
    "(gpu_metrics_security_context)",
    "CKV_K8S_39": "CAP_SYS_ADMIN is the one capability DCGM profiling metrics need, as upstream ships it "
    "(gpu_metrics_security_context)",
    "CKV_K8S_40": "runs as root (uid 0): DCGM's host engine requires it (gpu_metrics_security_context)",
}
"""checkov checks the DCGM exporter DaemonSets do not meet, with the reason (its own privileged namespace)."""


def checkov_skip_annotations(skips: dict[str, str]) -> dict[str, str]:
    """Object annotations that skip each checkov check of ``skips`` (check id → reason)."""
    return {
        CHECKOV_SKIP_ANNOTATION.format(n): f"{check}={reason}" for n, (check, reason) in enumerate(skips.items(), 1)
    }


POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
"""Namespace label of Pod Security Admission; values ``restricted`` | ``baseline`` | ``privileged``."""


def _runtime_default() -> k8s.SeccompProfile:
    return k8s.SeccompProfile(type="RuntimeDefault")


def pod_security_context() -> k8s.PodSecurityContext:
    """Pod-level context: non-root uid/gid, fsGroup for the emptyDirs, RuntimeDefault seccomp."""
    return k8s.PodSecurityContext(
        run_as_non_root=True,
        run_as_user=SERVING_UID,
        run_as_group=SERVING_GID,
        fs_group=SERVING_GID,
        seccomp_profile=_runtime_default(),
    )


def container_security_context() -> k8s.SecurityContext:
    """Container-level context (repeated per container, as the restricted standard checks it there)."""
    return k8s.SecurityContext(
        run_as_non_root=True,
        run_as_user=SERVING_UID,
        run_as_group=SERVING_GID,
        allow_privilege_escalation=False,
        privileged=False,
        read_only_root_filesystem=True,
        capabilities=k8s.Capabilities(drop=["ALL"]),
        seccomp_profile=_runtime_default(),
    )


def node_agent_pod_security_context() -> k8s.PodSecurityContext:
    """Pod-level context of a node agent (GPU metrics exporter): only the RuntimeDefault seccomp profile."""
    return k8s.PodSecurityContext(seccomp_profile=_runtime_default())


def gpu_metrics_security_context() -> k8s.SecurityContext:
    """Container context of the NVIDIA DCGM exporter: root with ``CAP_SYS_ADMIN`` and nothing else.

    What upstream ships (NVIDIA/dcgm-exporter ``deployment/values.yaml`` ``securityContext`` and
    ``deployment/examples/dcgm-exporter.yaml``: ``runAsUser: 0``, ``capabilities.add: [SYS_ADMIN]``,
    ``drop: [ALL]``, ``allowPrivilegeEscalation: false``). DCGM's embedded host engine needs it: without
    it DCGM exporter 3.6 exits with "Host engine is running as non-root" (NVIDIA/dcgm-exporter issues
    #402 and #407, reported on AWS; aws-observability/helm-charts PR #217 added SYS_ADMIN for the same
    reason), and upstream's non-root variant is documented only for images without profiling
    metrics. This is outside the ``baseline`` Pod Security Standard, hence the exporter's own
    ``privileged`` namespace (:mod:`k8s_charts.gpu_metrics`). Kept tight otherwise: every other
    capability dropped, no privilege escalation, not ``privileged``, RuntimeDefault seccomp (Docker's
    default profile is what upstream's ``docker run --cap-add SYS_ADMIN`` instructions use). The root
    filesystem stays writable: upstream enables ``readOnlyRootFilesystem`` only with tmpfs volumes
    for paths it does not name.
    """
    return k8s.SecurityContext(
        run_as_non_root=False,
        run_as_user=0,
        allow_privilege_escalation=False,
        privileged=False,
        capabilities=k8s.Capabilities(add=["SYS_ADMIN"], drop=["ALL"]),
        seccomp_profile=_runtime_default(),
    )
