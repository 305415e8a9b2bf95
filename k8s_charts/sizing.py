"""CPU, memory and ``/dev/shm`` of one serving pod, sized from its GPU group's instance type.

One pod serves one GPU (``nvidia.com/gpu: 1``) or one MIG slice (``nvidia.com/mig-<profile>: 1``), so
an instance with ``n`` GPUs (or slices) runs ``n`` pods and each gets ``1/n`` of what the node can give after a reserve for the kubelet, the OS and the
node's daemons (VPC CNI, kube-proxy, NVIDIA device plugin, HyperPod health agent, Mountpoint for
S3 pods). The reserve, ``1 vCPU + 5 %`` and ``3 GiB + 10 %``, is above EKS's own kube-reserved
(70–90 m CPU and ``255 MiB + 11 MiB × max pods`` on 8–32 vCPU nodes: EKS AMI
``bootstrap.sh``/nodeadm) so that the daemonsets fit next to the pods.
Docs: docs/kubernetes.md, "The Deployment of one GPU group".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cdk8s_plus_33 import k8s

from settings import throughput
from settings.gpu_catalog import InstanceSpec
from settings.schema import DeploymentConfig, GpuGroup

RESERVED_CPU_BASE = 1.0
RESERVED_CPU_FRACTION = 0.05
RESERVED_MEMORY_GIB_BASE = 3.0
RESERVED_MEMORY_FRACTION = 0.10
SHM_FRACTION = 0.25
SHM_MAX_MIB = 16 * 1024
"""``/dev/shm`` is a quarter of the pod's memory, at most 16 GiB: Triton's python backend moves
every request and response through it (``shm-default-byte-size``; Docker's 64 MB default is too
small for batches of 30 s windows). It counts against the memory limit."""


@dataclass(frozen=True)
class PodResources:
    """Per-pod requests (= limits, Guaranteed QoS) in Kubernetes units.

    Attributes:
        cpu_millicores: CPU in millicores (``m``).
        memory_mib: memory in MiB (``Mi``).
        shm_mib: size limit of the memory-backed ``/dev/shm`` volume in MiB, part of ``memory_mib``.
    """

    cpu_millicores: int
    memory_mib: int
    shm_mib: int

    @property
    def cpu(self) -> str:
        """Kubernetes quantity, e.g. ``6500m``."""
        return f"{self.cpu_millicores}m"

    @property
    def memory(self) -> str:
        """Kubernetes quantity, e.g. ``26214Mi``."""
        return f"{self.memory_mib}Mi"

    @property
    def shm(self) -> str:
        """Kubernetes quantity, e.g. ``6553Mi``."""
        return f"{self.shm_mib}Mi"


def pod_resources(instance: InstanceSpec, pods_per_node: int | None = None) -> PodResources:
    """Resources of one serving pod on ``instance``.

    Args:
        instance: The node's size.
        pods_per_node: Serving pods one node holds (``GpuGroup.pods_per_node``: one per GPU, or one
            per MIG slice); default one per GPU.

    Raises:
        ValueError: the instance has no GPU or leaves no CPU/memory after the reserve.
    """
    if instance.gpus < 1:
        raise ValueError(f"instance {instance} has no GPU; serving pods need one GPU each")
    pods = pods_per_node or instance.gpus
    cpu = instance.vcpus - RESERVED_CPU_BASE - RESERVED_CPU_FRACTION * instance.vcpus
    memory_gib = instance.memory_gib - RESERVED_MEMORY_GIB_BASE - RESERVED_MEMORY_FRACTION * instance.memory_gib
    if cpu <= 0 or memory_gib <= 0:
        raise ValueError(f"instance {instance} is too small for a serving pod after the system reserve")
    cpu_m = math.floor(cpu * 1000 / pods / 100) * 100
    memory_mib = math.floor(memory_gib * 1024 / pods)
    return PodResources(cpu_m, memory_mib, min(SHM_MAX_MIB, math.floor(memory_mib * SHM_FRACTION)))


GATEWAY_CPU_SHARE = 0.5
"""Part of the serving pod's CPU given to gateway worker processes; the rest is Triton's (its
frontends, the python-backend stub, the engine's host work) and the supervisor's."""
MAX_GATEWAY_WORKERS = 8
"""Most gateway workers per pod: one worker costs ~7–17 ms of CPU per single-window request after
the libsndfile/base64 fast paths (docs/benchmarks.md "Gateway cost, after"), so 8 serve far more
requests per second than one GPU transcribes."""


def gateway_workers(resources: PodResources, capacity: int) -> int:
    """``WHISPER_GATEWAY_WORKERS`` for a pod: one per whole core of :data:`GATEWAY_CPU_SHARE` of its CPU.

    At least 1, at most :data:`MAX_GATEWAY_WORKERS` and at most ``capacity`` (each worker admits
    at least one request). E.g. 2800m (g5.xlarge) → 1, 6600m (g5.2xlarge) → 3, 11100m (a quarter
    of g6e.12xlarge) → 5.
    """
    by_cpu = math.floor(resources.cpu_millicores * GATEWAY_CPU_SHARE / 1000)
    return max(1, min(by_cpu, MAX_GATEWAY_WORKERS, capacity))


def quantities(values: dict[str, str]) -> dict[str, k8s.Quantity]:
    """Resource map (``{"cpu": "100m", "memory": "128Mi"}``) as Kubernetes quantities."""
    return {key: k8s.Quantity.from_string(value) for key, value in values.items()}


def predicted_rtf(config: DeploymentConfig, group: GpuGroup, group_size: int = 16) -> float:
    """The RTF a long request gets on one pod of ``group`` (``WHISPER_GATEWAY_PREDICTED_RTF``), from ``settings.throughput``.

    A long request's windows go to the model ``group_size`` at a time (the gateway's
    ``window_group_size``, 16 by default), so its figure is the table's at the largest batch not
    above that, for the group's GPU, serving engine and the configured model — measured, or a
    conservative estimate (``settings.throughput``); on a MIG slice scaled by the share of the GPU's
    compute the slice has (``settings.throughput.mig_share``).

    Raises:
        UnknownThroughput: no figure for this GPU, engine and model.
    """
    device = throughput.device_for_instance_type(group.instance_type)
    rtf = throughput.throughput_at(device, group.serving_engine, config.model.name, group_size).rtf
    if group.mig is not None:
        rtf /= throughput.mig_share(group.mig)
    return rtf
