"""Names and labels of the Kubernetes objects, derived from the deployment config.

Labels follow ``docs/contracts.md`` §2 (``settings.labels``): every serving pod carries the app
label plus its GPU group and architecture, which the scrape relabelling turns into the
``gpu_group`` / ``gpu_arch`` metric labels and the Service selects on (app label only, so one
endpoint spans every group).
"""

from __future__ import annotations

from settings import labels
from settings.names import workload_name  # noqa: F401 (re-exported)
from settings.schema import GpuGroup
from settings.storage import kubernetes_name

MODEL_VOLUME_PREFIX = "whisper-models"
SERVING_SERVICE_ACCOUNT = f"{labels.APP_NAME}-serving"
"""ServiceAccount of the serving pods; the workloads stack associates it (EKS Pod Identity) with the
role that may read the gateway's API keys secret."""


def app_labels() -> dict[str, str]:
    """Labels shared by every serving pod of every GPU group (the Service selector)."""
    return {labels.APP_NAME_LABEL: labels.APP_NAME}


def group_labels(group: GpuGroup, app: str = labels.APP_NAME) -> dict[str, str]:
    """Pod labels of one GPU group: ``app.kubernetes.io/name`` = ``app`` + group + architecture.

    The name label is also the Deployment / DaemonSet selector. The scrape relabelling reads the last
    two.
    """
    return {labels.APP_NAME_LABEL: app, labels.GPU_GROUP_LABEL: group.name, labels.GPU_ARCH_LABEL: group.arch}


def model_volume_name(gpu_arch: str) -> str:
    """PersistentVolume and claim name of one engine target's model prefix, e.g. ``whisper-models-sm86``.

    A MIG target gets its dot-free form: ``whisper-models-sm90-1g-10gb``.
    """
    return f"{MODEL_VOLUME_PREFIX}-{kubernetes_name(gpu_arch)}"


def gpu_metrics_namespace(serving_namespace: str) -> str:
    """Namespace of the GPU metrics exporters, e.g. ``whisper-gpu-metrics``."""
    return f"{serving_namespace}-gpu-metrics"


def gpu_metrics_name(group: GpuGroup) -> str:
    """DaemonSet name of a group's GPU metrics exporter, e.g. ``dcgm-exporter-g5``."""
    return f"dcgm-exporter-{group.name}"
