"""Deployment config: the embedded default, the three-group example, and every invalid case
failing with the field path and the reason."""

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
from whisper_build.paths import REPO_ROOT

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
            r"must be lowercase letters and digits, optionally joined by hyphens",
            id="name-pattern",
        ),
        pytest.param(
            lambda d: d["gpu_groups"][0].update(name="-g5"),
            "gpu_groups.0.name",
            r"must be lowercase letters and digits, optionally joined by hyphens",
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
            r"unknown field; did you mean instance_type( or instance_types)?( or instance_count)?\?",
            id="misspelt-key",
        ),
        pytest.param(
            lambda d: d.update(projet_name="x"),
            "projet_name",
            r"unknown field; did you mean project_name\?",
            id="misspelt-top-level-key",
        ),
        pytest.param(
            lambda d: d["network"].update(cidr="10.0.0.0/16"),
            "network.cidr",
            r"unknown field; did you mean vpc_cidr\?",
            id="misspelt-network-key",
        ),
        pytest.param(
            lambda d: d["network"].update(vpc_cidr="10.42.0.1/16"),
            "network.vpc_cidr",
            r"'10\.42\.0\.1/16' has host bits set: the network it belongs to is 10\.42\.0\.0/16; write 10\.42\.0\.0/16",
            id="cidr-host-bits",
        ),
        pytest.param(
            lambda d: d["network"].update(vpc_cidr="10.42.0.0/33"),
            "network.vpc_cidr",
            r"'10\.42\.0\.0/33' is not an IPv4 CIDR block such as 10\.42\.0\.0/16",
            id="cidr-prefix-33",
        ),
        pytest.param(
            lambda d: d["network"].update(vpc_cidr="10.42.0.0/28"),
            "network.vpc_cidr",
            r"10\.42\.0\.0/28 is too small for the subnets the VPC needs: 2 public /24 and 2 private /19 .*"
            r"use a /17 or larger, e\.g\. 10\.42\.0\.0/17",
            id="cidr-too-small",
        ),
        pytest.param(
            lambda d: d["network"].update(vpc_cidr="10.0.0.0/8"),
            "network.vpc_cidr",
            r"a VPC CIDR block must be between /16 and /28 \(Amazon VPC\), not /8",
            id="cidr-too-large",
        ),
        pytest.param(
            lambda d: d["network"].update(vpc_cidr="10.42.0.0/17", max_azs=6),
            "network.vpc_cidr",
            r"6 public /24 and 6 private /19 .*use a /16 or larger",
            id="cidr-too-small-for-six-azs",
        ),
        pytest.param(
            lambda d: d.update(region="us-east-9"),
            "region",
            r"'us-east-9' is not an AWS region botocore knows; did you mean us-east-2 or us-east-1",
            id="unknown-region",
        ),
        pytest.param(
            lambda d: d.update(region="ap-southeast-7"),
            "observability.grafana",
            r"Amazon Managed Grafana is not available in ap-southeast-7 .*set observability\.grafana: false",
            id="grafana-not-in-region",
        ),
        pytest.param(
            lambda d: d.update(project_name="Whisper_HP"),
            "project_name",
            r"'Whisper_HP' must be 3–32 lowercase letters, digits and hyphens",
            id="project-name-plain-sentence",
        ),
        pytest.param(
            lambda d: d["cluster"].update(hyperpod_chart={"git_ref": "main"}),
            "cluster.hyperpod_chart.git_ref",
            r"'main' must be a full 40-character git commit hash",
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
    with pytest.raises(ConfigError, match="cannot read deployment config") as missing:
        load_config(tmp_path / "absent.yaml")
    assert f"cp config/default.yaml {tmp_path / 'absent.yaml'}" in str(missing.value)  # how to make one
    broken = tmp_path / "broken.yaml"
    broken.write_text("gpu_groups: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(broken)


def test_region_without_grafana_is_accepted_with_grafana_off(default_data: dict[str, Any]) -> None:
    config = parse_config(
        _mutated(default_data, lambda d: d.update(region="ap-southeast-7", observability={"grafana": False})), "x"
    )
    assert config.region == "ap-southeast-7"


def test_no_pattern_error_prints_a_regular_expression() -> None:
    """Every ``Field(pattern=...)`` in the schema has a sentence in ``PATTERN_RULES``."""
    from pydantic import BaseModel

    from settings.schema import PATTERN_RULES, DeploymentConfig

    patterns: set[str] = set()
    seen: set[type] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for field in model.model_fields.values():
            patterns.update(m.pattern for m in field.metadata if getattr(m, "pattern", None))
            for candidate in (field.annotation, *getattr(field.annotation, "__args__", ())):
                if isinstance(candidate, type) and issubclass(candidate, BaseModel):
                    walk(candidate)

    walk(DeploymentConfig)
    assert patterns, "the walk found no patterns: it is not reading the schema"
    assert sorted(patterns - set(PATTERN_RULES)) == []


def test_yaml_error_names_the_file_line_and_column(tmp_path: Path) -> None:
    broken = tmp_path / "my config.yaml"
    broken.write_text("project_name: x\ngpu_groups: [\n  - name: g5\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(broken)
    message = str(raised.value)
    assert message.startswith(f"deployment config is not valid YAML: {broken}:3:3: expected the node content")
    assert "<unicode string>" not in message


def test_subnet_plan_matches_cdk_for_the_default_vpc() -> None:
    """``allocate_subnets`` reproduces CDK's NetworkBuilder layout of the synthesized default VPC."""
    import ipaddress

    from cdk_assembly import CONFIGS, synthesized

    from settings.network_plan import allocate_subnets

    result = synthesized(CONFIGS["default"])
    assert result.stacks is not None, result.error
    template = result.template_json(result.stacks.network.artifact_id)
    cdk_blocks = [
        r["Properties"]["CidrBlock"] for r in template["Resources"].values() if r["Type"] == "AWS::EC2::Subnet"
    ]
    planned = allocate_subnets(ipaddress.IPv4Network(result.config.network.vpc_cidr), 2)
    assert planned is not None
    assert sorted(cdk_blocks) == sorted(str(n) for n in planned)
    assert sorted(cdk_blocks) == ["10.42.0.0/24", "10.42.1.0/24", "10.42.32.0/19", "10.42.64.0/19"]
