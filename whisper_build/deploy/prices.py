"""What a deployment bills while it runs: the cost items of step ``stacks`` and their sourced prices.

Prices are US dollars, on-demand, us-east-1, as of :data:`PRICES_AS_OF`, each with its source; an
item whose price is not sourced says so and how to look it up. docs/deploy.md's Cost table lists
the same items (``tests/deploy/test_deploy_prices.py`` checks the two agree).
"""

from __future__ import annotations

from settings.schema import DeploymentConfig

EKS_USD_PER_CLUSTER_HOUR = 0.10
"""EKS control plane, Kubernetes version in standard support. Source: AWS Containers blog, "Amazon
EKS extended support for Kubernetes versions pricing" (2024),
https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/"""
EKS_EXTENDED_USD_PER_CLUSTER_HOUR = 0.60
"""EKS control plane, Kubernetes version in extended support (same source)."""
EKS_STANDARD_SUPPORT_ENDS = {"1.32": "2026-03-23", "1.33": "2026-07-29", "1.34": "2026-12-02", "1.35": "2027-03-27"}
"""End of EKS standard support per Kubernetes minor version (extended support follows for 12 months).
Source: endoflife.date/amazon-eks (read 2026-11-30), a compilation of the EKS Kubernetes release
calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html, not read
first-hand); consistent with the EKS user guide's "standard support in Amazon EKS for the first 14
months after it's released" (1.33: released in EKS 2025-05-28)."""
NAT_USD_PER_GATEWAY_HOUR = 0.045
"""NAT gateway, us-east-1, plus 0.045 USD per GB processed. Source: the AWS VPC pricing page
(https://aws.amazon.com/vpc/pricing/) as quoted by third-party summaries in 2026; not read first-hand."""
PUBLIC_IPV4_USD_PER_ADDRESS_HOUR = 0.005
"""Every AWS-provided public IPv4 address (a NAT gateway's Elastic IP, an internet-facing load
balancer's address per AZ) since 2024-02-01. Source: AWS's announcement ("Identify and optimize
public IPv4 address usage on AWS", AWS Networking & Content Delivery blog, 2023) as quoted by
third-party summaries (doit.com, 2024); not read first-hand."""
INTERFACE_ENDPOINT_USD_PER_GB = 0.01
"""Interface VPC endpoint data processed, first PB a month in a region. Source: AWS PrivateLink
pricing, https://aws.amazon.com/privatelink/pricing/ (read from a mirror of that page); the same
page bills "each hour that your VPC endpoint remains provisioned in each Availability Zone" at a
per-hour price not captured here."""
CLOUDWATCH_LOGS_USD_PER_GB_INGESTED = 0.50
"""CloudWatch Logs standard ingestion, us-east-1 (vended logs such as VPC flow logs are tiered from
this price down). Source: third-party summaries of https://aws.amazon.com/cloudwatch/pricing/
(cloudstaq.io 2020, 2025 EKS guides); not read first-hand."""
EKS_CONTROL_PLANE_LOG_TYPES = 5
"""api, audit, authenticator, controllerManager, scheduler (stacks/cluster_stack.py ``cluster_logging``)."""
PRICES_AS_OF = "2026-11-30"


def gpu_price_lookup(instance_type: str) -> str:
    """AWS Price List command listing the us-east-1 SageMaker price products of ``instance_type``.

    The HyperPod prices of ``ml.*`` instances could not be sourced for this repository; AWS's price
    list has them (one product per use: training, hosting, HyperPod cluster, …; each with its
    ``usagetype`` and ``pricePerUnit.USD`` per hour). Not run here (no AWS credentials).
    """
    return (
        "aws pricing get-products --region us-east-1 --service-code AmazonSageMaker --filters "
        f"Type=TERM_MATCH,Field=instanceName,Value={instance_type} "
        "Type=TERM_MATCH,Field=regionCode,Value=us-east-1 --output json"
    )


