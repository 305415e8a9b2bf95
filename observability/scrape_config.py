"""Prometheus scrape configuration: the AMP managed scraper's and the live check's.

The managed scraper's uses Kubernetes discovery; the live check's uses static local targets carrying
the Kubernetes discovery labels. Both come from one job list (:func:`scrape_jobs`: Triton, the
gateway — Ready pods only, so ``up`` counts ready pods —, the bulk workers and their Triton, the
DCGM exporter) and the same relabel rules (:func:`relabel_configs`: pod labels of docs/contracts.md
§2 → ``gpu_group``, ``gpu_arch``, ``pod``, ``namespace``, ``instance_type``: per single-type group a rule,
for a priority list the pod label the pod ranker writes). Entry points:
:func:`scrape_config`, :func:`scrape_config_yaml`. AMP managed scraper limits honoured (AMP user
guide, "Using an AWS managed collector"): only ``kubernetes_sd_configs``, interval ≥ 30 s.
Docs: docs/observability.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from observability import queries
from observability.bulk_queries import JOB_BULK, JOB_BULK_TRITON
from settings import DeploymentConfig
from settings.fleet import spot_groups
from settings.labels import (
    APP_NAME,
    APP_NAME_LABEL,
    BULK_APP_NAME,
    CAPACITY_LABEL,
    GPU_ARCH_LABEL,
    GPU_GROUP_LABEL,
    POD_INSTANCE_TYPE_LABEL,
)

DCGM_EXPORTER_APP = "dcgm-exporter"
"""``app.kubernetes.io/name`` of the NVIDIA dcgm-exporter Helm chart's pods."""

DCGM_EXPORTER_PORT = 9400
"""dcgm-exporter's default listen port (``-a :9400``, NVIDIA dcgm-exporter README)."""

SCRAPE_TIMEOUT_SECONDS = 10


@dataclass(frozen=True)
class ScrapeJob:
    """One scrape job: which pods and port, and whether only Ready pods count.

    Attributes:
        name: ``job`` label value.
        app: ``app.kubernetes.io/name`` value of the pods to scrape; ``None``: every pod of the namespace
            that declares the port (the inference operator's pods carry the operator's labels, not ours).
        port: container port number to scrape (must be declared in the pod spec).
        namespace: restrict discovery to this namespace (``None``: all namespaces).
        ready_only: keep only pods whose Ready condition is true.
    """

    name: str
    app: str | None
    port: int
    namespace: str | None
    ready_only: bool = False


def gateway_metrics_port(config: DeploymentConfig) -> int:
    """Port of the gateway's ``/metrics``.

    ``serving.gateway_metrics_port`` (off the traffic port) for Deployments, the traffic port on
    inference operator workers (``k8s_charts.workload.metrics_env``).
    """
    serving = config.serving
    return serving.gateway_metrics_port if serving.target == "deployments" else serving.gateway_port


def scrape_jobs(config: DeploymentConfig) -> tuple[ScrapeJob, ...]:
    """The jobs of a deployment (three; with ``bulk.enabled`` also ``whisper-bulk`` and ``whisper-bulk-triton``), ports and namespace from ``config.serving``.

    With ``serving.target: inference_operator`` the serving jobs keep every pod of the serving
    namespace that declares the port (the operator's pods do not carry ``app.kubernetes.io/name=whisper``;
    the namespace holds nothing else).

    Jobs (names from :mod:`observability.queries`): ``whisper-triton``: Triton's metrics port
    (``serving.triton_metrics_port``, 8002) of every pod labelled ``app.kubernetes.io/name=whisper`` in
    the serving namespace; ``whisper-gateway``: the gateway's ``/metrics`` on its own port
    (``serving.gateway_metrics_port``, 8081; the traffic port serves no metrics) of the same pods,
    **Ready pods only**, so a pod still loading its engine adds no capacity to the autoscaling query;
    ``whisper-bulk`` (``bulk.enabled``): the bulk workers' ``/metrics``
    (``app.kubernetes.io/name=whisper-bulk``), any pod that runs; ``whisper-bulk-triton``: the Triton of
    the same bulk pods, its ``job`` label keeping these ``nv_*`` series out of the serving panels
    (``job="whisper-triton"``); ``dcgm-exporter``: NVIDIA DCGM exporter pods
    (``app.kubernetes.io/name=dcgm-exporter``, port 9400, upstream chart defaults) in any namespace.
    """
    serving = config.serving
    app = APP_NAME if serving.target == "deployments" else None
    jobs = (
        ScrapeJob(queries.JOB_TRITON, app, serving.triton_metrics_port, serving.namespace),
        ScrapeJob(queries.JOB_GATEWAY, app, gateway_metrics_port(config), serving.namespace, ready_only=True),
        ScrapeJob(queries.JOB_DCGM, DCGM_EXPORTER_APP, DCGM_EXPORTER_PORT, None),
    )
    if not config.bulk.enabled:
        return jobs
    # the bulk workers' /metrics and their Triton's (k8s_charts.bulk declares both ports)
    return (
        *jobs,
        ScrapeJob(JOB_BULK, BULK_APP_NAME, serving.gateway_metrics_port, serving.namespace),
        ScrapeJob(JOB_BULK_TRITON, BULK_APP_NAME, serving.triton_metrics_port, serving.namespace),
    )


