"""What the project knows about SageMaker HyperPod GPU instance types.

The instance types HyperPod accepts are botocore's ``ClusterInstanceType`` enum
(:func:`hyperpod_instance_types`), so a typo is caught at synthesis. GPU and size facts per family
and size are the tables below, from the EC2 accelerated computing instance specifications
(https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) and NVIDIA's compute-capability
list (https://developer.nvidia.com/cuda-gpus); MIG profiles per GPU from NVIDIA's MIG user guide,
"Supported MIG Profiles", and the instance types HyperPod partitions with MIG,
:data:`MIG_INSTANCE_TYPES`, from "Using GPU partitions in Amazon SageMaker HyperPod". Entry points:
:func:`instance_spec_for`, :func:`gpu_for`, :func:`arch_for_compute_capability`. To add a GPU type:
``GPU_FAMILIES``, ``INSTANCE_SIZES`` and ``settings.throughput.GPU_PEAKS`` (README, "Adding a GPU type").
Docs: docs/deploy.md, "Adding a GPU type".
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from settings.regions import service_model

MIG_COMPUTE_SLICES = 7
"""Compute slices (``g``) of a whole MIG-capable GPU: the ``7g`` profile is the full GPU (MIG user guide)."""


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile of one GPU model.

    Attributes:
        name: NVIDIA's profile name, ``<g>g.<memory>gb``, e.g. ``1g.10gb``.
        max_per_gpu: Instances of this profile one GPU holds when it is partitioned into this profile
            only (the ``all-<profile>`` layout of the GPU Operator's MIG manager), e.g. 7 for ``1g.10gb``.
    """

    name: str
    max_per_gpu: int

    @property
    def compute_slices(self) -> int:
        """``g``: sevenths of the GPU's compute (SMs) in this profile, e.g. 1 for ``1g.10gb``."""
        return int(self.name.split("g.", 1)[0])

    @property
    def memory_gb(self) -> int:
        """GPU memory of one instance in GB as the profile name states it, e.g. 10 for ``1g.10gb``."""
        return int(self.name.split(".", 1)[1].removesuffix("gb"))

    @property
    def resource_name(self) -> str:
        """Extended resource of one instance, e.g. ``nvidia.com/mig-1g.10gb``.

        The NVIDIA device plugin advertises it under the ``mixed`` MIG strategy (NVIDIA GPU Operator,
        "GPU Operator with MIG").
        """
        return f"nvidia.com/mig-{self.name}"

    @property
    def mig_config(self) -> str:
        """Value of the ``nvidia.com/mig.config`` node label for this profile, e.g. ``all-1g.10gb``.

        It makes the GPU Operator's MIG manager partition every GPU of the node into this profile (its
        default ``mig-parted`` configuration names one ``all-<profile>`` layout per profile).
        """
        return f"all-{self.name}"


