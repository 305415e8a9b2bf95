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
(mountpoint-s3-csi-driver ``examples/kubernetes/static_provisioning/non_root.yaml``).
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

SERVING_UID = 1000
SERVING_GID = 1000

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
    #402 and #407, seen on AWS; aws-observability/helm-charts PR #217 added SYS_ADMIN for the same
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
