"""The price list: what one instance-hour of each instance type costs, with its source and date.

One source for the cost rules and dashboard row (``observability.cost_queries``), the sizing command,
the bench cost report, the price check against the AWS Price List API
(``whisper_build.workstation.price_lookup``) and the deploy tool's cost items (which also read
:data:`SERVICE_PRICES`). ``pricing.instances`` in the config overrides or extends
:data:`DEFAULT_PRICES` (``ml.g5.2xlarge: {hourly: 1.515, source: "…", as_of: 2026-12-01, basis:
sagemaker_hyperpod}``). Every default row is an **EC2 on-demand** price (us-east-1, Linux) from a
secondary source, not the HyperPod ``ml.*`` price (published only on the SageMaker pricing page and
in the Price List API; expected at or above EC2's, unverified); ``make prices`` looks those up with
credentials. A catalog type without a sourced price has no default (flagged by :func:`price_table`).
Entry points: :class:`PricingSettings`, :func:`price_table`, :func:`price_warnings`. Docs: docs/cost.md.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from settings import gpu_catalog

HOURS_PER_MONTH = 730.0
"""Instance-hours in a month of on-demand use: 24 × 365 ÷ 12, the month AWS pricing pages use."""

CURRENCY = "USD"
"""The one currency of the price list: the cost rules add prices up and the dashboard unit is
Grafana's ``currencyUSD``, so a price in another currency would be summed as dollars."""

PriceBasis = Literal["sagemaker_hyperpod", "ec2_on_demand", "ec2_spot_proxy", "estimate"]
"""What an hourly figure is: the HyperPod ``ml.*`` price itself, the EC2 on-demand price of the same
hardware (expected, unverified, to be at most the ``ml.*`` price), EC2's Spot price of the same hardware as
a proxy for a HyperPod Spot group's (a figure of EC2's Spot price history: say where and when in ``source``
and ``as_of``), or an estimate (say how in ``source``)."""


