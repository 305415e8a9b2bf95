"""The bulk workers' Triton is scraped as job ``whisper-bulk-triton``; the serving job keeps only serving pods.

Relabel ``keep`` regexes are anchored (Prometheus ``relabel_config`` docs), so a rule is checked here
as ``re.fullmatch`` over the labels pod discovery gives a target (:func:`discovered_labels`).
"""

from __future__ import annotations

import re

from cdk_assembly import CONFIGS
from k8s_support import of_kind, synth

from observability.bulk_queries import JOB_BULK_TRITON
from observability.queries import JOB_TRITON
from observability.scrape_config import ScrapeJob, relabel_configs, scrape_jobs
from settings import DeploymentConfig, load_config
from settings.labels import APP_NAME, BULK_APP_NAME


def _kept(job: ScrapeJob, labels: dict[str, str], config: DeploymentConfig) -> bool:
    """Whether ``job``'s keep rules keep a target with these discovered labels."""
    keeps = [rule for rule in relabel_configs(job, config) if rule.get("action") == "keep"]
    return all(re.fullmatch(rule["regex"], labels.get(rule["source_labels"][0], "")) for rule in keeps)


def _target(app: str, port: int) -> dict[str, str]:
    return {
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
        "__meta_kubernetes_pod_container_port_number": str(port),
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": "true",
    }


def test_bulk_triton_has_its_own_job_and_serving_triton_keeps_serving_pods_only() -> None:
    bulk = load_config(CONFIGS["bulk"])
    jobs = {job.name: job for job in scrape_jobs(bulk)}
    port = bulk.serving.triton_metrics_port
    assert _kept(jobs[JOB_BULK_TRITON], _target(BULK_APP_NAME, port), bulk)
    assert not _kept(jobs[JOB_BULK_TRITON], _target(APP_NAME, port), bulk)
    assert not _kept(jobs[JOB_TRITON], _target(BULK_APP_NAME, port), bulk)
    assert _kept(jobs[JOB_TRITON], _target(APP_NAME, port), bulk)
    assert JOB_BULK_TRITON not in {job.name for job in scrape_jobs(load_config(CONFIGS["default"]))}


def test_bulk_pods_declare_tritons_metrics_port() -> None:
    """Pod discovery makes a target of each declared container port only."""
    bulk = load_config(CONFIGS["bulk"])
    pod = of_kind(synth(bulk), "Deployment")["whisper-bulk-g6e"]["spec"]["template"]["spec"]
    (worker,) = [c for c in pod["containers"] if c["name"] == "worker"]
    assert bulk.serving.triton_metrics_port in {p["containerPort"] for p in worker["ports"]}
