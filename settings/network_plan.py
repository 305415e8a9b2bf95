"""The VPC's subnet plan, checked before CDK sees it.

CDK's ``ec2.IpAddresses.cidr`` does not reject a CIDR with host bits set: ``CidrBlock`` adds the
block size to the address and rounds down, so ``10.42.0.1/16`` silently becomes ``10.43.0.0/16``
(aws-cdk-lib 2.275 ``aws-ec2/lib/network-util.js``). A VPC too small for its subnets fails deep
inside jsii. :func:`check_vpc_cidr` turns both into one sentence naming the fix.

Subnets are allocated the way CDK's ``NetworkBuilder`` does: in subnet-configuration order (public,
then private), one per AZ, each aligned to its own size after the previous one.
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

import ipaddress

PUBLIC_SUBNET_MASK = 24
"""/24 public subnets (256 addresses per AZ): NAT gateways and internet-facing load balancers only."""
PRIVATE_SUBNET_MASK = 19
"""/19 private subnets: 8k addresses per AZ. VPC CNI gives every pod a VPC IP, and HyperPod GPU
nodes (e.g. ml.p5.48xlarge) take many ENIs, so private subnets are sized generously."""
SUBNET_MASKS = (PUBLIC_SUBNET_MASK, PRIVATE_SUBNET_MASK)
"""Subnet configurations in the order the network stack declares them (CDK allocates in this order)."""

VPC_PREFIX_RANGE = (16, 28)
"""An IPv4 VPC CIDR block is between /16 and /28 (Amazon VPC User Guide, "VPC CIDR blocks")."""


def allocate_subnets(vpc: ipaddress.IPv4Network, azs: int) -> list[ipaddress.IPv4Network] | None:
    """Subnets CDK carves out of ``vpc`` for ``azs`` AZs, or ``None`` when they do not fit.

    Args:
        vpc: The VPC network (no host bits).
        azs: AZs that get one subnet of every configuration.

    Returns:
        ``azs`` public /24s, then ``azs`` private /19s, each aligned to its own size.
    """
    subnets = []
    next_free = int(vpc.network_address)
    for mask in SUBNET_MASKS:
        size = 2 ** (32 - mask)
        for _ in range(azs):
            start = -(-next_free // size) * size  # round up to the block's alignment
            if start + size - 1 > int(vpc.broadcast_address):
                return None
            subnets.append(ipaddress.IPv4Network((start, mask)))
            next_free = start + size
    return subnets


def smallest_prefix(azs: int) -> int:
    """Longest VPC prefix (smallest VPC) that holds the subnets of ``azs`` AZs."""
    for prefix in range(VPC_PREFIX_RANGE[1], VPC_PREFIX_RANGE[0] - 1, -1):
        if allocate_subnets(ipaddress.IPv4Network((0, prefix)), azs) is not None:
            return prefix
    return VPC_PREFIX_RANGE[0]


def check_vpc_cidr(value: str, azs: int) -> ipaddress.IPv4Network:
    """Parse ``network.vpc_cidr`` and check the VPC's subnets fit.

    Args:
        value: The configured CIDR, e.g. ``10.42.0.0/16``.
        azs: ``network.max_azs``.

    Returns:
        The network.

    Raises:
        ValueError: not an IPv4 CIDR; host bits set (the message names the network the address
            belongs to); prefix outside /16–/28; or too small for ``azs`` public /24 and private /19
            subnets (the message names the largest prefix that fits).
    """
    try:
        network = ipaddress.IPv4Network(value, strict=False)
    except ValueError as err:
        raise ValueError(f"'{value}' is not an IPv4 CIDR block such as 10.42.0.0/16 ({err})") from None
    if "/" not in value:
        raise ValueError(
            f"'{value}' has no prefix length; write it as a CIDR block such as {network.network_address}/16"
        )
    if str(network) != value:
        raise ValueError(
            f"'{value}' has host bits set: the network it belongs to is {network}; "
            f"write {network} (CDK would silently shift a CIDR with host bits to another network)"
        )
    low, high = VPC_PREFIX_RANGE
    if not low <= network.prefixlen <= high:
        raise ValueError(f"a VPC CIDR block must be between /{low} and /{high} (Amazon VPC), not /{network.prefixlen}")
    if allocate_subnets(network, azs) is None:
        fits = smallest_prefix(azs)
        raise ValueError(
            f"{value} is too small for the subnets the VPC needs: {azs} public /{PUBLIC_SUBNET_MASK} and "
            f"{azs} private /{PRIVATE_SUBNET_MASK} (one each per AZ, network.max_azs = {azs}); "
            f"use a /{fits} or larger, e.g. {ipaddress.IPv4Network((int(network.network_address), fits), strict=False)}"
        )
    return network


def check_nat_gateways(nat_gateways: int, azs: int) -> None:
    """Refuse more NAT gateways than AZs.

    CDK places at most one NAT gateway in each AZ's public subnet: ``ec2.Vpc`` creates
    ``min(natGateways, AZs)`` (aws-cdk-lib 2.275 ``aws-ec2/lib/vpc.ts``, ``determineNatGatewayCount``),
    so the extra ones would silently not exist while a cost estimate from the config still counted them.

    Raises:
        ValueError: ``network.nat_gateways`` exceeds ``network.max_azs``; the message names both.
    """
    if nat_gateways > azs:
        raise ValueError(
            f"network.nat_gateways: {nat_gateways} NAT gateways but network.max_azs is {azs}; a VPC gets at most one "
            f"NAT gateway per AZ (CDK would create {azs}): set nat_gateways to at most {azs}, or raise max_azs"
        )
