"""Priority lists of instance types per GPU group: what the config accepts, refuses, and what follows the list."""

from __future__ import annotations

import re

import pytest
from capacity_support import G5_LIST, config, default_data, spot_data, with_groups
from k8s_support import of_kind, relabel, scraped_by, synth

from k8s_charts import placement
from k8s_charts.sizing import gateway_workers, pod_resources, predicted_rtf
from observability import cost_queries
from observability.scrape_config import scrape_config
from settings import ConfigError, capacity, labels


def _refusal(data: dict) -> str:
    with pytest.raises(ConfigError) as err:
        config(data)
    return str(err.value)


def test_instance_type_is_a_list_of_one_and_a_list_keeps_its_order() -> None:
    single = config(default_data()).gpu_groups[0]
    assert (single.instance_type, single.instance_types, single.flexible) == ("ml.g5.2xlarge", ["ml.g5.2xlarge"], False)
    listed = config(with_groups(default_data(), instance_types=G5_LIST)).gpu_groups[0]
    assert (listed.instance_type, listed.instance_types, listed.flexible) == ("ml.g5.2xlarge", G5_LIST, True)


@pytest.mark.parametrize(
    ("first_group", "expected"),
    [
        (
            {"instance_types": ["ml.g5.2xlarge", "ml.g6e.2xlarge"]},
            r"instance_types: .*ml\.g6e\.2xlarge \(1 × NVIDIA L40S",
        ),
        ({"instance_types": ["ml.g5.2xlarge", "ml.g5.12xlarge"]}, r"ml\.g5\.12xlarge \(4 × .*same GPU model"),
        ({"instance_types": ["ml.g5.2xlarge", "ml.g5.2xlarge"]}, r"ml\.g5\.2xlarge more than once"),
        ({"instance_types": ["ml.g5.2xlarge", "ml.g5.4xlarg"]}, r"unknown HyperPod instance type 'ml\.g5\.4xlarg'"),
        ({"instance_types": ["ml.g5.2xlarge"] * 21}, r"HyperPod takes 1–20"),
        ({"instance_type": "ml.g5.4xlarge", "instance_types": G5_LIST}, r"not the list.s first entry"),
        ({"instance_types": G5_LIST, "instance_count": 1, "min_instance_count": 2}, r"min_instance_count \(2\)"),
    ],
)
def test_a_list_that_cannot_be_one_instance_group_is_refused(first_group: dict, expected: str) -> None:
    data = with_groups(default_data(), **first_group)
    if "instance_type" in first_group:
        data["gpu_groups"][0]["instance_type"] = first_group["instance_type"]
    message = _refusal(data)
    assert re.search(r"gpu_groups\.0", message), message
    assert re.search(expected, message), message


@pytest.mark.parametrize(
    ("first_group", "field"),
    [
        ({"instance_types": ["ml.g5.bogus", "ml.g5.4xlarge"]}, "gpu_groups.0.instance_types.0: unknown"),
        ({"instance_types": ["g5.2xlarge"]}, "gpu_groups.0.instance_types.0: 'g5.2xlarge' is not a SageMaker"),
        ({"instance_type": "ml.g5.bogus"}, "gpu_groups.0.instance_type: unknown"),
    ],
)
def test_an_unknown_type_is_reported_under_the_field_the_user_wrote(first_group: dict, field: str) -> None:
    data = with_groups(default_data(), **first_group)
    message = _refusal(data)
    assert field in message, message
    assert message.count("unknown") + message.count("not a SageMaker") == 1, message  # reported once


def test_every_listed_type_must_support_the_mig_profile() -> None:
    data = with_groups(
        default_data(), instance_types=["ml.p5.48xlarge", "ml.p5e.48xlarge"], mig_profile="1g.10gb"
    )  # p5e is an H200 (141 GB), p5 an H100 (80 GB): refused for the GPU first
    assert "same GPU model" in _refusal(data)


def test_a_type_hyperpod_does_not_offer_in_the_region_is_refused_with_field_and_fix() -> None:
    data = with_groups(default_data(), instance_types=G5_LIST)
    data["region"] = "us-west-1"  # cfn-lint's regional data has no ml.g5 there
    data["observability"]["enabled"] = False
    assert not capacity.not_offered("us-east-1", G5_LIST)
    missing = capacity.not_offered("us-west-1", G5_LIST)
    assert missing, "the regional data must leave some g5 out of us-west-1 for this test"
    message = _refusal(data)
    assert f"gpu_groups.0.instance_types: {', '.join(missing)} not offered by HyperPod in us-west-1" in message


def test_cluster_rules_are_refused_by_field() -> None:
    data = spot_data()
    data["bulk"]["drain_seconds"] = 100
    assert "bulk.drain_seconds: 100 s" in _refusal(data)
    data = spot_data()
    data["cluster"]["node_autoscaling"] = False
    data["gpu_groups"][0]["instance_count"] = 3  # room for the bulk workers without Karpenter
    assert "capacity.bulk_spot: Spot instance groups serve bulk workers through Karpenter" in _refusal(data)
    data = spot_data()
    data["capacity"]["group_priority"] = ["g5", "h100"]
    assert "capacity.group_priority: h100 not a GPU group name" in _refusal(data)


