"""Names and labels of the Kubernetes objects, derived from the deployment config.

Labels follow ``docs/contracts.md`` §2 (``settings.labels``): every serving pod carries the app
label plus its GPU group and architecture, which the scrape relabelling turns into the
``gpu_group`` / ``gpu_arch`` metric labels and the Service selects on (app label only, so one
endpoint spans every group).
"""

from __future__ import annotations

from settings import labels
from settings.schema import GpuGroup

MODEL_VOLUME_PREFIX = "whisper-models"


def app_labels() -> dict[str, str]:
    """Labels shared by every serving pod of every GPU group (the Service selector)."""
    return {labels.APP_NAME_LABEL: labels.APP_NAME}


def group_labels(group: GpuGroup) -> dict[str, str]:
    """Pod labels of one GPU group: app + group + architecture (also the Deployment selector)."""
    return {**app_labels(), labels.GPU_GROUP_LABEL: group.name, labels.GPU_ARCH_LABEL: group.arch}


def workload_name(group: GpuGroup) -> str:
    """Deployment / PDB / ScaledObject name of a group, e.g. ``whisper-g5``."""
    return f"{labels.APP_NAME}-{group.name}"


def model_volume_name(gpu_arch: str) -> str:
    """PersistentVolume and claim name of one architecture's model prefix, e.g. ``whisper-models-sm86``."""
    return f"{MODEL_VOLUME_PREFIX}-{gpu_arch}"