class InstancePrice(BaseModel):
    """One instance type's price per instance-hour.

    Attributes:
        hourly: price of one instance-hour, in ``currency``.
        currency: ISO 4217 code; only :data:`CURRENCY` is accepted.
        source: where the figure comes from (a public URL or document and section).
        as_of: date the figure was read or published.
        basis: :data:`PriceBasis`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    hourly: float = Field(gt=0, description="Price of one instance-hour, in currency.")
    currency: str = Field(CURRENCY, description="ISO 4217 code; USD only.")
    source: str = Field(min_length=1, description="Public URL or document the figure comes from.")
    as_of: datetime.date = Field(description="Date the figure was read or published (YYYY-MM-DD).")
    basis: PriceBasis = Field(
        "sagemaker_hyperpod", description="sagemaker_hyperpod (the ml.* price), ec2_on_demand or estimate."
    )

    @field_validator("currency")
    @classmethod
    def _usd_only(cls, value: str) -> str:
        if value != CURRENCY:
            raise ValueError(
                f"currency '{value}' is not supported: the cost rules add prices up and the dashboard shows "
                f"{CURRENCY}, so every price must be in {CURRENCY} (convert it, and say so in source)"
            )
        return value

    @property
    def verified_hyperpod(self) -> bool:
        """True only for a figure of the HyperPod ``ml.*`` price itself."""
        return self.basis == "sagemaker_hyperpod"


_EC2_PAGE = "EC2 on-demand pricing, us-east-1, Linux (https://aws.amazon.com/ec2/pricing/on-demand/)"
_AS_QUOTED = "as quoted by third-party price tables (instances.vantage.sh)"


def _ec2(hourly: float, source: str, as_of: str) -> InstancePrice:
    return InstancePrice(hourly=hourly, source=source, as_of=datetime.date.fromisoformat(as_of), basis="ec2_on_demand")


DEFAULT_PRICES: Mapping[str, InstancePrice] = {
    "ml.g5.xlarge": _ec2(1.006, f"{_EC2_PAGE} for g5.xlarge, {_AS_QUOTED}", "2026-11-30"),
    "ml.g5.2xlarge": _ec2(1.212, f"{_EC2_PAGE} for g5.2xlarge, {_AS_QUOTED}", "2026-11-30"),
    "ml.g6e.xlarge": _ec2(1.861, f"{_EC2_PAGE} for g6e.xlarge, {_AS_QUOTED}", "2026-11-30"),
    "ml.g6e.2xlarge": _ec2(2.24208, f"{_EC2_PAGE} for g6e.2xlarge, {_AS_QUOTED}", "2026-11-30"),
    "ml.p5.48xlarge": _ec2(
        55.04,
        f"{_EC2_PAGE} for p5.48xlarge after the June 2025 P5 price cut (was 98.32), instances.vantage.sh",
        "2025-12-21",
    ),
    "ml.p5en.48xlarge": _ec2(
        63.296,
        f"{_EC2_PAGE} for p5en.48xlarge, as quoted in dstack's instance price table (github.com/dstackai/dstack "
        "pull request 4110)",
        "2026-11-30",
    ),
}
"""Sourced default prices (EC2 on-demand, us-east-1; module docstring); keys are ``ml.*`` types."""


def catalog_instance_types() -> tuple[str, ...]:
    """Every GPU instance type of ``settings.gpu_catalog`` that HyperPod accepts, sorted."""
    hyperpod = gpu_catalog.hyperpod_instance_types()
    names = (
        f"ml.{family}.{size}"
        for family, sizes in gpu_catalog.INSTANCE_SIZES.items()
        for size in sizes
        if family in gpu_catalog.GPU_FAMILIES
    )
    return tuple(sorted(name for name in names if name in hyperpod))


class PricingSettings(BaseModel):
    """``pricing``: prices per instance type over the defaults (:data:`DEFAULT_PRICES`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instances: dict[str, InstancePrice] = Field(
        default_factory=dict,
        description="Instance type (ml.*) → price; overrides the sourced defaults of settings/prices.py.",
    )
    spot_instances: dict[str, InstancePrice] = Field(
        default_factory=dict,
        description="Instance type (ml.*) → Spot price of a Spot group (capacity.bulk_spot), e.g. EC2's Spot price "
        "history of the same hardware with basis ec2_spot_proxy, source and as_of; over spot_discount.",
    )
    spot_discount: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="ASSUMPTION: Spot costs this share less than the on-demand price (0.6: 60 % off), for the "
        "types spot_instances does not price; shown as an assumption wherever a Spot cost is.",
    )

    @field_validator("instances", "spot_instances")
    @classmethod
    def _hyperpod_types(cls, value: dict[str, InstancePrice]) -> dict[str, InstancePrice]:
        known = gpu_catalog.hyperpod_instance_types()
        unknown = sorted(name for name in value if name not in known)
        if unknown:
            raise ValueError(
                f"{', '.join(unknown)}: not a SageMaker HyperPod instance type (botocore's ClusterInstanceType); "
                "keys are instance types such as ml.g5.2xlarge"
            )
        return value

    def price_of(self, instance_type: str) -> InstancePrice | None:
        """The configured price of ``instance_type``, else its default, else ``None`` (not sourced)."""
        return self.instances.get(instance_type) or DEFAULT_PRICES.get(instance_type)

    def spot_price_of(self, instance_type: str) -> InstancePrice | None:
        """The Spot price of ``instance_type`` for a Spot group, or ``None``.

        ``spot_instances``, else the on-demand price less ``spot_discount`` (basis ``estimate``, source starting
        ``ASSUMPTION``), else ``None``: no default, AWS publishes no HyperPod Spot price to source one from.
        """
        if instance_type in self.spot_instances:
            return self.spot_instances[instance_type]
        on_demand = self.price_of(instance_type)
        if on_demand is None or self.spot_discount is None:
            return None
        return InstancePrice(
            hourly=round(on_demand.hourly * (1 - self.spot_discount), 6),
            source=f"ASSUMPTION: pricing.spot_discount {self.spot_discount:.0%} off the on-demand price "
            f"({on_demand.hourly:g} USD/h: {on_demand.source})",
            as_of=on_demand.as_of,
            basis="estimate",
        )


@dataclass(frozen=True)
class PriceRow:
    """One row of :func:`price_table`: an instance type, its price (``None``: unsourced), and where from."""

    instance_type: str
    price: InstancePrice | None
    origin: Literal["config", "default", "unsourced"]

    @property
    def flag(self) -> str:
        """Short verdict for a table: ``UNSOURCED``, ``EC2 price, ml.* unverified``, ``estimate`` or ``ml.*``."""
        if self.price is None:
            return "UNSOURCED"
        return {
            "ec2_on_demand": "EC2 price, ml.* unverified",
            "ec2_spot_proxy": "EC2 Spot proxy",
            "estimate": "estimate",
            "sagemaker_hyperpod": "ml.* price",
        }[self.price.basis]


def price_table(pricing: PricingSettings, extra_types: tuple[str, ...] = ()) -> Iterator[PriceRow]:
    """Every catalog instance type (plus ``extra_types`` and configured ones), with its price, sorted."""
    names = sorted({*catalog_instance_types(), *extra_types, *pricing.instances})
    for name in names:
        origin: Literal["config", "default", "unsourced"]
        if name in pricing.instances:
            origin = "config"
        elif name in DEFAULT_PRICES:
            origin = "default"
        else:
            origin = "unsourced"
        yield PriceRow(name, pricing.price_of(name), origin)


@dataclass(frozen=True)
class ServicePrice:
    """A published price of an AWS service the deployment uses: ``usd`` per ``unit``, ``source``, ``as_of``."""

    usd: float
    unit: str
    source: str
    as_of: datetime.date


