"""Helpers of the chart tests: synthesize charts in memory, load config variants, validate objects
(:mod:`k8s_charts.validation`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cdk8s
import yaml

from k8s_charts import validation
from k8s_charts.charts import build_charts
from k8s_charts.inputs import PLACEHOLDER_INPUTS, ChartInputs
from settings import DeploymentConfig, load_config, parse_config

REPO = Path(__file__).resolve().parent.parent
THREE_GROUPS = REPO / "config" / "examples" / "three-groups.yaml"


def config_with(path: Path | None = None, **overrides: Any) -> DeploymentConfig:
    """Load a config file and override top-level sections, e.g. ``endpoint={"kind": "alb"}``."""
    data = yaml.safe_load((path or REPO / "config" / "default.yaml").read_text())
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