def _mig(*profiles: tuple[str, int]) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, count) for name, count in profiles)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model.

    Attributes:
        name: Marketing name as ``nvidia-smi`` prints it, e.g. ``NVIDIA A10G``.
        compute_capability: CUDA compute capability, e.g. ``"8.6"``.
        memory_gib: GPU memory per GPU in GiB.
        default_capacity: Concurrent Whisper requests one GPU of this model is sized for by default
            (the denominator of the capacity-weighted utilization that drives autoscaling). A starting
            point only: measure with ``bench`` and set ``gpu_groups[].capacity`` in the config.
        mig_profiles: MIG profiles of this GPU (empty: no MIG support, e.g. A10G, L4, L40S).
    """

    name: str
    compute_capability: str
    memory_gib: int
    default_capacity: int
    mig_profiles: tuple[MigProfile, ...] = ()

    def mig_profile(self, name: str) -> MigProfile | None:
        """The profile called ``name`` (e.g. ``1g.10gb``), or ``None`` when this GPU has no such profile."""
        return next((profile for profile in self.mig_profiles if profile.name == name), None)

    @property
    def arch(self) -> str:
        """TensorRT/CUDA architecture name, e.g. ``sm86`` for compute capability 8.6."""
        return "sm" + self.compute_capability.replace(".", "")


@dataclass(frozen=True)
class InstanceSpec:
    """Size of one instance type: ``vcpus`` (count), ``memory_gib`` (GiB) and ``gpus`` (count)."""

    vcpus: int
    memory_gib: int
    gpus: int


A10G = GpuSpec("NVIDIA A10G", "8.6", 24, 8)
L4 = GpuSpec("NVIDIA L4", "8.9", 24, 8)
L40S = GpuSpec("NVIDIA L40S", "8.9", 48, 16)
_MIG_A100_40 = _mig(("1g.5gb", 7), ("1g.10gb", 4), ("2g.10gb", 3), ("3g.20gb", 2), ("4g.20gb", 1), ("7g.40gb", 1))
_MIG_80GB = _mig(("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1))
"""A100 80GB and H100 80GB share the profile names and counts (MIG user guide)."""
_MIG_H200 = _mig(("1g.18gb", 7), ("1g.35gb", 4), ("2g.35gb", 3), ("3g.71gb", 2), ("4g.71gb", 1), ("7g.141gb", 1))

A100_40 = GpuSpec("NVIDIA A100-SXM4-40GB", "8.0", 40, 16, _MIG_A100_40)
A100_80 = GpuSpec("NVIDIA A100-SXM4-80GB", "8.0", 80, 16, _MIG_80GB)
H100 = GpuSpec("NVIDIA H100 80GB HBM3", "9.0", 80, 32, _MIG_80GB)
H200 = GpuSpec("NVIDIA H200", "9.0", 141, 32, _MIG_H200)

MIG_INSTANCE_TYPES = ("ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge")
"""Instance types on which SageMaker HyperPod supports GPU partitioning with MIG (HyperPod "Using GPU
partitions in Amazon SageMaker HyperPod", "Supported Instance Types"; the HyperPod NodeClass page lists
the same four)."""

GPU_FAMILIES: dict[str, GpuSpec] = {
    "g5": A10G,
    "g6": L4,
    "gr6": L4,
    "g6e": L40S,
    "p4d": A100_40,
    "p4de": A100_80,
    "p5": H100,
    "p5e": H200,
    "p5en": H200,
}
"""Instance family (the part between ``ml.`` and the size) → its GPU."""

_G5_G6_SIZES = {
    "xlarge": InstanceSpec(4, 16, 1),
    "2xlarge": InstanceSpec(8, 32, 1),
    "4xlarge": InstanceSpec(16, 64, 1),
    "8xlarge": InstanceSpec(32, 128, 1),
    "12xlarge": InstanceSpec(48, 192, 4),
    "16xlarge": InstanceSpec(64, 256, 1),
    "24xlarge": InstanceSpec(96, 384, 4),
    "48xlarge": InstanceSpec(192, 768, 8),
}

INSTANCE_SIZES: dict[str, dict[str, InstanceSpec]] = {
    "g5": _G5_G6_SIZES,
    "g6": _G5_G6_SIZES,
    "gr6": {"4xlarge": InstanceSpec(16, 128, 1), "8xlarge": InstanceSpec(32, 256, 1)},
    "g6e": {
        "xlarge": InstanceSpec(4, 32, 1),
        "2xlarge": InstanceSpec(8, 64, 1),
        "4xlarge": InstanceSpec(16, 128, 1),
        "8xlarge": InstanceSpec(32, 256, 1),
        "12xlarge": InstanceSpec(48, 384, 4),
        "16xlarge": InstanceSpec(64, 512, 1),
        "24xlarge": InstanceSpec(96, 768, 4),
        "48xlarge": InstanceSpec(192, 1536, 8),
    },
    "p4d": {"24xlarge": InstanceSpec(96, 1152, 8)},
    "p4de": {"24xlarge": InstanceSpec(96, 1152, 8)},
    "p5": {"4xlarge": InstanceSpec(16, 256, 1), "48xlarge": InstanceSpec(192, 2048, 8)},
    "p5e": {"48xlarge": InstanceSpec(192, 2048, 8)},
    "p5en": {"48xlarge": InstanceSpec(192, 2048, 8)},
}
"""Instance family → size → vCPU / memory / GPU count."""


@functools.lru_cache(maxsize=1)
def hyperpod_instance_types() -> frozenset[str]:
    """Instance types SageMaker HyperPod accepts, from botocore's ``ClusterInstanceType`` enum.

    Returns:
        Set of strings such as ``ml.g5.2xlarge``. Read from the SageMaker service model bundled with
        botocore (no AWS call, no credentials).
    """
    from botocore.model import StringShape

    model = service_model("sagemaker")
    shape = model.shape_for("ClusterInstanceType")
    assert isinstance(shape, StringShape), "botocore's ClusterInstanceType is a string enum"
    return frozenset(shape.enum)


def split_instance_type(instance_type: str) -> tuple[str, str]:
    """Split ``ml.g5.2xlarge`` into ``("g5", "2xlarge")``.

    Raises:
        ValueError: if the string is not of the form ``ml.<family>.<size>``.
    """
    parts = instance_type.split(".")
    if len(parts) != 3 or parts[0] != "ml" or not parts[1] or not parts[2]:
        raise ValueError(
            f"'{instance_type}' is not a SageMaker instance type of the form ml.<family>.<size> "
            "(for example ml.g5.2xlarge)"
        )
    return parts[1], parts[2]


def ec2_instance_type(instance_type: str) -> str:
    """The EC2 instance type behind a SageMaker HyperPod one: ``ml.g5.2xlarge`` → ``g5.2xlarge`` (others unchanged)."""
    return instance_type.removeprefix("ml.")


def gpu_for(instance_type: str) -> GpuSpec | None:
    """The GPU of an ``ml.*`` instance type, or ``None`` when the family is not in the catalog."""
    family, _ = split_instance_type(instance_type)
    return GPU_FAMILIES.get(family)


def instance_spec_for(instance_type: str) -> InstanceSpec | None:
    """vCPU/memory/GPU count of an ``ml.*`` instance type, or ``None`` when not in the catalog."""
    family, size = split_instance_type(instance_type)
    return INSTANCE_SIZES.get(family, {}).get(size)


def arch_for_compute_capability(compute_capability: str) -> str:
    """Compute capability → SM name: ``"8.6"`` → ``"sm86"``, ``"9.0"`` → ``"sm90"``, ``"12.0"`` → ``"sm120"``.

    The naming TensorRT-LLM and the S3 layout use.

    Raises:
        ValueError: when the text is not ``<major>.<minor>``.
    """
    match = re.fullmatch(r"\s*(\d{1,2})\.(\d)\s*", compute_capability)
    if not match:
        raise ValueError(f"compute capability '{compute_capability}' is not of the form <major>.<minor>, e.g. 8.6")
    return f"sm{match.group(1)}{match.group(2)}"