def _meta_pod_label(key: str) -> str:
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _keep(source: str, regex: str) -> dict[str, Any]:
    return {"source_labels": [source], "regex": regex, "action": "keep"}


def _copy(source: str, target: str) -> dict[str, Any]:
    return {"source_labels": [source], "regex": "(.+)", "target_label": target, "replacement": "$1"}


def _instance_type_rules(config: DeploymentConfig) -> list[dict[str, Any]]:
    """One group → type rule per single-type group; a flexible group copies its pods' instance-type label."""
    return [
        {
            "source_labels": ["gpu_group"],
            "regex": re.escape(group.name),
            "target_label": "instance_type",
            "replacement": group.instance_type,
        }
        if not group.flexible
        else {
            "source_labels": ["gpu_group", _META_POD_INSTANCE_TYPE],
            "separator": ";",
            "regex": re.escape(group.name) + ";(.+)",
            "target_label": "instance_type",
            "replacement": "$1",
        }
        for group in config.gpu_groups
    ]


_META_APP = _meta_pod_label(APP_NAME_LABEL)
_META_GPU_GROUP = _meta_pod_label(GPU_GROUP_LABEL)
_META_GPU_ARCH = _meta_pod_label(GPU_ARCH_LABEL)
_META_POD_INSTANCE_TYPE = _meta_pod_label(POD_INSTANCE_TYPE_LABEL)
_META_CAPACITY = _meta_pod_label(CAPACITY_LABEL)
CAPACITY_METRIC_LABEL = "capacity"
"""``spot`` on the series of a Spot node's exporter (fleets with a Spot group only); absent elsewhere."""
_META_PORT = "__meta_kubernetes_pod_container_port_number"
_META_PHASE = "__meta_kubernetes_pod_phase"
_META_READY = "__meta_kubernetes_pod_ready"
_META_POD_NAME = "__meta_kubernetes_pod_name"
_META_NAMESPACE = "__meta_kubernetes_namespace"
_RUNNING = "Running"


def relabel_configs(job: ScrapeJob, config: DeploymentConfig) -> list[dict[str, Any]]:
    """The job's ``relabel_configs``: keep the job's pods and port, then copy the pod labels.

    Keeps Running pods (Ready too if ``job.ready_only``) on the job's port, then copies pod labels to
    ``gpu_group``, ``gpu_arch``, ``pod``, ``namespace`` and sets ``instance_type`` from ``gpu_group``
    (one rule per configured group).

    Reads only ``__meta_kubernetes_*`` labels of Kubernetes pod discovery (Prometheus
    ``kubernetes_sd_config`` docs); no address rewriting (discovery's ``__address__`` is already
    ``podIP:containerPort``). Used verbatim by the AMP scraper config and the local config.

    ``instance_type`` is set from the GPU group with one rule per configured group, because pods
    carry no instance-type label and the managed scraper documents only pod/node metadata of the
    discovered object itself. Kubernetes discovery exposes pod label ``a.b/c-d`` as
    ``__meta_kubernetes_pod_label_a_b_c_d`` (Prometheus ``kubernetes_sd_config`` docs).
    """
    relabel = [_keep(_META_APP, re.escape(job.app))] if job.app is not None else []
    relabel += [
        _keep(_META_PORT, str(job.port)),
        _keep(_META_PHASE, _RUNNING),
    ]
    if job.ready_only:
        relabel.append(_keep(_META_READY, "true"))
    relabel += [
        _copy(_META_GPU_GROUP, "gpu_group"),
        _copy(_META_GPU_ARCH, "gpu_arch"),
        _copy(_META_POD_NAME, "pod"),
        _copy(_META_NAMESPACE, "namespace"),
        *_instance_type_rules(config),
    ]
    if spot_groups(config):  # the exporters of Spot nodes say so (k8s_charts.gpu_metrics); the cost rules price them
        relabel.append(_copy(_META_CAPACITY, CAPACITY_METRIC_LABEL))
    return relabel


