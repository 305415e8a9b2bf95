"""Security context of the serving pods: the Kubernetes "restricted" Pod Security Standard.

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


def pod_security_context() -> k8s.PodSecurityContext:
    """Pod-level context: non-root uid/gid, fsGroup for the emptyDirs, RuntimeDefault seccomp."""
    return k8s.PodSecurityContext(
        run_as_non_root=True,
        run_as_user=SERVING_UID,
        run_as_group=SERVING_GID,
        fs_group=SERVING_GID,
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
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
        seccomp_profile=k8s.SeccompProfile(type="RuntimeDefault"),
    )
