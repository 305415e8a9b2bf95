"""Pod parts shared by the serving Deployments (``workload.py``) and the bulk workers (``bulk.py``).

Both run the serving image with Triton and read the same engines: the same volumes and mounts
(model repository read-only from the group's PersistentVolumeClaim, Triton's shared memory, a
writable ``/tmp`` and run directory under a read-only root filesystem), the same Deployment
annotations and the same one-pod-at-a-time rollout.
Docs: docs/kubernetes.md, "The Deployment of one GPU group".
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

from k8s_charts import security

MODEL_MOUNT_PATH = "/models"
RUN_DIR = "/run/whisper"
TMP_SIZE = "4Gi"
RUN_DIR_SIZE = "16Mi"


def empty_dir(name: str, size: str, medium: str | None = None) -> k8s.Volume:
    """An ``emptyDir`` volume limited to ``size`` (a Kubernetes quantity); ``medium="Memory"`` is a tmpfs."""
    return k8s.Volume(
        name=name, empty_dir=k8s.EmptyDirVolumeSource(medium=medium, size_limit=k8s.Quantity.from_string(size))
    )


def serving_volumes(claim_name: str, shm_size: str) -> list[k8s.Volume]:
    """Volumes of a pod running Triton.

    ``models`` (``claim_name``, read-only), ``dshm`` (``shm_size``, memory), ``tmp`` and ``run``.
    """
    return [
        k8s.Volume(
            name="models",
            persistent_volume_claim=k8s.PersistentVolumeClaimVolumeSource(claim_name=claim_name, read_only=True),
        ),
        empty_dir("dshm", shm_size, "Memory"),  # Triton python backend shared memory (counts as pod memory)
        empty_dir("tmp", TMP_SIZE),
        empty_dir("run", RUN_DIR_SIZE, "Memory"),
    ]


def serving_mounts(*, shm: bool) -> list[k8s.VolumeMount]:
    """Mounts of :func:`serving_volumes`.

    ``/models`` read-only, ``/tmp``, :data:`RUN_DIR`; ``/dev/shm`` with ``shm`` (Triton's container; the
    preflight init container has none).
    """
    mounts = [
        k8s.VolumeMount(name="models", mount_path=MODEL_MOUNT_PATH, read_only=True),
        k8s.VolumeMount(name="tmp", mount_path="/tmp"),
        k8s.VolumeMount(name="run", mount_path=RUN_DIR),
    ]
    if shm:
        mounts.append(k8s.VolumeMount(name="dshm", mount_path="/dev/shm"))
    return mounts


def serving_image_metadata(name: str, namespace: str, pod_labels: dict[str, str]) -> k8s.ObjectMeta:
    """Metadata of a Deployment of the serving image, with its checkov skips (``security.SERVING_IMAGE_SKIPS``)."""
    return k8s.ObjectMeta(
        name=name,
        namespace=namespace,
        labels=pod_labels,
        annotations=security.checkov_skip_annotations(security.SERVING_IMAGE_SKIPS),
    )


def one_pod_at_a_time() -> k8s.DeploymentStrategy:
    """Rolling update without surge, one pod unavailable at a time.

    A surge pod needs a free GPU that a fixed-size instance group rarely has.
    """
    return k8s.DeploymentStrategy(
        type="RollingUpdate",
        rolling_update=k8s.RollingUpdateDeployment(
            max_surge=k8s.IntOrString.from_number(0), max_unavailable=k8s.IntOrString.from_number(1)
        ),
    )
