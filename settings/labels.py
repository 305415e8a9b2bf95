"""Kubernetes label keys shared by the HyperPod instance groups, the pods and the scrapers.

See ``docs/contracts.md`` §2. HyperPod keeps ``KubernetesConfig.Labels`` of an instance group on
every node of that group, also across node replacement (SageMaker API reference,
``ClusterKubernetesConfig``).
"""

GPU_GROUP_LABEL = "whisper-hyperpod.io/gpu-group"
"""Node/pod label whose value is the GPU group name (e.g. ``g5``)."""

GPU_ARCH_LABEL = "whisper-hyperpod.io/gpu-arch"
"""Node/pod label whose value is the GPU architecture (e.g. ``sm86``)."""

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
"""Well-known label HyperPod sets to the ``ml.*`` instance type (the ``ml.`` prefix is kept)."""

APP_NAME_LABEL = "app.kubernetes.io/name"
APP_NAME = "whisper"
BULK_APP_NAME = "whisper-bulk"
"""``app.kubernetes.io/name`` of the bulk worker pods: not ``APP_NAME``, so the serving Service never selects them."""

METRIC_LABELS = ("gpu_group", "gpu_arch", "instance_type", "pod")
"""Labels the scrape configs add to every series (Prometheus label names)."""

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
"""Node label the NVIDIA GPU Operator's MIG manager reads: the MIG layout to apply, e.g. ``all-1g.10gb``
(a layout of its default ``mig-parted`` config; NVIDIA GPU Operator docs, "GPU Operator with MIG")."""

KEDA_PAUSE_ANNOTATION = "autoscaling.keda.sh/paused-replicas"
"""ScaledObject annotation that makes KEDA scale the target to the given count and stop
autoscaling until it is removed (keda-docs 2.18 ``reference/scaledobject-spec.md``, "Pause autoscaling")."""

GPU_TAINT_KEY = "nvidia.com/gpu"
"""Taint (effect ``NoSchedule``, value ``true``) on every HyperPod GPU node, so that only pods that
tolerate it (the Whisper serving pods, GPU DaemonSets) land there; system pods stay on the CPU nodes."""
GPU_TAINT_VALUE = "true"
GPU_TAINT_EFFECT = "NoSchedule"

CAPACITY_LABEL = "whisper-hyperpod.io/capacity"
"""Node label of a Spot instance group (``spot``); On-Demand groups carry none (their templates stay as they were)."""
SPOT_TAINT_KEY = CAPACITY_LABEL
SPOT_TAINT_VALUE = "spot"
SPOT_TAINT_EFFECT = "NoSchedule"
"""Taint of Spot nodes: only bulk workers (checkpointed, resumable) tolerate it, so serving pods never land there."""

POD_INSTANCE_TYPE_LABEL = "whisper-hyperpod.io/instance-type"
"""Pod label with its node's instance type, written after scheduling by the pod ranker
(``whisper_build/capacity/pod_ranker.py``) for pods of a flexible group: a pod cannot read its node's labels."""
