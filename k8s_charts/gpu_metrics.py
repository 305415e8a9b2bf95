"""GPU metrics: one NVIDIA DCGM exporter DaemonSet per GPU group, for the ``dcgm-exporter`` scrape job.

The scrape job (:mod:`observability.scrape_config`) keeps pods labelled
``app.kubernetes.io/name`` = :data:`~observability.scrape_config.DCGM_EXPORTER_APP` that declare
container port :data:`~observability.scrape_config.DCGM_EXPORTER_PORT`, and turns their
``whisper-hyperpod.io/gpu-group`` / ``gpu-arch`` pod labels into ``gpu_group`` / ``gpu_arch``. One
DaemonSet per group, pinned to that group's nodes, is what gives every GPU series its group: the
exporter itself only knows the node's GPUs.

Entry point: :class:`GpuMetricsExporter` (the details, in its docstring).
Docs: docs/kubernetes.md, "GPU metrics: the DCGM exporter of one GPU group".
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, probes, security
from k8s_charts.placement import gpu_tolerations, group_affinity
from k8s_charts.sizing import quantities
from observability.scrape_config import DCGM_EXPORTER_APP, DCGM_EXPORTER_PORT
from settings import labels
from settings.capacity import SPOT_SUFFIX
from settings.gpu_catalog import ec2_instance_type
from settings.schema import GpuGroup

DCGM_EXPORTER_IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.1-4.8.4-distroless"
"""DCGM exporter 4.8.4 on DCGM 4.6.1, the tag of NVIDIA/dcgm-exporter
``deployment/examples/dcgm-exporter.yaml`` (commit 8dc9e11b, version-synced with the Helm chart by
``hack/versions.py``). DCGM 4.x supports the A10G (sm86), L40S (sm89) and H100 (sm90) GPUs."""

COUNTERS_FILE = "/etc/dcgm-exporter/default-counters.csv"
"""Fields to collect: the image's default list (``etc/default-counters.csv``), which upstream's chart
names as the choice that "stop[s] profiling metrics" (``deployment/values.yaml`` ``arguments``)."""
MIG_COUNTERS_FILE = "/etc/dcgm-exporter/dcp-metrics-included.csv"
"""Fields of a MIG group's exporter: the image's list with profiling fields (``etc/dcp-metrics-included.csv``),
which adds ``DCGM_FI_PROF_GR_ENGINE_ACTIVE``, the per-slice activity (GPU utilization is not reported
per MIG slice), and keeps every gauge :mod:`observability.queries` reads."""


def counters_file(group: GpuGroup) -> str:
    """The exporter's field list for ``group``: :data:`MIG_COUNTERS_FILE` on MIG, else :data:`COUNTERS_FILE`."""
    return MIG_COUNTERS_FILE if group.mig is not None else COUNTERS_FILE


PORT_NAME = "metrics"
HEALTH_PATH = "/health"
HEALTH_INITIAL_DELAY_SECONDS = 45
"""DCGM initialization takes tens of seconds; upstream's chart waits 45 s before probing ``/health``."""

RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "200m", "memory": "256Mi"}}
"""Upstream example's sizing; it fits in the node reserve of :mod:`k8s_charts.sizing`."""


def exporter_env() -> dict[str, str]:
    """Environment of the exporter container (dcgm-exporter reads ``DCGM_EXPORTER_*`` as its flags)."""
    return {
        "DCGM_EXPORTER_LISTEN": f":{DCGM_EXPORTER_PORT}",
        "DCGM_EXPORTER_KUBERNETES": "false",  # no pod attribution: no hostPath (module docstring)
        "NVIDIA_VISIBLE_DEVICES": "all",  # every GPU of the node, none requested from the device plugin
    }


