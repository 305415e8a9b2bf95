"""Prometheus scrape configuration: the AMP managed scraper's (Kubernetes discovery) and the
live check's (static local targets), both built from the same job list.

Jobs (names from :mod:`observability.queries`):

* ``whisper-triton``: Triton's metrics port (settings ``serving.triton_metrics_port``, 8002) of
  every pod labelled ``app.kubernetes.io/name=whisper`` in the serving namespace;
* ``whisper-gateway``: the gateway's ``/metrics`` (``serving.gateway_port``, 8080) of the same
  pods, **Ready pods only**, so ``up`` counts ready pods and a pod still loading its engine
  adds no capacity to the autoscaling query;
* ``dcgm-exporter``: NVIDIA DCGM exporter pods (``app.kubernetes.io/name=dcgm-exporter``, port
  9400, upstream chart defaults) in any namespace.

Relabelling turns the pod labels of docs/contracts.md §2 into the metric labels ``gpu_group``,
``gpu_arch``, ``pod``, ``namespace``; ``instance_type`` is set from the GPU group with one rule per
configured group (the group → instance type map of the deployment config), because pods carry no
instance-type label and the managed scraper documents only pod/node metadata of the discovered
object itself. Kubernetes discovery exposes pod label ``a.b/c-d`` as
``__meta_kubernetes_pod_label_a_b_c_d`` (Prometheus ``kubernetes_sd_config`` docs).

AMP managed scraper limits honoured (AMP user guide, "Using an AWS managed collector"): only
``kubernetes_sd_configs`` discovery, scrape interval ≥ 30 s (``ObservabilitySettings``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from observability import queries
from settings import DeploymentConfig
from settings.labels import APP_NAME, APP_NAME_LABEL, GPU_ARCH_LABEL, GPU_GROUP_LABEL

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
        app: ``app.kubernetes.io/name`` value of the pods to scrape.
        port: container port number to scrape (must be declared in the pod spec).
        namespace: restrict discovery to this namespace (``None``: all namespaces).
        ready_only: keep only pods whose Ready condition is true.
    """

    name: str
    app: str
    port: int
    namespace: str | None
    ready_only: bool = False


def scrape_jobs(config: DeploymentConfig) -> tuple[ScrapeJob, ...]:
    """The three jobs of a deployment, ports and namespace from ``config.serving``."""
    serving = config.serving
    return (
        ScrapeJob(queries.JOB_TRITON, APP_NAME, serving.triton_metrics_port, serving.namespace),
        ScrapeJob(queries.JOB_GATEWAY, APP_NAME, serving.gateway_port, serving.namespace, ready_only=True),
        ScrapeJob(queries.JOB_DCGM, DCGM_EXPORTER_APP, DCGM_EXPORTER_PORT, None),
    )


def _meta_pod_label(key: str) -> str:
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _keep(source: str, regex: str) -> dict[str, Any]:
    return {"source_labels": [source], "regex": regex, "action": "keep"}


def _copy(source: str, target: str) -> dict[str, Any]:
    return {"source_labels": [source], "regex": "(.+)", "target_label": target, "replacement": "$1"}


def _instance_type_rules(config: DeploymentConfig) -> list[dict[str, Any]]:
    return [
        {
            "source_labels": ["gpu_group"],
            "regex": re.escape(group.name),
            "target_label": "instance_type",
            "replacement": group.instance_type,
        }
        for group in config.gpu_groups
    ]


def _kubernetes_job(job: ScrapeJob, config: DeploymentConfig, interval: str) -> dict[str, Any]:
    sd: dict[str, Any] = {"role": "pod"}
    if job.namespace is not None:
        sd["namespaces"] = {"names": [job.namespace]}
    relabel = [
        _keep(_meta_pod_label(APP_NAME_LABEL), re.escape(job.app)),
        _keep("__meta_kubernetes_pod_container_port_number", str(job.port)),
        _keep("__meta_kubernetes_pod_phase", "Running"),
    ]
    if job.ready_only:
        relabel.append(_keep("__meta_kubernetes_pod_ready", "true"))
    relabel += [
        _copy(_meta_pod_label(GPU_GROUP_LABEL), "gpu_group"),
        _copy(_meta_pod_label(GPU_ARCH_LABEL), "gpu_arch"),
        _copy("__meta_kubernetes_pod_name", "pod"),
        _copy("__meta_kubernetes_namespace", "namespace"),
        *_instance_type_rules(config),
    ]
    return {
        "job_name": job.name,
        "scrape_interval": interval,
        "metrics_path": "/metrics",
        "kubernetes_sd_configs": [sd],
        "relabel_configs": relabel,
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


def local_scrape_config(
    targets: Mapping[str, Sequence[str]],
    static_labels: Mapping[str, str],
    interval_seconds: float,
    rule_files: Sequence[str] = (),
) -> dict[str, Any]:
    """A Prometheus server config with the same job names but static local targets.

    Used by the live check: the labels that relabelling adds in Kubernetes (``gpu_group``,
    ``gpu_arch``, ``instance_type``, ``pod``) are given as static target labels instead.

    Args:
        targets: job name → ``host:port`` list; every key must be a job of :func:`scrape_jobs`.
        static_labels: labels added to every target.
        interval_seconds: scrape and rule evaluation interval, seconds (> 0).
        rule_files: paths of rule files to load.

    Raises:
        ValueError: unknown job name or non-positive interval.
    """
    known = {queries.JOB_TRITON, queries.JOB_GATEWAY, queries.JOB_DCGM}
    unknown = set(targets) - known
    if unknown:
        raise ValueError(f"unknown scrape job(s) {sorted(unknown)}; known: {sorted(known)}")
    if interval_seconds <= 0:
        raise ValueError(f"scrape interval must be positive seconds, got {interval_seconds}")
    interval = f"{int(interval_seconds * 1000)}ms"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": list(rule_files),
        "scrape_configs": [
            {
                "job_name": job,
                "metrics_path": "/metrics",
                "static_configs": [{"targets": list(hosts), "labels": dict(static_labels)}],
            }
            for job, hosts in targets.items()
        ],
    }
