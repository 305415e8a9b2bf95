"""Warnings about a valid config: things that synthesize and deploy but that a reviewer should see.

Printed by ``make synth`` (``scripts/synth.py``) under the summary; never a refusal. Each warning
starts with the field it is about.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

from settings import availability, prices
from settings.fleet import spot_group_name, spot_groups, spot_instance_types
from settings.schema import OPEN_CIDR, DeploymentConfig


def public_api_warning(config: DeploymentConfig) -> str | None:
    """The EKS public API endpoint open to the whole internet (the default), or ``None``."""
    cluster = config.cluster
    if cluster.endpoint_access != "public_and_private" or OPEN_CIDR not in cluster.public_access_cidrs:
        return None
    return (
        f"cluster.public_access_cidrs: the public Kubernetes API endpoint accepts connections from {OPEN_CIDR} "
        "(anyone on the internet can reach it; IAM authentication still applies); narrow it to your "
        "workstations'/VPN's CIDRs (curl -s https://checkip.amazonaws.com), or set cluster.endpoint_access: private"
    )


def config_warnings(config: DeploymentConfig) -> list[str]:
    """Every warning for ``config``, each ``<field>: <what and what to do>``."""
    types = {
        (
            f"gpu_groups.{index}.instance_types.{position}" if group.flexible else f"gpu_groups.{index}.instance_type"
        ): instance_type
        for index, group in enumerate(config.gpu_groups)
        for position, instance_type in enumerate(group.instance_types)
    }
    warnings = availability.offering_warnings(config.region, types)
    warnings += prices.price_warnings(config.pricing, types)
    spot = {spot_group_name(g): t for g in spot_groups(config) for t in spot_instance_types(g)}
    warnings += prices.spot_price_warnings(config.pricing, spot)
    public_api = public_api_warning(config)
    if public_api is not None:
        warnings.append(public_api)
    return warnings