def _kubernetes_job(job: ScrapeJob, config: DeploymentConfig, interval: str) -> dict[str, Any]:
    sd: dict[str, Any] = {"role": "pod"}
    if job.namespace is not None:
        sd["namespaces"] = {"names": [job.namespace]}
    return {
        "job_name": job.name,
        "scrape_interval": interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [sd],
        "relabel_configs": relabel_configs(job, config),
    }


def scrape_config(config: DeploymentConfig) -> dict[str, Any]:
    """The AMP managed scraper's configuration (Prometheus ``scrape_config`` shape) as a dict."""
    interval = f"{config.observability.scrape_interval_seconds}s"
    return {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": f"{SCRAPE_TIMEOUT_SECONDS}s",
            "external_labels": {"cluster": config.project_name},
        },
        "scrape_configs": [_kubernetes_job(job, config, interval) for job in scrape_jobs(config)],
    }


def scrape_config_yaml(config: DeploymentConfig) -> str:
    """:func:`scrape_config` as YAML text (the scraper's ``ConfigurationBlob``)."""
    return yaml.safe_dump(scrape_config(config), sort_keys=False, width=200)


@dataclass(frozen=True)
class LocalPod:
    """A local process standing in for one pod that Kubernetes pod discovery would find.

    Attributes:
        address: ``host:port`` actually scraped (e.g. ``127.0.0.1:40123``).
        name: pod name (becomes the ``pod`` label).
        namespace: pod namespace (becomes the ``namespace`` label).
        gpu_group: value of the pod label ``whisper-hyperpod.io/gpu-group``.
        gpu_arch: value of the pod label ``whisper-hyperpod.io/gpu-arch``.
        ready: the pod's Ready condition.
    """

    address: str
    name: str
    namespace: str
    gpu_group: str
    gpu_arch: str
    ready: bool = True


def discovered_labels(job: ScrapeJob, pod: LocalPod) -> dict[str, str]:
    """The ``__meta_kubernetes_*`` labels pod discovery gives ``pod``'s target, as label name → value.

    The target is ``pod``'s declared container port ``job.port`` (a Running pod labelled
    ``app.kubernetes.io/name=job.app``); the labels are those :func:`relabel_configs` reads.
    """
    return {
        _META_APP: job.app or "",
        _META_GPU_GROUP: pod.gpu_group,
        _META_GPU_ARCH: pod.gpu_arch,
        _META_PORT: str(job.port),
        _META_PHASE: _RUNNING,
        _META_READY: "true" if pod.ready else "false",
        _META_POD_NAME: pod.name,
        _META_NAMESPACE: pod.namespace,
    }


def local_scrape_config(
    config: DeploymentConfig,
    pods: Mapping[str, Sequence[LocalPod]],
    interval_seconds: float,
    rule_files: Sequence[str] = (),
) -> dict[str, Any]:
    """A Prometheus server config like :func:`scrape_config`, with static local targets for discovery.

    Same jobs and the same relabel rules as :func:`scrape_config`, but static local targets in place of
    Kubernetes discovery.

    Each target carries the ``__meta_kubernetes_*`` labels discovery would give it
    (:func:`discovered_labels`) and the job's production :func:`relabel_configs` run on them in
    Prometheus, so ``gpu_group``, ``gpu_arch``, ``instance_type``, ``pod``, ``namespace`` and
    the Ready-only filter come from the real rules. Two things cannot apply locally: discovery's
    namespace restriction (a discovery setting, not a relabel rule) and ``__address__``, which is
    the local process's ``host:port`` instead of ``podIP:containerPort`` (the port meta label
    still holds the declared container port the rules keep).

    Args:
        config: deployment config (jobs, ports, GPU group → instance type map).
        pods: job name → local pods; every key must be a job of :func:`scrape_jobs`.
        interval_seconds: scrape and rule evaluation interval, seconds (> 0).
        rule_files: paths of rule files to load.

    Raises:
        ValueError: unknown job name or non-positive interval.
    """
    jobs = {job.name: job for job in scrape_jobs(config)}
    unknown = set(pods) - set(jobs)
    if unknown:
        raise ValueError(f"unknown scrape job(s) {sorted(unknown)}; known: {sorted(jobs)}")
    if interval_seconds <= 0:
        raise ValueError(f"scrape interval must be positive seconds, got {interval_seconds}")
    interval = f"{int(interval_seconds * 1000)}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": list(rule_files),
        "scrape_configs": [
            {
                "job_name": name,
                "metrics_path": "/metrics",
                "static_configs": [
                    {"targets": [pod.address], "labels": discovered_labels(jobs[name], pod)} for pod in job_pods
                ],
                "relabel_configs": relabel_configs(jobs[name], config),
            }
            for name, job_pods in pods.items()
        ],
    }