def test_pods_are_sized_for_the_smallest_listed_type_whatever_the_order() -> None:
    largest_first = config(with_groups(default_data(), instance_types=list(reversed(G5_LIST)))).gpu_groups[0]
    only_smallest = config(default_data()).gpu_groups[0]
    assert largest_first.instance == only_smallest.instance  # ml.g5.2xlarge: 8 vCPU, 32 GiB
    size = pod_resources(largest_first.instance, largest_first.pods_per_node)
    assert size == pod_resources(only_smallest.instance)
    assert gateway_workers(size, largest_first.effective_capacity) == gateway_workers(
        pod_resources(only_smallest.instance), only_smallest.effective_capacity
    )
    alone_large = config(with_groups(default_data(), instance_type="ml.g5.8xlarge")).gpu_groups[0]
    assert pod_resources(alone_large.instance).cpu_millicores > size.cpu_millicores


def test_throughput_is_looked_up_for_the_group_gpu_so_every_listed_type_gets_the_same() -> None:
    cfg = config(with_groups(default_data(), instance_types=list(reversed(G5_LIST))))
    assert predicted_rtf(cfg, cfg.gpu_groups[0]) == predicted_rtf(
        config(default_data()), config(default_data()).gpu_groups[0]
    )


def test_serving_bulk_and_exporter_pods_accept_every_listed_type_and_prefer_the_first() -> None:
    group = config(with_groups(default_data(), instance_types=G5_LIST)).gpu_groups[0]
    for aff in (placement.affinity(group), placement.group_affinity(group)):
        (term,) = aff.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
        by_key = {e.key: e.values for e in term.match_expressions}
        assert by_key[labels.INSTANCE_TYPE_LABEL] == G5_LIST
    preferred = placement.affinity(group).node_affinity.preferred_during_scheduling_ignored_during_execution
    assert [p.preference.match_expressions[0].values for p in preferred] == [["Passed"], ["ml.g5.2xlarge"]]


def test_node_pools_require_the_list_and_rank_groups_and_spot_bulk_pool_goes_first() -> None:
    manifests = synth(config(spot_data()))
    pools = of_kind(manifests, "NodePool")
    assert pools["whisper-g5"]["spec"]["template"]["spec"]["requirements"][0]["values"] == G5_LIST
    assert (pools["whisper-g5"]["spec"]["weight"], pools["whisper-g6e"]["spec"]["weight"]) == (90, 80)
    bulk = pools["whisper-g5-bulk"]["spec"]
    assert bulk["weight"] == 100
    assert {"key": labels.SPOT_TAINT_KEY, "value": "spot", "effect": "NoSchedule"} in bulk["template"]["spec"]["taints"]
    classes = of_kind(manifests, "HyperpodNodeClass")
    assert classes["whisper-g5-bulk"]["spec"]["instanceGroups"] == ["g5-spot", "g5"]
    assert classes["whisper-g5"]["spec"]["instanceGroups"] == ["g5"]


def test_the_scrape_config_takes_a_flexible_group_type_from_the_pod_label() -> None:
    cfg = config(with_groups(default_data(), instance_types=G5_LIST))
    job = next(j for j in scrape_config(cfg)["scrape_configs"] if j["job_name"] == "whisper-gateway")
    rules = [r for r in job["relabel_configs"] if r.get("target_label") == "instance_type"]
    meta = "__meta_kubernetes_pod_label_whisper_hyperpod_io_"
    on_g5_8x = relabel(rules, {meta + "instance_type": "ml.g5.8xlarge", "gpu_group": "g5"})
    on_g6e = relabel(rules, {"gpu_group": "g6e"})
    assert (on_g5_8x or {}).get("instance_type") == "ml.g5.8xlarge"
    assert (on_g6e or {}).get("instance_type") == "ml.g6e.2xlarge"


def test_only_bulk_workers_tolerate_spot_and_their_grace_fits_the_notice() -> None:
    cfg = config(spot_data())
    deployments = of_kind(synth(cfg), "Deployment")
    spot = {"key": labels.SPOT_TAINT_KEY, "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
    bulk_pod = deployments["whisper-bulk-g5"]["spec"]["template"]["spec"]
    assert spot in bulk_pod["tolerations"]
    assert 0 < bulk_pod["terminationGracePeriodSeconds"] <= 90  # drain 45 s + stops, inside the 2-minute notice
    serving = [d for name, d in deployments.items() if not name.startswith("whisper-bulk")]
    assert serving and all(spot not in d["spec"]["template"]["spec"].get("tolerations", []) for d in serving)


def test_cost_is_priced_per_listed_type_from_exporters_that_name_their_type() -> None:
    data = with_groups(default_data(), instance_types=G5_LIST[:2])
    data["pricing"] = {
        "instances": {"ml.g5.4xlarge": {"hourly": 1.624, "source": "test figure", "as_of": "2026-12-01"}}
    }
    cfg = config(data)
    groups = cost_queries.cost_groups(cfg)
    assert [(g.name, g.instance_type, g.usd_per_hour) for g in groups] == [
        ("g5", "ml.g5.2xlarge", 1.212),
        ("g5", "ml.g5.4xlarge", 1.624),
        ("g6e", None, 2.24208),
    ]
    hourly = cost_queries.hourly_cost_expr(groups)
    assert 'up{job="dcgm-exporter",gpu_group="g5",instance_type="ml.g5.4xlarge"}) * 1.624' in hourly
    manifests = synth(cfg)
    exporters = of_kind(manifests, "DaemonSet")
    assert {"dcgm-exporter-g5-g5-2xlarge", "dcgm-exporter-g5-g5-4xlarge", "dcgm-exporter-g6e"} <= set(exporters)
    job = next(j for j in scrape_config(cfg)["scrape_configs"] if j["job_name"] == "dcgm-exporter")
    scraped = {(t["gpu_group"], t.get("instance_type")) for t in scraped_by(job, manifests)}
    assert scraped == {("g5", "ml.g5.2xlarge"), ("g5", "ml.g5.4xlarge"), ("g6e", "ml.g6e.2xlarge")}
