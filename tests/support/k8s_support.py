"""Helpers of the chart tests: synthesize charts in memory, load config variants, validate objects
(:mod:`k8s_charts.validation`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import cdk8s
import yaml

from k8s_charts import validation
from k8s_charts.charts import build_charts
from k8s_charts.inputs import PLACEHOLDER_INPUTS, ChartInputs
from settings import DeploymentConfig, load_config, parse_config
from whisper_build.paths import REPO_ROOT

THREE_GROUPS = REPO_ROOT / "config" / "examples" / "three-groups.yaml"
CERTIFICATE_ARN = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
PUBLIC_TLS_ENDPOINT = {
    "scheme": "internet-facing",
    "certificate_arn": CERTIFICATE_ARN,
    "allowed_cidrs": ["203.0.113.0/24"],
}
"""An internet-facing endpoint synthesis accepts: TLS, API keys (default), narrow source ranges."""


def config_with(path: Path | None = None, **overrides: Any) -> DeploymentConfig:
    """Load a config file and override top-level sections, e.g. ``endpoint={"kind": "alb"}``."""
    data = yaml.safe_load((path or REPO_ROOT / "config" / "default.yaml").read_text())
    for section, value in overrides.items():
        if isinstance(value, dict):
            data.setdefault(section, {}).update(value)
        else:
            data[section] = value
    return parse_config(data, "test")


def three_groups() -> DeploymentConfig:
    """The three-group example (g5 sm86, g6e sm89, p5 sm90)."""
    return load_config(THREE_GROUPS)


def synth(config: DeploymentConfig, inputs: ChartInputs = PLACEHOLDER_INPUTS) -> list[dict[str, Any]]:
    """Every manifest of every chart, in apply order (in memory, no files)."""
    app = cdk8s.App()
    charts = build_charts(app, config, inputs)
    return [manifest for chart in charts.all() for manifest in chart.to_json()]


def of_kind(manifests: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    """Objects of one kind keyed by name."""
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def validate(manifest: dict[str, Any], kubernetes_version: str) -> str:
    """:func:`k8s_charts.validation.validate` (core: kubernetes-validate strict; CRs: their CRD)."""
    return validation.validate(manifest, kubernetes_version)


def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """Strict CRD schemas by ``(apiVersion, kind)`` from ``tests/data/crds/``."""
    return validation.crd_schemas()


def discovered_pod_targets(manifests: list[dict[str, Any]]) -> list[dict[str, str]]:
    """What Prometheus ``kubernetes_sd_configs`` role ``pod`` discovers for the pods of every
    workload (Deployment, DaemonSet, …) in ``manifests``, each pod Running and Ready.

    One target per declared container port, with the documented meta labels
    (``__meta_kubernetes_namespace``, ``__meta_kubernetes_pod_name``, ``__meta_kubernetes_pod_phase``,
    ``__meta_kubernetes_pod_ready``, ``__meta_kubernetes_pod_container_port_number``, and
    ``__meta_kubernetes_pod_label_<name>`` with every character outside ``[a-zA-Z0-9_]`` replaced by
    ``_``: Prometheus docs, ``kubernetes_sd_config``).
    """
    targets = []
    for manifest in manifests:
        template = manifest.get("spec", {}).get("template")
        if not template:
            continue
        pod_labels = {
            "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key): value
            for key, value in template["metadata"].get("labels", {}).items()
        }
        for container in template["spec"]["containers"]:
            for port in container.get("ports", []):
                targets.append(
                    {
                        "__meta_kubernetes_namespace": manifest["metadata"]["namespace"],
                        "__meta_kubernetes_pod_name": manifest["metadata"]["name"] + "-abcde",
                        "__meta_kubernetes_pod_phase": "Running",
                        "__meta_kubernetes_pod_ready": "true",
                        "__meta_kubernetes_pod_container_port_number": str(port["containerPort"]),
                        **pod_labels,
                    }
                )
    return targets


def relabel(rules: list[dict[str, Any]], labels: dict[str, str]) -> dict[str, str] | None:
    """Apply Prometheus ``relabel_configs`` (actions ``keep``, ``drop``, ``replace``) to one target.

    Returns the target's labels without ``__``-prefixed ones, or ``None`` when a rule drops it.
    Semantics as documented for Prometheus: source label values joined by ``;``, regex anchored at
    both ends, ``$N`` in ``replacement`` is capture group N.
    """
    labels = dict(labels)
    for rule in rules:
        value = rule.get("separator", ";").join(labels.get(name, "") for name in rule.get("source_labels", []))
        match = re.fullmatch(rule.get("regex", "(.*)"), value)
        action = rule.get("action", "replace")
        if action == "keep" and match is None or action == "drop" and match is not None:
            return None
        if action == "replace" and match is not None:
            replaced = match.expand(re.sub(r"\$(\d+)", r"\\g<\1>", rule.get("replacement", "$1")))
            if replaced:
                labels[rule["target_label"]] = replaced
            else:
                labels.pop(rule["target_label"], None)
    return {key: value for key, value in labels.items() if not key.startswith("__")}


def scraped_by(job: dict[str, Any], manifests: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Labels of the targets one ``scrape_configs`` entry keeps among the pods of ``manifests``
    (its ``kubernetes_sd_configs`` namespace filter, then its relabel rules)."""
    (sd,) = job["kubernetes_sd_configs"]
    namespaces = sd.get("namespaces", {}).get("names")
    kept = []
    for target in discovered_pod_targets(manifests):
        if namespaces is not None and target["__meta_kubernetes_namespace"] not in namespaces:
            continue
        labels = relabel(job["relabel_configs"], target)
        if labels is not None:
            kept.append(labels)
    return kept
