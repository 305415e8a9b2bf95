"""Schema validation of synthesized manifests (the gate of ``make synth`` and the chart tests).

Core objects: ``kubernetes-validate`` in strict mode (unknown fields fail) for the cluster's
Kubernetes version (it picks the newest schema it ships that is not newer). Custom resources: the
``openAPIV3Schema`` of their CRD (``tests/data/crds/``, upstream files plus the HyperpodNodeClass
schema written from the HyperPod docs), made strict the same way — ``additionalProperties: false``
wherever a schema lists properties and does not preserve unknown fields — as
``kubectl apply --validate=strict`` would reject unknown fields.
Docs: docs/kubernetes.md, "Validation".
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from whisper_build.paths import REPO_ROOT

CRD_DIR = REPO_ROOT / "tests" / "data" / "crds"


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
def crd_schemas(crd_dir: Path = CRD_DIR) -> dict[tuple[str, str], dict[str, Any]]:
    """``(apiVersion, kind)`` → strict JSON schema, for every served version of every CRD in ``crd_dir``."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for file in sorted(crd_dir.glob("*.yaml")):
        for crd in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                if version.get("served"):
                    schema = _strict(version["schema"]["openAPIV3Schema"])
                    # metadata is checked by the API server as ObjectMeta, not by the CRD schema
                    schema["properties"] = {**schema["properties"], "metadata": {"type": "object"}}
                    schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


def validate(manifest: dict[str, Any], kubernetes_version: str, crd_dir: Path = CRD_DIR) -> str:
    """Validate one object; returns what it was validated against (``k8s:1.33``, ``crd:keda.sh/v1alpha1/ScaledObject``).

    Raises:
        jsonschema.ValidationError: a custom resource does not match its CRD.
        kubernetes_validate.ValidationError: a core object does not match the Kubernetes schema.
        kubernetes_validate.SchemaNotFoundError: a kind neither Kubernetes nor a known CRD defines.
    """
    key = (manifest["apiVersion"], manifest["kind"])
    schemas = crd_schemas(crd_dir)
    if key in schemas:
        jsonschema.Draft7Validator(schemas[key]).validate(manifest)
        return "crd:" + "/".join(key)
    return "k8s:" + kubernetes_validate.validate(manifest, kubernetes_version, strict=True)


def validate_files(files: list[Path], kubernetes_version: str) -> list[str]:
    """Validate every object of every YAML file.

    Returns:
        One line per problem, ``<file>: <kind>/<name>: <reason>``; empty when all objects validate.
    """
    problems: list[str] = []
    for file in files:
        for manifest in yaml.safe_load_all(file.read_text(encoding="utf-8")):
            if not manifest:
                continue
            name = f"{manifest.get('kind')}/{manifest.get('metadata', {}).get('name')}"
            try:
                validate(manifest, kubernetes_version)
            except (jsonschema.ValidationError, kubernetes_validate.ValidationError) as err:
                problems.append(f"{file}: {name}: {getattr(err, 'message', err)}")
            except kubernetes_validate.SchemaNotFoundError as err:
                problems.append(f"{file}: {name}: no schema ({err})")
    return problems
