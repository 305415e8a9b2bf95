"""Helpers of the chart tests: synthesize charts in memory and validate every object.

Core objects are validated with ``kubernetes-validate`` (strict: unknown fields fail) for the
cluster's Kubernetes version; custom resources against the ``openAPIV3Schema`` of their CRD in
``tests/data/crds/``, made strict the same way (``additionalProperties: false`` wherever the schema
lists properties and does not preserve unknown fields), as ``kubectl apply --validate=strict`` would.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import cdk8s
import jsonschema
import kubernetes_validate
import yaml

from k8s_charts.charts import build_charts
from k8s_charts.inputs import PLACEHOLDER_INPUTS, ChartInputs
from settings import DeploymentConfig, load_config, parse_config

REPO = Path(__file__).resolve().parent.parent
CRD_DIR = Path(__file__).resolve().parent / "data" / "crds"
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


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Copy of an OpenAPI v3 schema with ``additionalProperties: false`` on every object that lists properties."""
    schema = dict(schema)
    if "properties" in schema:
        schema["properties"] = {name: _strict(sub) for name, sub in schema["properties"].items()}
        if "additionalProperties" not in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema["additionalProperties"] = False
    if isinstance(schema.get("items"), dict):
        schema["items"] = _strict(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        schema["additionalProperties"] = _strict(schema["additionalProperties"])
    for combinator in ("allOf", "anyOf", "oneOf"):
        if combinator in schema:
            schema[combinator] = [_strict(sub) for sub in schema[combinator]]
    return schema


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """``(apiVersion, kind)`` → strict JSON schema, for every served version of every CRD file."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for file in sorted(CRD_DIR.glob("*.yaml")):
        for crd in yaml.safe_load_all(file.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schema = _strict(version["schema"]["openAPIV3Schema"])
                    # metadata is validated by the API server's ObjectMeta, not by the CRD schema
                    schema["properties"]["metadata"] = {"type": "object"}
                    schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


def validate(manifest: dict[str, Any], kubernetes_version: str) -> str:
    """Validate one object; returns what it was validated against.

    Raises:
        jsonschema.ValidationError / kubernetes_validate.ValidationError: the object is invalid.
    """
    key = (manifest["apiVersion"], manifest["kind"])
    if key in crd_schemas():
        jsonschema.Draft7Validator(crd_schemas()[key]).validate(manifest)
        return "crd:" + "/".join(key)
    return "k8s:" + kubernetes_validate.validate(manifest, kubernetes_version, strict=True)
