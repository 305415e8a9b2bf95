"""Model storage: one static PersistentVolume + claim per GPU architecture (Mountpoint for S3).

Each volume mounts only ``models/<model>/<gpu_arch>/`` of the model bucket (``docs/contracts.md``
§3), read-only, so a pod can only see engines built for its GPU. ``serving_engine: torch`` groups
share one more volume, of the Hugging Face checkpoint ``models/<model>/hf/`` (:func:`hf_checkpoint_volume`). Facts from the
mountpoint-s3-csi-driver ``docs/CONFIGURATION.md`` and ``examples/kubernetes/static_provisioning``:
driver ``s3.csi.aws.com``; static provisioning only; ``capacity`` is required but ignored;
``volumeHandle`` must be unique per PV; the ``prefix`` option must end with ``/``; ``allow-other``
plus ``uid=``/``gid=`` let a non-root container read the mount; ``region`` avoids an IMDS lookup.

No local cache (neither Mountpoint's ``cache`` option nor the v2 driver's ``cache: emptyDir`` volume
attribute): a pod reads its engine once at start, so a cache would hold a second copy of it, and a
Mountpoint pod evicted for overflowing its cache emptyDir is not recreated, leaving the workload
without its bucket (awslabs/mountpoint-s3-csi-driver#575).
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, security
from settings import labels, storage
from settings.schema import DeploymentConfig
from settings.storage import kubernetes_name

CSI_DRIVER = "s3.csi.aws.com"
NOMINAL_CAPACITY = "1200Gi"
"""Required by the PV/PVC schema, ignored by the driver (S3 has no size)."""


def mount_options(config: DeploymentConfig, prefix: str) -> list[str]:
    """Mountpoint options of the volume of one S3 prefix (e.g. ``models/large-v3-turbo/sm86/``).

    Raises:
        ValueError: the prefix does not end with ``/`` (Mountpoint would reject it).
    """
    if not prefix.endswith("/"):
        raise ValueError(f"Mountpoint prefix '{prefix}' must end with '/'")
    return [
        "read-only",
        f"region {config.region}",
        f"prefix {prefix}",
        "allow-other",
        f"uid={security.SERVING_UID}",
        f"gid={security.SERVING_GID}",
    ]


def volume_handle(config: DeploymentConfig, key: str) -> str:
    """Cluster-unique CSI volume handle, e.g. ``whisper-hyperpod-large-v3-turbo-sm86`` (``…-hf`` for the checkpoint).

    ``key`` is an engine target or :data:`settings.storage.HF_CHECKPOINT_DIR`.
    """
    return f"{config.project_name}-{config.model.name}-{kubernetes_name(key)}"


class ModelVolume(Construct):
    """PersistentVolume (cluster-scoped) and its pre-bound claim in the serving namespace.

    Args:
        config: The deployment config (region, model, namespace, project name).
        gpu_arch: Engine target whose prefix ``models/<model>/<gpu_arch>/`` is mounted, e.g. ``sm86`` or
            ``sm90-1g.10gb``; or, with ``prefix``, the key that names the volume (``hf``).
        bucket_name: Model bucket; a CDK token is fine.
        prefix: The S3 prefix to mount instead of the engine target's (the checkpoint of ``torch`` groups);
            such a volume carries no GPU architecture label.

    Attributes:
        claim_name: Name of the PersistentVolumeClaim pods mount.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: DeploymentConfig,
        gpu_arch: str,
        bucket_name: str,
        prefix: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        name = naming.model_volume_name(gpu_arch)
        namespace = config.serving.namespace
        self.claim_name = name
        arch_label = {} if prefix is not None else {labels.GPU_ARCH_LABEL: gpu_arch}
        k8s.KubePersistentVolume(
            self,
            "Volume",
            metadata=k8s.ObjectMeta(name=name, labels={**naming.app_labels(), **arch_label}),
            spec=k8s.PersistentVolumeSpec(
                capacity={"storage": k8s.Quantity.from_string(NOMINAL_CAPACITY)},
                access_modes=["ReadOnlyMany"],
                persistent_volume_reclaim_policy="Retain",
                storage_class_name="",
                mount_options=mount_options(config, prefix or storage.model_prefix(config.model.name, gpu_arch)),
                claim_ref=k8s.ObjectReference(namespace=namespace, name=name),
                csi=k8s.CsiPersistentVolumeSource(
                    driver=CSI_DRIVER,
                    volume_handle=volume_handle(config, gpu_arch),
                    read_only=True,
                    volume_attributes={"bucketName": bucket_name},
                ),
            ),
        )
        k8s.KubePersistentVolumeClaim(
            self,
            "Claim",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=naming.app_labels()),
            spec=k8s.PersistentVolumeClaimSpec(
                access_modes=["ReadOnlyMany"],
                storage_class_name="",
                volume_name=name,
                resources=k8s.VolumeResourceRequirements(
                    requests={"storage": k8s.Quantity.from_string(NOMINAL_CAPACITY)}
                ),
            ),
        )


def hf_checkpoint_volume(scope: Construct, config: DeploymentConfig, bucket_name: str) -> ModelVolume:
    """The volume of the Hugging Face checkpoint ``models/<model>/hf/`` that every ``torch`` group mounts.

    Named like the per-architecture ones: ``whisper-models-hf`` (no engine target is called ``hf``).
    """
    return ModelVolume(
        scope,
        f"models-{storage.HF_CHECKPOINT_DIR}",
        config=config,
        gpu_arch=storage.HF_CHECKPOINT_DIR,
        bucket_name=bucket_name,
        prefix=storage.hf_checkpoint_prefix(config.model.name),
    )