class GpuMetricsExporter(Construct):
    """DaemonSet of the DCGM exporter on the nodes of one GPU group.

    Args:
        namespace: Namespace of the DaemonSet (:func:`k8s_charts.naming.gpu_metrics_namespace`); it
            must admit :func:`k8s_charts.security.gpu_metrics_security_context` (``privileged``).
        group: The GPU group whose nodes run it.

        instance_type: For a group with a priority list: the one listed type whose nodes run it (its pods carry
            the type as a label, which cost by instance type needs); ``None``: every node of the group.
        spot: For a group with a Spot instance group (``capacity.bulk_spot``): ``True`` its Spot nodes only (the
            pods tolerate the Spot taint and carry ``whisper-hyperpod.io/capacity: spot``), ``False`` its
            On-Demand nodes only; ``None``: no Spot group, every node.

    Attributes:
        name: DaemonSet name (``dcgm-exporter-<group>``, ``…-g5-4xlarge`` per type, ``…-spot`` on Spot nodes).
        pod_labels: Labels of its pods (also its selector): the scrape job's app name + group + arch (+ type).

    The exporter sees every GPU of its node without requesting ``nvidia.com/gpu`` (which would take a
    GPU away from serving): the NVIDIA container runtime, the default runtime of the HyperPod / EKS GPU
    AMIs, exposes the devices named by ``NVIDIA_VISIBLE_DEVICES=all`` (NVIDIA/dcgm-exporter
    ``deployment/examples/dcgm-exporter.yaml`` runs the same way). It collects
    :data:`COUNTERS_FILE`, upstream's list without profiling (``DCGM_FI_PROF_*``) fields, which includes
    every DCGM gauge :mod:`observability.queries` reads (GPU utilization, framebuffer used/free, power).

    Not enabled, on purpose: per-pod GPU attribution (``DCGM_EXPORTER_KUBERNETES``), which needs a
    ``hostPath`` mount of the kubelet's pod-resources socket; the dashboards aggregate by GPU group, and
    the scrape relabelling already sets ``pod`` to the exporter pod. The pods get no service-account
    token (the exporter does not call the Kubernetes API), so no ServiceAccount or RBAC is created.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        namespace: str,
        group: GpuGroup,
        instance_type: str | None = None,
        spot: bool | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.name = naming.gpu_metrics_name(group)
        self.pod_labels = naming.group_labels(group, app=DCGM_EXPORTER_APP)
        if instance_type is not None:  # one DaemonSet per type of a priority list: its pods name their type
            self.name += "-" + ec2_instance_type(instance_type).replace(".", "-")
            self.pod_labels[labels.POD_INSTANCE_TYPE_LABEL] = instance_type
        if spot:  # the group's Spot nodes: their own DaemonSet, so their series (and cost) say Spot
            self.name += SPOT_SUFFIX
            self.pod_labels[labels.CAPACITY_LABEL] = labels.SPOT_TAINT_VALUE
        affinity = group_affinity(group, None if instance_type is None else [instance_type], spot=spot)
        health = k8s.Probe(
            http_get=probes.http_get(HEALTH_PATH, PORT_NAME),
            initial_delay_seconds=HEALTH_INITIAL_DELAY_SECONDS,
            period_seconds=10,
            timeout_seconds=5,
            failure_threshold=3,
        )
        container = k8s.Container(
            name="exporter",
            image=DCGM_EXPORTER_IMAGE,
            args=["-f", counters_file(group)],
            env=[k8s.EnvVar(name=key, value=value) for key, value in exporter_env().items()],
            ports=[k8s.ContainerPort(name=PORT_NAME, container_port=DCGM_EXPORTER_PORT, protocol="TCP")],
            resources=k8s.ResourceRequirements(
                requests=quantities(RESOURCES["requests"]), limits=quantities(RESOURCES["limits"])
            ),
            liveness_probe=health,
            readiness_probe=health,
            security_context=security.gpu_metrics_security_context(),
        )
        k8s.KubeDaemonSet(
            self,
            "DaemonSet",
            metadata=k8s.ObjectMeta(
                name=self.name,
                namespace=namespace,
                labels=self.pod_labels,
                annotations=security.checkov_skip_annotations(security.GPU_METRICS_SKIPS),
            ),
            spec=k8s.DaemonSetSpec(
                selector=k8s.LabelSelector(match_labels=self.pod_labels),
                update_strategy=k8s.DaemonSetUpdateStrategy(
                    type="RollingUpdate",
                    rolling_update=k8s.RollingUpdateDaemonSet(max_unavailable=k8s.IntOrString.from_number(1)),
                ),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=self.pod_labels),
                    spec=k8s.PodSpec(
                        containers=[container],
                        affinity=affinity,
                        # the GPU taint, HyperPod's unhealthy-node taint (a failing GPU is when its metrics
                        # matter most) and, on Spot nodes, the Spot taint
                        tolerations=gpu_tolerations(unhealthy_nodes=True, spot_nodes=bool(spot)),
                        security_context=security.node_agent_pod_security_context(),
                        automount_service_account_token=False,
                        enable_service_links=False,
                    ),
                ),
            ),
        )
