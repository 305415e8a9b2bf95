"""What a deployment bills while it runs: the cost items of step ``stacks`` and their sourced prices.

Prices are US dollars, on-demand, us-east-1, from the one price list of ``settings.prices``: the
GPU instances' from the config's price list (``pricing.instances`` over the sourced defaults), the
services' from :data:`settings.prices.SERVICE_PRICES`, each with its source and date; an item whose
price is not sourced says so and how to look it up. docs/deploy.md's Cost table lists the same items
(``tests/deploy/calls/test_deploy_prices.py`` checks the two agree).
"""

from __future__ import annotations

from settings.prices import SERVICE_PRICES
from settings.schema import DeploymentConfig

EKS_STANDARD_SUPPORT_ENDS = {"1.32": "2026-03-23", "1.33": "2026-07-29", "1.34": "2026-12-02", "1.35": "2027-03-27"}
"""End of EKS standard support per Kubernetes minor version (extended support follows for 12 months).
Source: endoflife.date/amazon-eks (2026-11-30), a compilation of the EKS Kubernetes release
calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html, the primary
source: check it for a version's dates); consistent with the EKS user guide's "standard support in Amazon EKS for the first 14
months after it's released" (1.33: released in EKS 2025-05-28)."""
EKS_CONTROL_PLANE_LOG_TYPES = 5
"""api, audit, authenticator, controllerManager, scheduler (stacks/cluster_stack.py ``cluster_logging``)."""

_EKS, _EKS_EXTENDED = SERVICE_PRICES["eks_cluster"], SERVICE_PRICES["eks_cluster_extended"]


def _usd(name: str) -> float:
    return SERVICE_PRICES[name].usd


def eks_cost_item(version: str, as_of: str = _EKS.as_of.isoformat()) -> tuple[str, str]:
    """The EKS control plane's ``(item, price)``: extended-support price once ``version`` left standard support.

    Args:
        version: ``cluster.kubernetes_version``, e.g. ``"1.33"``.
        as_of: ISO date the support dates are compared with (default: the date the EKS price was read).
    """
    ends = EKS_STANDARD_SUPPORT_ENDS.get(version)
    if ends is None:
        return (f"EKS control plane: Kubernetes {version}, support dates not sourced",
                f"{_EKS.usd:.2f} USD an hour, {_EKS_EXTENDED.usd:.2f} in extended "
                f"support: aws eks describe-cluster-versions --cluster-versions {version} "
                "--query 'clusterVersions[].endOfStandardSupportDate'")  # fmt: skip
    if ends <= as_of:
        return (f"EKS control plane: Kubernetes {version}, in extended support since {ends}",
                f"{_EKS_EXTENDED.usd:.2f} USD an hour (standard support: {_EKS.usd:.2f})")  # fmt: skip
    return (f"EKS control plane: Kubernetes {version}, standard support until {ends}",
            f"{_EKS.usd:.2f} USD an hour, {_EKS_EXTENDED.usd:.2f} from {ends}")  # fmt: skip


def gpu_cost_item(config: DeploymentConfig) -> tuple[str, str]:
    """The GPU instances' ``(item, price)`` from the price list (``settings.prices``, ``make prices``).

    Each type's hourly price and basis; a type without a price says so. The default figures are EC2
    on-demand prices; the HyperPod ``ml.*`` price is not sourced.
    """
    groups = [g for g in config.gpu_groups if g.instance_count]
    fleet = ", ".join(f"{g.instance_count} × {g.instance_type}" for g in groups)
    parts, hourly, unpriced = [], 0.0, []
    for instance_type in dict.fromkeys(g.instance_type for g in groups):
        price = config.pricing.price_of(instance_type)
        if price is None:
            unpriced.append(instance_type)
            continue
        count = sum(g.instance_count for g in groups if g.instance_type == instance_type)
        hourly += count * price.hourly
        basis = "EC2 on-demand; the ml.* price not sourced" if price.basis == "ec2_on_demand" else price.basis
        parts.append(f"{instance_type} {price.hourly:g} USD an hour ({basis}, {price.as_of})")
    text = "; ".join(parts)
    if parts:
        text = f"{hourly:.2f} USD an hour in all: {text}"
    if unpriced:
        text += ("; " if text else "") + f"{', '.join(unpriced)} not sourced: set pricing.instances (make prices)"
    return (f"GPU instances (HyperPod): {fleet}", text)


def running_cost_items(config: DeploymentConfig) -> list[tuple[str, str]]:
    """What bills from step ``stacks`` until ``make destroy``: ``(item, price)`` pairs.

    One per row of docs/deploy.md's Cost table (``tests/deploy/calls/test_deploy_prices.py`` checks the two agree).

    Prices come from ``settings.prices``; an unsourced one says so and how to look it up.
    """
    ebs_gb = sum(g.ebs_volume_gb * g.instance_count for g in config.gpu_groups)
    azs, nat = config.network.max_azs, config.network.nat_gateways
    public_ips = nat + (azs if config.endpoint.scheme == "internet-facing" else 0)
    items = [
        gpu_cost_item(config),
        (f"HyperPod instance EBS volumes: {ebs_gb} GB in all (ebs_volume_gb × instances)",
         "per GB-month, not sourced: https://aws.amazon.com/sagemaker-ai/pricing/ (HyperPod)"),
        eks_cost_item(config.cluster.kubernetes_version),
        (f"system nodes: {config.cluster.system_node_count} × {config.cluster.system_node_instance_type}",
         "EC2 on-demand per instance-hour, not sourced: aws pricing get-products --service-code AmazonEC2 …"),
        (f"NAT gateway: {config.network.nat_gateways}",
         f"{_usd('nat_gateway')} USD an hour each + {_usd('nat_gateway_data')} USD per GB"),
        (f"public IPv4 addresses: {public_ips}", f"{_usd('public_ipv4')} USD an hour each"),
        (f"Secrets Manager interface VPC endpoint: 1 in each of {azs} AZs",
         f"per AZ-hour, not sourced, + {_usd('interface_endpoint_data')} USD per GB"),
        (f"load balancer: 1 {config.endpoint.kind.upper()}", "hourly + capacity units, not sourced"),
        (f"CloudWatch Logs: VPC flow logs and {EKS_CONTROL_PLANE_LOG_TYPES} EKS control-plane log types",
         f"{_usd('cloudwatch_logs_ingested'):.2f} USD per GB ingested (less for flow logs) + storage per GB-month"),
    ]  # fmt: skip
    if config.observability.enabled:
        items.append(("Amazon Managed Prometheus", "samples ingested/stored/queried + scraper hours, not sourced"))
        if config.observability.grafana:
            items.append(
                ("Amazon Managed Grafana", f"{_usd('grafana_editor'):g} USD per active editor/admin user a month")
            )
    if config.bulk.enabled:
        items.append(
            ("SQS bulk job queue + dead-letter queue", "per million requests (workers long-poll), not sourced")
        )
    keys = 3 + int(config.bulk.enabled)  # EKS Secrets, API keys secret, engine builds (+ the bulk stack's key)
    items.append((f"KMS keys: {keys}", f"{_usd('kms_key'):g} USD per key a month"))
    if config.endpoint.auth == "api_key":
        items.append(("Secrets Manager secret", f"{_usd('secrets_manager_secret'):.2f} USD a month"))
    return items
