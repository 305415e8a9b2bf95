"""Deployment config: the embedded default, the three-group example, and every invalid case of
issue 2 failing with the field path and the reason."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings import DEFAULT_CONFIG_PATH, ConfigError, load_config, parse_config
from settings.schema import HYPERPOD_KUBERNETES_VERSIONS

REPO_ROOT = Path(__file__).resolve().parent.parent
THREE_GROUPS = REPO_ROOT / "config" / "examples" / "three-groups.yaml"


@pytest.fixture(scope="module")
def default_data() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))


def _mutated(data: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copied = copy.deepcopy(data)
    change(copied)
    return copied


def test_default_config_is_the_two_group_scenario() -> None:
    config = load_config()
    assert config.region == "us-east-1"
    assert config.model.name == "large-v3-turbo"
    assert [
        (g.name, g.instance_type, g.arch, g.gpu.name, g.instance_count, g.threads_per_core) for g in config.gpu_groups
    ] == [
        ("g5", "ml.g5.2xlarge", "sm86", "NVIDIA A10G", 1, 2),
        ("g6e", "ml.g6e.2xlarge", "sm89", "NVIDIA L40S", 1, 2),
    ]
    assert config.cluster.kubernetes_version in HYPERPOD_KUBERNETES_VERSIONS


def test_three_group_example_adds_h100() -> None:
    config = load_config(THREE_GROUPS)
    assert [g.name for g in config.gpu_groups] == ["g5", "g6e", "p5"]
    p5 = config.gpu_groups[2]
    assert (p5.instance_type, p5.arch, p5.instance.gpus) == ("ml.p5.48xlarge", "sm90", 8)
    assert config.gpu_archs == ["sm86", "sm89", "sm90"]


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        pytest.param(
            lambda d: d["gpu_groups"][0].update(instance_type="ml.g5.2xlarg"),
            "gpu_groups.0.instance_type",
            r"unknown HyperPod instance type 'ml\.g5\.2xlarg'; did you mean ml\.g5\.2xlarge",
            id="typo-suggests-type",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][1].update(instance_type="g6e.2xlarge"),
            "gpu_groups.1.instance_type",
            r"HyperPod instance types start with 'ml\.' \(for example ml\.g6e\.2xlarge\)",
            id="not-ml-prefixed",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][1].update(max_replicas=3),
            "gpu_groups.1.max_replicas",
            r"3 pods need 3 GPUs but group 'g6e' has 1 × ml\.g6e\.2xlarge = 1 GPU\(s\)",
            id="more-replicas-than-gpus",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][1].update(name="g5"),
            "gpu_groups",
            r"duplicate GPU group name 'g5'",
            id="duplicate-name",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(name="g5_big"),
            "gpu_groups.0.name",
            r"must match HyperPod's InstanceGroupName pattern",
            id="name-pattern",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(name="-g5"),
            "gpu_groups.0.name",
            r"must match HyperPod's InstanceGroupName pattern",
            id="name-leading-dash",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(instance_count=-1),
            "gpu_groups.0.instance_count",
            r"greater than or equal to 0",
            id="negative-count",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(threads_per_core=3),
            "gpu_groups.0.threads_per_core",
            r"Input should be 1 or 2",
            id="threads-per-core-3",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(instance_type="ml.m5.large"),
            "gpu_groups.0",
            r"GPU architecture of 'ml\.m5\.large' is unknown",
            id="unknown-gpu-arch-family",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(gpu_arch="sm89"),
            "gpu_groups.0",
            r"gpu_arch 'sm89' contradicts ml\.g5\.2xlarge",
            id="contradicting-arch",
        ),
        pytest.param(lambda d: d.pop("region"), "region", r"required field is missing", id="region-missing"),
        pytest.param(
            lambda d: d["cluster"].update(kubernetes_version="1.27"),
            "cluster.kubernetes_version",
            r"outside HyperPod's supported range",
            id="kubernetes-version",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(instance_typ="ml.g5.2xlarge"),
            "gpu_groups.0.instance_typ",
            r"unknown field",
            id="misspelt-key",
        ),
        pytest.param(
            lambda d: d["cluster"].update(hyperpod_chart={"git_ref": "main"}),
            "cluster.hyperpod_chart.git_ref",
            r"should match pattern",
            id="chart-ref-not-pinned",
        ),
    ],
)
def test_invalid_config_names_field_and_reason(
    default_data: dict[str, Any], change: Callable[[dict[str, Any]], None], field: str, reason: str
) -> None:
    pattern = rf"(?m)^  {re.escape(field)}: .*{reason}"
    with pytest.raises(ConfigError, match=pattern) as raised:
        parse_config(_mutated(default_data, change), "bad.yaml")
    assert str(raised.value).startswith("invalid deployment config bad.yaml:")


def test_every_problem_is_reported_at_once(default_data: dict[str, Any]) -> None:
    def two_problems(d: dict[str, Any]) -> None:
        d.pop("region")
        d["gpu_groups"][1]["threads_per_core"] = 4

    with pytest.raises(ConfigError) as raised:
        parse_config(_mutated(default_data, two_problems), "bad.yaml")
    lines = str(raised.value).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == ["region", "gpu_groups.1.threads_per_core"]


def test_missing_file_and_broken_yaml_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read deployment config"):
        load_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpu_groups: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(broken)