_READ = datetime.date(2026, 11, 30)
_EKS_BLOG = (
    'AWS Containers blog, "Amazon EKS extended support for Kubernetes versions pricing" (2024), '
    "https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/"
)
_NAT_PAGE = "the AWS VPC pricing page (https://aws.amazon.com/vpc/pricing/) as quoted by third-party summaries in 2026"

SERVICE_PRICES: Mapping[str, ServicePrice] = {
    "eks_cluster": ServicePrice(0.10, "cluster-hour", f"{_EKS_BLOG}; standard support", _READ),
    "eks_cluster_extended": ServicePrice(0.60, "cluster-hour", f"{_EKS_BLOG}; extended support", _READ),
    "nat_gateway": ServicePrice(0.045, "gateway-hour", f"{_NAT_PAGE} (us-east-1)", _READ),
    "nat_gateway_data": ServicePrice(0.045, "GB processed", f"{_NAT_PAGE} (us-east-1)", _READ),
    "public_ipv4": ServicePrice(
        0.005,
        "address-hour",
        'every AWS-provided public IPv4 address since 2024-02-01: "Identify and optimize public IPv4 address usage '
        'on AWS", AWS Networking & Content Delivery blog (2023), as quoted by third-party summaries (doit.com, 2024)',
        _READ,
    ),
    "interface_endpoint_data": ServicePrice(
        0.01,
        "GB processed",
        "AWS PrivateLink pricing, https://aws.amazon.com/privatelink/pricing/ (first PB a month; read from a mirror "
        "of that page; the per-AZ-hour price is not captured)",
        _READ,
    ),
    "cloudwatch_logs_ingested": ServicePrice(
        0.50,
        "GB ingested",
        "CloudWatch Logs standard ingestion, us-east-1 (vended logs such as VPC flow logs are tiered from this price "
        "down): third-party summaries of https://aws.amazon.com/cloudwatch/pricing/",
        _READ,
    ),
    "kms_key": ServicePrice(
        1.0,
        "key-month",
        'https://aws.amazon.com/kms/pricing/ ("Each AWS KMS key that you create in AWS KMS costs $1/month (prorated '
        'hourly)"; no charge for keys scheduled for deletion)',
        datetime.date(2026, 12, 1),
    ),
    "secrets_manager_secret": ServicePrice(
        0.40,
        "secret-month",
        "https://aws.amazon.com/secrets-manager/pricing/ as transcribed by a third party (2026-09-20)",
        _READ,
    ),
    "grafana_editor": ServicePrice(
        9.0, "active editor/admin user-month", "https://aws.amazon.com/grafana/pricing/", _READ
    ),
}
"""Fixed service prices, US dollars, on-demand, us-east-1 (the deploy tool's cost items)."""


def spot_price_warnings(pricing: PricingSettings, spot_types: Mapping[str, str]) -> list[str]:
    """Warnings about the Spot groups' prices: none (their nodes are left out of the cost row), or an assumption.

    Args:
        pricing: the config's ``pricing``.
        spot_types: Spot instance group name → its instance type, e.g. ``{"g6e-spot": "ml.g6e.2xlarge"}``.
    """
    warnings = []
    for name, instance_type in spot_types.items():
        price = pricing.spot_price_of(instance_type)
        if price is None:
            warnings.append(
                f"pricing.spot_instances: {name} ({instance_type}) has no Spot price: its nodes are left out of the "
                f"cost row and make sizing's Spot share; set pricing.spot_instances.{instance_type} (EC2's Spot price "
                "history of the same hardware, with source and as_of) or pricing.spot_discount (an assumption)"
            )
        elif price.source.startswith("ASSUMPTION"):
            warnings.append(f"pricing.spot_discount: {name} ({instance_type}) is costed at {price.source}")
    return warnings


def price_warnings(pricing: PricingSettings, instance_types: Mapping[str, str]) -> list[str]:
    """Warnings (``make synth``) about the fleet's prices: types without one, and EC2 stand-ins.

    Args:
        pricing: the config's ``pricing``.
        instance_types: field path → instance type, e.g. ``{"gpu_groups.0.instance_type": "ml.g5.2xlarge"}``.
    """
    warnings = []
    stand_ins = []
    for field, instance_type in instance_types.items():
        price = pricing.price_of(instance_type)
        if price is None:
            warnings.append(
                f"{field}: {instance_type} has no price (no sourced default in settings/prices.py): the group is left "
                f"out of the dashboard's cost row, make sizing's mix and make bench-cost; set "
                f"pricing.instances.{instance_type} (make prices)"
            )
        elif price.basis == "ec2_on_demand":
            stand_ins.append(instance_type)
    if stand_ins:
        warnings.append(
            f"pricing.instances: {', '.join(dict.fromkeys(stand_ins))} priced at the EC2 on-demand default (the HyperPod "
            "ml.* price is not sourced); the Grafana dashboard's cost row and make sizing use it: make prices compares it with the AWS "
            "Price List, then set pricing.instances with the ml.* price"
        )
    return warnings
