"""``make prices``: the price list of a config, and the AWS Price List API's ``ml.*`` prices beside it.

Prints the fleet's instance types (``--all``: every catalog instance type) with the configured or
default price, its source and date, and flags rows without a source (``settings.prices``). With AWS credentials it then asks the Price List
Query API (``pricing`` client, ``GetProducts`` on service code ``AmazonSageMaker``) for the on-demand
hourly prices of the fleet's instance types in the configured region and prints where the config's
figure differs.

Entry point: :func:`main` (the details, in its docstring). Docs: docs/cost.md.
"""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from settings import DEFAULT_CONFIG_PATH, DeploymentConfig, load_config, regions
from settings.prices import CURRENCY, price_table

SERVICE_CODE = "AmazonSageMaker"
PREFERRED_ENDPOINTS = ("us-east-1", "ap-south-1", "eu-central-1")
"""Price List Query API endpoint regions, in the order tried (module docstring)."""
HYPERPOD_MARKERS = ("hyperpod", "cluster")
"""Words that mark a SageMaker price product as HyperPod cluster usage (unverified; module docstring)."""
ATTRIBUTES_SHOWN = ("usagetype", "operation", "component", "productFamily")
RELATIVE_TOLERANCE = 0.005
"""Configured and listed prices closer than 0.5 % are the same figure (rounding)."""


@functools.cache
def _pricing_endpoints() -> dict[str, tuple[str, ...]]:
    from botocore.loaders import create_loader

    data = create_loader().load_data("endpoints")
    return {
        partition["partition"]: tuple(partition["services"].get("api.pricing", {}).get("endpoints", {}))
        for partition in data["partitions"]
    }


def price_list_region(region: str) -> str:
    """Region of the Price List Query API endpoint to ask about prices in ``region``.

    Raises:
        LookupError: the region's partition has no Price List endpoint in botocore's data.
    """
    endpoints = _pricing_endpoints().get(regions.partition_of(region), ())
    for preferred in PREFERRED_ENDPOINTS:
        if preferred in endpoints:
            return preferred
    if endpoints:
        return endpoints[0]
    raise LookupError(f"no AWS Price List endpoint in the partition of {region} (botocore endpoints.json)")


@dataclass(frozen=True)
class ListedPrice:
    """One on-demand price dimension of a SageMaker price product (Price List ``GetProducts``).

    Attributes:
        instance_type: ``instanceName`` attribute, e.g. ``ml.g5.2xlarge``.
        hourly: ``pricePerUnit`` in :data:`~settings.prices.CURRENCY` per hour.
        attributes: the product attributes of :data:`ATTRIBUTES_SHOWN`.
        description: the price dimension's description.
    """

    instance_type: str
    hourly: float
    attributes: dict[str, str]
    description: str

    @property
    def looks_like_hyperpod(self) -> bool:
        """True when an attribute or the description mentions a :data:`HYPERPOD_MARKERS` word."""
        text = " ".join([*self.attributes.values(), self.description]).lower()
        return any(marker in text for marker in HYPERPOD_MARKERS)


def parse_products(price_list: Iterable[str]) -> Iterator[ListedPrice]:
    """On-demand hourly prices in a ``GetProducts`` ``PriceList`` (a list of JSON documents).

    Each document: ``{"product": {"attributes": {...}}, "terms": {"OnDemand": {<offer>:
    {"priceDimensions": {<dim>: {"unit": "Hrs", "pricePerUnit": {"USD": "1.5150000000"},
    "description": ...}}}}}}`` (AWS Price List user guide, "Price List API: GetProducts").
    Dimensions in other units or currencies, and reserved terms, are skipped.
    """
    for raw in price_list:
        document = json.loads(raw)
        attributes = document.get("product", {}).get("attributes", {})
        name = attributes.get("instanceName")
        if not name:
            continue
        for offer in document.get("terms", {}).get("OnDemand", {}).values():
            for dimension in offer.get("priceDimensions", {}).values():
                price = dimension.get("pricePerUnit", {}).get(CURRENCY)
                if dimension.get("unit", "").lower() not in ("hrs", "hours", "hour") or price is None:
                    continue
                yield ListedPrice(
                    instance_type=name,
                    hourly=float(price),
                    attributes={key: str(attributes[key]) for key in ATTRIBUTES_SHOWN if key in attributes},
                    description=str(dimension.get("description", "")),
                )


def lookup(client: Any, region: str, instance_types: Sequence[str]) -> list[ListedPrice]:
    """Every listed on-demand hourly price of ``instance_types`` in ``region``.

    Args:
        client: a boto3 ``pricing`` client (endpoint region: :func:`price_list_region`).
        region: region code the prices are for, e.g. ``us-east-1``.
        instance_types: ``ml.*`` instance types.
    """
    found: list[ListedPrice] = []
    paginator = client.get_paginator("get_products")
    for instance_type in instance_types:
        filters = [
            {"Type": "TERM_MATCH", "Field": "regionCode", "Value": region},
            {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance_type},
        ]
        for page in paginator.paginate(ServiceCode=SERVICE_CODE, Filters=filters, FormatVersion="aws_v1"):
            found.extend(parse_products(page.get("PriceList", [])))
    return found


