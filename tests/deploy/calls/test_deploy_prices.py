"""The cost items (:mod:`whisper_build.deploy.prices`): one list in code and docs, following the config,
and the EKS price following the support dates."""

from __future__ import annotations

import itertools

from deploy_helpers import (
    DEPLOY_DOC,
)

from settings import load_config
from whisper_build.deploy import (
    prices,
)
from whisper_build.deploy.deploy_plan import deploy_steps
from whisper_build.deploy.prices import running_cost_items


def test_the_stacks_step_cost_line_and_the_docs_cost_table_list_the_same_items() -> None:
    config = load_config()
    section = DEPLOY_DOC.read_text(encoding="utf-8").split("### Cost (read before deploying)", 1)[1]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    table = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines[first:])]
    labels = [row.split("|")[1].strip().replace("`", "") for row in table[2:]]
    items = [item for item, _ in running_cost_items(config)]
    assert len(labels) == len(items)
    for label, item in zip(labels, items, strict=True):
        name, _, detail = item.partition(": ")
        assert label.startswith(name) and detail in label, (label, item)
    (stacks,) = [s for s in deploy_steps(config, "c.yaml", "1") if s.name == "stacks"]
    for item in items:
        assert item in stacks.cost


def test_cost_items_follow_the_config_ebs_azs_and_nat() -> None:
    config = load_config()
    groups = [group.model_copy(update={"ebs_volume_gb": 100, "instance_count": 3}) for group in config.gpu_groups]
    network = config.network.model_copy(update={"max_azs": 3, "nat_gateways": 2})
    items = dict(running_cost_items(config.model_copy(update={"gpu_groups": groups, "network": network})))
    assert f"HyperPod instance EBS volumes: {100 * 3 * len(groups)} GB in all (ebs_volume_gb × instances)" in items
    assert "Secrets Manager interface VPC endpoint: 1 in each of 3 AZs" in items
    assert items["public IPv4 addresses: 2"] == "0.005 USD an hour each"  # the internal NLB adds none


def test_the_eks_price_follows_the_kubernetes_versions_support_dates() -> None:
    assert prices.eks_cost_item("1.33", as_of="2026-11-30") == (
        "EKS control plane: Kubernetes 1.33, in extended support since 2026-07-29",
        "0.60 USD an hour (standard support: 0.10)",
    )
    assert prices.eks_cost_item("1.34", as_of="2026-11-30")[1] == "0.10 USD an hour, 0.60 from 2026-12-02"
    assert prices.eks_cost_item("1.34", as_of="2026-12-02")[1].startswith("0.60 USD an hour")
    item, price = prices.eks_cost_item("1.30")
    assert "not sourced" in item and "describe-cluster-versions --cluster-versions 1.30" in price


def test_the_gpu_item_is_priced_from_the_config_price_list() -> None:
    config = load_config()
    item, price = prices.gpu_cost_item(config)
    assert item == "GPU instances (HyperPod): 1 × ml.g5.2xlarge, 1 × ml.g6e.2xlarge"
    assert price.startswith("3.45 USD an hour in all: ml.g5.2xlarge 1.212 USD an hour (EC2 on-demand")
    g6 = [config.gpu_groups[0], config.gpu_groups[1].model_copy(update={"instance_type": "ml.g6.2xlarge"})]
    _, price = prices.gpu_cost_item(config.model_copy(update={"gpu_groups": g6}))
    assert price.endswith("ml.g6.2xlarge not sourced: set pricing.instances (make prices)")
    assert price.startswith("1.21 USD an hour in all")
