"""The reserved-namespace constant and the synthesized templates agree (system namespaces)."""

from __future__ import annotations

import json
import re

import pytest
from cdk_assembly import CONFIGS, synthesized

from settings.namespaces import ADDON_NAMESPACES, HYPERPOD_CHART, RESERVED_NAMESPACES

_NAMESPACE = re.compile(r'\\*"[Nn]amespace\\*"\s*:\s*\\*"([a-z0-9-]+)\\*"')
_SERVICE_ACCOUNT_SUBJECT = re.compile(r"system:serviceaccount:([a-z0-9-]+):")


def _namespaces_in(config_id: str) -> set[str]:
    """Every namespace a template of the config names: Helm releases, Pod Identity associations,
    manifests (``metadata.namespace``, inside the JSON strings too) and IRSA trust subjects."""
    text = json.dumps(synthesized(CONFIGS[config_id]).all_templates())
    return set(_NAMESPACE.findall(text)) | set(_SERVICE_ACCOUNT_SUBJECT.findall(text))


def _product_namespaces(config_id: str) -> set[str]:
    serving = synthesized(CONFIGS[config_id]).config.serving.namespace
    return {name for name in _namespaces_in(config_id) if name != serving and not name.startswith(f"{serving}-")}


@pytest.mark.slow
def test_every_namespace_outside_the_serving_ones_is_reserved() -> None:
    used = _product_namespaces("default") | _product_namespaces("inference-operator") | _product_namespaces("bulk")
    assert used <= RESERVED_NAMESPACES, sorted(used - RESERVED_NAMESPACES)
    # every add-on namespace of the constant is one the templates use (except the one the HyperPod chart
    # creates itself, which no template of ours names)
    assert set(ADDON_NAMESPACES) - {HYPERPOD_CHART} <= used, sorted(set(ADDON_NAMESPACES) - used)
    assert "kube-system" in used