def hyperpod_products(listed: Iterable[ListedPrice]) -> list[ListedPrice]:
    """The listed prices that look like HyperPod cluster usage (:attr:`ListedPrice.looks_like_hyperpod`)."""
    return [price for price in listed if price.looks_like_hyperpod]


def differences(config: DeploymentConfig, listed: Iterable[ListedPrice]) -> list[str]:
    """One line per fleet instance type whose HyperPod-looking listed price differs from the config's."""
    lines = []
    by_type: dict[str, list[ListedPrice]] = {}
    for price in hyperpod_products(listed):
        by_type.setdefault(price.instance_type, []).append(price)
    for instance_type in sorted({g.instance_type for g in config.gpu_groups}):
        configured = config.pricing.price_of(instance_type)
        candidates = by_type.get(instance_type, [])
        if not candidates:
            lines.append(f"{instance_type}: no HyperPod-looking product listed (attribute unverified; see above)")
            continue
        for price in candidates:
            if configured is None:
                lines.append(f"{instance_type}: listed {price.hourly:g} {CURRENCY}/h, none configured")
            elif abs(price.hourly - configured.hourly) > RELATIVE_TOLERANCE * configured.hourly:
                lines.append(
                    f"{instance_type}: listed {price.hourly:g} {CURRENCY}/h ({price.attributes}) but configured "
                    f"{configured.hourly:g} ({configured.basis}, {configured.source}); set pricing.instances"
                )
    return lines


def table_lines(config: DeploymentConfig, all_types: bool = False) -> list[str]:
    """The price table of ``config``: type, hourly, flag, origin, date, source.

    The fleet's types only, and a line counting the rest; ``all_types``: every catalog instance type,
    the fleet's marked ``*``.
    """
    fleet = tuple(g.instance_type for g in config.gpu_groups)
    lines = []
    rows = list(price_table(config.pricing, fleet))
    if not all_types:
        others = [row for row in rows if row.instance_type not in fleet]
        rows = [row for row in rows if row.instance_type in fleet]
        unsourced = sum(row.price is None for row in others)
        lines.append(f"  ({len(others)} other instance types, {unsourced} unsourced: make prices ALL=1 lists them)")
    for row in rows:
        mark = "*" if row.instance_type in fleet else " "
        if row.price is None:
            lines.append(
                f"{mark} {row.instance_type:<18} {'—':>9}  UNSOURCED: set pricing.instances.{row.instance_type}"
            )
            continue
        price = row.price
        lines.append(
            f"{mark} {row.instance_type:<18} {price.hourly:>9.4f}  {row.flag} ({row.origin}, {price.as_of}): {price.source}"
        )
    return lines if all_types else [*lines[1:], lines[0]]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m whisper_build.workstation.price_lookup [CONFIG] [--all] [--no-lookup]``; exit status 0.

    The Price List Query API has endpoints in a few regions only, whatever region the prices are for:
    us-east-1, eu-central-1 and ap-south-1 in the ``aws`` partition (botocore ``endpoints.json``, service
    ``api.pricing``; AWS Price List user guide, "Using the AWS Price List Query API"). The lookup uses the
    first of those the configured region's partition has.

    SageMaker lists one product per use of an instance type (training, hosting, notebooks, HyperPod
    clusters, …), told apart by product attributes. Which attribute marks HyperPod cluster usage is
    **unverified** (not checked against a live ``GetProducts`` answer): :func:`hyperpod_products` keeps products
    whose ``usagetype``, ``operation``, ``component`` or ``productFamily`` mentions a cluster or HyperPod
    (:data:`HYPERPOD_MARKERS`), and the printout shows those attributes so that a reader can check.

    Usage: ``python -m whisper_build.workstation.price_lookup [CONFIG] [--all] [--no-lookup]``. docs/cost.md.
    """
    parser = argparse.ArgumentParser(prog="make prices", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", type=Path, default=DEFAULT_CONFIG_PATH)
    parser.add_argument("--no-lookup", action="store_true", help="do not call the AWS Price List API")
    parser.add_argument("--all", action="store_true", help="every catalog instance type, not only the fleet's")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    print(f"instance prices ({CURRENCY} per instance-hour; * = in the fleet of {args.config}):")
    print("\n".join(table_lines(config, args.all)))
    if args.no_lookup:
        return 0
    import boto3

    session = boto3.session.Session()
    if session.get_credentials() is None:
        print("\nno AWS credentials: Price List lookup skipped (the figures above are the config's)")
        return 0
    endpoint = price_list_region(config.region)
    listed = lookup(
        session.client("pricing", region_name=endpoint), config.region, [g.instance_type for g in config.gpu_groups]
    )
    print(f"\nAWS Price List ({endpoint} endpoint), {SERVICE_CODE} on-demand in {config.region}:")
    for price in listed:
        print(f"  {price.instance_type} {price.hourly:g} {CURRENCY}/h {price.attributes} {price.description}")
    print("differences (HyperPod attribute unverified):")
    print("\n".join(f"  {line}" for line in differences(config, listed)) or "  none")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
