"""Config mistakes that used to pass silently are refused naming the field and the fix."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from settings import DEFAULT_CONFIG_PATH, ConfigError, load_config, parse_config
from settings.advisories import config_warnings
from settings.availability import OfferingTable, offering_table, offering_warnings
from settings.system_nodes import is_arm


@pytest.fixture(scope="module")
def default_data() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))


def _refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as excinfo:
        parse_config(data)
    return str(excinfo.value)


def _with(data: dict[str, Any], section: str, **values: Any) -> dict[str, Any]:
    copied = copy.deepcopy(data)
    copied.setdefault(section, {}).update(values)
    return copied


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


# --- duplicate keys ---------------------------------------------------------------------------


def test_duplicate_top_level_block_is_refused_with_both_lines(tmp_path: Path) -> None:
    text = DEFAULT_CONFIG_PATH.read_text(encoding="utf-8") + "cluster:\n  system_node_count: 3\n"
    first = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("cluster:"))
    last = len(text.splitlines()) - 1
    with pytest.raises(ConfigError) as excinfo:
        load_config(_write(tmp_path, text))
    assert f"  cluster: duplicate key at line {last}, first at line {first}" in str(excinfo.value)
    assert "merge the two into one" in str(excinfo.value)


def test_duplicate_keys_are_refused_at_every_depth(tmp_path: Path) -> None:
    text = (
        "region: us-east-1\n"
        "gpu_groups:\n"
        "  - name: a\n"
        "    instance_type: ml.g5.2xlarge\n"
        "    name: b\n"
        "cluster:\n"
        "  hyperpod_chart:\n"
        "    version: 0.1.0\n"
        "    version: 0.2.0\n"
    )
    with pytest.raises(ConfigError) as excinfo:
        load_config(_write(tmp_path, text))
    lines = str(excinfo.value).splitlines()[1:]
    assert lines == [
        "  gpu_groups.0.name: duplicate key at line 5, first at line 3; YAML would silently keep only the last one: "
        "merge the two into one",
        "  cluster.hyperpod_chart.version: duplicate key at line 9, first at line 8; YAML would silently keep only "
        "the last one: merge the two into one",
    ]


# --- quoting hints ----------------------------------------------------------------------------


def test_unquoted_version_and_account_get_a_quoting_hint(tmp_path: Path) -> None:
    text = (
        "region: us-east-1\naccount: 123456789012\ngpu_groups:\n  - {name: a, instance_type: ml.g5.2xlarge}\n"
        "cluster:\n  kubernetes_version: 1.30\n"
    )
    with pytest.raises(ConfigError) as excinfo:
        load_config(_write(tmp_path, text))
    message = str(excinfo.value)
    assert (
        'cluster.kubernetes_version: must be a string; YAML read the unquoted 1.30 (line 6) as a number; quote it: kubernetes_version: "1.30"'
        in message
    )
    assert (
        'account: must be a string; YAML read the unquoted 123456789012 (line 2) as a number; quote it: account: "123456789012"'
        in message
    )


def test_quoted_values_load(tmp_path: Path) -> None:
    text = (
        'region: us-east-1\naccount: "123456789012"\ngpu_groups:\n  - {name: a, instance_type: ml.g5.2xlarge}\n'
        'cluster:\n  kubernetes_version: "1.30"\n'
    )
    config = load_config(_write(tmp_path, text))
    assert (config.account, config.cluster.kubernetes_version) == ("123456789012", "1.30")


# --- CIDRs ------------------------------------------------------------------------------------


def test_bare_address_becomes_a_slash_32_and_duplicates_go(default_data: dict[str, Any]) -> None:
    config = parse_config(
        _with(default_data, "cluster", public_access_cidrs=["203.0.113.7", "203.0.113.7/32", "198.51.100.0/24"])
    )
    assert config.cluster.public_access_cidrs == ["203.0.113.7/32", "198.51.100.0/24"]


@pytest.mark.parametrize(
    ("cidr", "expected"),
    [
        (
            "203.0.113.7/24",
            r"'203\.0\.113\.7/24' has host bits set: write 203\.0\.113\.0/24 \(the whole network\) or 203\.0\.113\.7/32",
        ),
        ("2001:db8::/32", r"'2001:db8::/32' is an IPv6 CIDR; .* IPv4-only"),
        (
            "10.0.0.0/8",
            r"10\.0\.0\.0/8 \(private \(RFC 1918\)\): the public API endpoint sees clients' public addresses",
        ),
        ("100.64.0.0/16", r"shared carrier-grade NAT space"),
        ("not-an-ip", r"'not-an-ip' is not an IPv4 CIDR block"),
    ],
)
def test_public_access_cidrs_refusals(default_data: dict[str, Any], cidr: str, expected: str) -> None:
    message = _refusal(_with(default_data, "cluster", public_access_cidrs=[cidr]))
    assert re.search(r"cluster\.public_access_cidrs: .*" + expected, message), message


def _internet_facing(data: dict[str, Any], cidrs: list[str]) -> dict[str, Any]:
    return _with(
        data,
        "endpoint",
        scheme="internet-facing",
        certificate_arn="arn:aws:acm:us-east-1:123456789012:certificate/0f0e0d0c-aaaa-bbbb-cccc-123456789abc",
        allowed_cidrs=cidrs,
    )


def test_private_ranges_refused_for_internet_facing_endpoint(default_data: dict[str, Any]) -> None:
    message = _refusal(_internet_facing(default_data, ["203.0.113.0/24", "192.168.0.0/16"]))
    assert (
        "endpoint.allowed_cidrs: 192.168.0.0/16 (private (RFC 1918)) never reach an internet-facing load balancer"
        in message
    )
    assert "or use scheme internal" in message


def test_private_ranges_allowed_for_internal_endpoint(default_data: dict[str, Any]) -> None:
    config = parse_config(_with(default_data, "endpoint", allowed_cidrs=["10.0.0.0/8", "192.168.1.5"]))
    assert config.endpoint_source_cidrs == ["10.0.0.0/8", "192.168.1.5/32"]


def test_internet_facing_allow_list_is_normalised(default_data: dict[str, Any]) -> None:
    config = parse_config(_internet_facing(default_data, ["203.0.113.7"]))
    assert config.endpoint.allowed_cidrs == ["203.0.113.7/32"]


# --- NAT gateways, system nodes, namespaces ---------------------------------------------------


def test_more_nat_gateways_than_azs_is_refused(default_data: dict[str, Any]) -> None:
    message = _refusal(_with(default_data, "network", max_azs=2, nat_gateways=3))
    assert "  network.nat_gateways: 3 NAT gateways but network.max_azs is 2" in message
    assert "set nat_gateways to at most 2, or raise max_azs" in message
    assert parse_config(_with(default_data, "network", max_azs=3, nat_gateways=3)).network.nat_gateways == 3


@pytest.mark.parametrize(
    ("instance_type", "expected"),
    [
        ("m6i.larg", r"unknown EC2 instance type 'm6i\.larg' .*did you mean m6i\.large"),
        ("ml.m5.large", r"'ml\.m5\.large' is a SageMaker type; .*write the EC2 type, e\.g\. m5\.large"),
        ("m7g.large", r"'m7g\.large' is an Arm \(AWS Graviton\) type, .*x86_64"),
    ],
)
def test_system_node_type_is_checked(default_data: dict[str, Any], instance_type: str, expected: str) -> None:
    message = _refusal(_with(default_data, "cluster", system_node_instance_type=instance_type))
    assert re.search(r"cluster\.system_node_instance_type: " + expected, message), message


def test_arm_families_are_recognised() -> None:
    assert [t for t in ("m7g.large", "c6gn.xlarge", "im4gn.large", "a1.large", "g5g.xlarge") if not is_arm(t)] == []
    assert [t for t in ("m6i.large", "m7i-flex.large", "c6in.large", "g4dn.xlarge", "m5zn.large") if is_arm(t)] == []


@pytest.mark.parametrize(
    "namespace",
    [
        "kube-system",
        "kube-public",
        "kube-node-lease",
        "default",
        "keda",
        "aws-hyperpod",
        "hyperpod-inference-system",
        "kube-anything",
    ],
)
def test_reserved_serving_namespaces_are_refused(default_data: dict[str, Any], namespace: str) -> None:
    message = _refusal(_with(default_data, "serving", namespace=namespace))
    assert f"serving.namespace: '{namespace}' is reserved for" in message
    assert "choose a namespace of its own, e.g. whisper" in message


# --- warnings (never refusals) ----------------------------------------------------------------


def test_offering_table_is_dated_and_covers_every_catalog_gpu_type() -> None:
    from settings import gpu_catalog

    table = offering_table()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.as_of)
    assert "instances.vantage.sh" in table.source
    catalog = {f"{family}.{size}" for family, sizes in gpu_catalog.INSTANCE_SIZES.items() for size in sizes}
    assert catalog <= set(table.regions), sorted(catalog - set(table.regions))


def test_pair_missing_from_the_table_warns_with_field_and_date(default_data: dict[str, Any]) -> None:
    table = OfferingTable(regions={"g5.2xlarge": frozenset({"us-east-1"})}, as_of="2026-01-21", source="test table")
    fields = {"gpu_groups.0.instance_type": "ml.g5.2xlarge", "gpu_groups.1.instance_type": "ml.x9.large"}
    assert offering_warnings("us-east-1", fields, table) == []
    [warning] = offering_warnings("eu-west-1", fields, table)
    assert warning.startswith("gpu_groups.0.instance_type: ml.g5.2xlarge is not in the offering table for eu-west-1")
    assert "as of 2026-01-21; source: test table" in warning and "make capacity" in warning
    # a warning, never a refusal: the config still loads
    assert parse_config({**default_data, "region": "eu-west-1"}).region == "eu-west-1"


def test_public_api_open_to_the_world_warns(default_data: dict[str, Any]) -> None:
    warnings = config_warnings(parse_config(default_data))
    assert [
        w
        for w in warnings
        if w.startswith(
            "cluster.public_access_cidrs: the public Kubernetes API endpoint accepts connections from 0.0.0.0/0"
        )
    ]
    narrowed = parse_config(_with(default_data, "cluster", public_access_cidrs=["203.0.113.0/24"]))
    private = parse_config(_with(default_data, "cluster", endpoint_access="private"))
    assert not [
        w for w in config_warnings(narrowed) + config_warnings(private) if w.startswith("cluster.public_access")
    ]


def test_validation_reads_botocore_data_without_an_aws_profile(monkeypatch, default_data: dict[str, Any]) -> None:
    """An AWS_PROFILE naming a missing profile made botocore sessions raise ProfileNotFound offline."""
    from settings import gpu_catalog, regions, system_nodes

    monkeypatch.setenv("AWS_PROFILE", "no-such-profile-here")
    for cached in (regions.service_model, regions.service_regions, gpu_catalog.hyperpod_instance_types):
        cached.cache_clear()
    system_nodes.ec2_instance_types.cache_clear()
    config = parse_config(default_data)
    assert config.region == "us-east-1" and "us-east-1" in regions.service_regions("sagemaker")