def eks_cost_item(version: str, as_of: str = PRICES_AS_OF) -> tuple[str, str]:
    """The EKS control plane's ``(item, price)``: extended-support price once ``version`` left standard support.

    Args:
        version: ``cluster.kubernetes_version``, e.g. ``"1.33"``.
        as_of: ISO date the prices hold for (:data:`PRICES_AS_OF`).
    """
    ends = EKS_STANDARD_SUPPORT_ENDS.get(version)
    if ends is None:
        return (f"EKS control plane: Kubernetes {version}, support dates not sourced",
                f"{EKS_USD_PER_CLUSTER_HOUR:.2f} USD an hour, {EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} in extended "
                f"support: aws eks describe-cluster-versions --cluster-versions {version} "
                "--query 'clusterVersions[].endOfStandardSupportDate'")  # fmt: skip
    if ends <= as_of:
        return (f"EKS control plane: Kubernetes {version}, in extended support since {ends}",
                f"{EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} USD an hour (standard support: {EKS_USD_PER_CLUSTER_HOUR:.2f})")  # fmt: skip
    return (f"EKS control plane: Kubernetes {version}, standard support until {ends}",
            f"{EKS_USD_PER_CLUSTER_HOUR:.2f} USD an hour, {EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} from {ends}")  # fmt: skip


def running_cost_items(config: DeploymentConfig) -> list[tuple[str, str]]:
    """What bills from step ``stacks`` until ``make destroy``: ``(item, price)`` pairs.

    One per row of docs/deploy.md's Cost table (``tests/deploy/test_deploy_prices.py`` checks the two agree).

    Prices are the sourced ones of this module; an unsourced one says so and how to look it up.
    """
    fleet = ", ".join(f"{g.instance_count} × {g.instance_type}" for g in config.gpu_groups if g.instance_count)
    ebs_gb = sum(g.ebs_volume_gb * g.instance_count for g in config.gpu_groups)
    azs, nat = config.network.max_azs, config.network.nat_gateways
    public_ips = nat + (azs if config.endpoint.scheme == "internet-facing" else 0)
    items = [
        (f"GPU instances (HyperPod): {fleet}", "per instance-hour, not sourced: aws pricing get-products "
         "--service-code AmazonSageMaker … (docs/deploy.md, Cost)"),
        (f"HyperPod instance EBS volumes: {ebs_gb} GB in all (ebs_volume_gb × instances)",
         "per GB-month, not sourced: https://aws.amazon.com/sagemaker-ai/pricing/ (HyperPod)"),
        eks_cost_item(config.cluster.kubernetes_version),
        (f"system nodes: {config.cluster.system_node_count} × {config.cluster.system_node_instance_type}",
         "EC2 on-demand per instance-hour, not sourced: aws pricing get-products --service-code AmazonEC2 …"),
        (f"NAT gateway: {config.network.nat_gateways}",
         f"{NAT_USD_PER_GATEWAY_HOUR} USD an hour each + {NAT_USD_PER_GATEWAY_HOUR} USD per GB"),
        (f"public IPv4 addresses: {public_ips}", f"{PUBLIC_IPV4_USD_PER_ADDRESS_HOUR} USD an hour each"),
        (f"Secrets Manager interface VPC endpoint: 1 in each of {azs} AZs",
         f"per AZ-hour, not sourced, + {INTERFACE_ENDPOINT_USD_PER_GB} USD per GB"),
        (f"load balancer: 1 {config.endpoint.kind.upper()}", "hourly + capacity units, not sourced"),
        (f"CloudWatch Logs: VPC flow logs and {EKS_CONTROL_PLANE_LOG_TYPES} EKS control-plane log types",
         f"{CLOUDWATCH_LOGS_USD_PER_GB_INGESTED:.2f} USD per GB ingested (less for flow logs) + storage per GB-month"),
    ]  # fmt: skip
    if config.observability.enabled:
        items.append(("Amazon Managed Prometheus", "samples ingested/stored/queried + scraper hours, not sourced"))
        if config.observability.grafana:
            items.append(("Amazon Managed Grafana", "9 USD per active editor/admin user a month"))
    items.append(("KMS keys: 3", "1 USD per key a month"))
    if config.endpoint.auth == "api_key":
        items.append(("Secrets Manager secret", "0.40 USD a month"))
    return items
