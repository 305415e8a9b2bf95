"""Price List lookups of ``ml.*`` prices against botocore's Stubber (moto has no Price List backend).

Responses follow the documented ``GetProducts`` shape: ``PriceList`` is a list of JSON documents,
each with ``product.attributes`` and ``terms.OnDemand.<offer>.priceDimensions.<dim>.pricePerUnit``.
"""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from settings import load_config
from whisper_build.workstation import price_lookup


def _product(instance: str, usd: str, usagetype: str, unit: str = "Hrs", description: str = "") -> str:
    sku = f"SKU{abs(hash((instance, usagetype))) % 10**6}"
    return json.dumps(
        {
            "product": {
                "productFamily": "ML Instance",
                "attributes": {
                    "instanceName": instance,
                    "regionCode": "us-east-1",
                    "usagetype": usagetype,
                    "operation": "RunInstance",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonSageMaker",
            "terms": {
                "OnDemand": {
                    f"{sku}.JRTCKXETXF": {
                        "priceDimensions": {
                            f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                                "unit": unit,
                                "pricePerUnit": {"USD": usd},
                                "description": description or f"{usd} per {usagetype}",
                            }
                        }
                    }
                }
            },
            "version": "20261201000000",
            "publicationDate": "2026-12-01T00:00:00Z",
        }
    )


def _filters(instance: str) -> list[dict[str, str]]:
    return [
        {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"},
        {"Type": "TERM_MATCH", "Field": "instanceName", "Value": instance},
    ]


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def _expect(
    stubber: Stubber, instance: str, products: list[str], token: str | None = None, next_token: str | None = None
) -> None:
    params: dict[str, Any] = {
        "ServiceCode": "AmazonSageMaker",
        "Filters": _filters(instance),
        "FormatVersion": "aws_v1",
    }
    if token:
        params["NextToken"] = token
    response: dict[str, Any] = {"FormatVersion": "aws_v1", "PriceList": products}
    if next_token:
        response["NextToken"] = next_token
    stubber.add_response("get_products", response, params)


def test_lookup_pages_through_get_products_and_reports_the_differing_hyperpod_price(client: Any) -> None:
    config = load_config()  # g5 at 1.212 (EC2 default), g6e at 2.24208
    with Stubber(client) as stubber:
        _expect(stubber, "ml.g5.2xlarge", [_product("ml.g5.2xlarge", "1.5150000000", "USE1-Notebk:ml.g5.2xlarge")],
                next_token="page-2")  # fmt: skip
        _expect(stubber, "ml.g5.2xlarge", [_product("ml.g5.2xlarge", "1.5150000000", "USE1-Cluster:ml.g5.2xlarge"),
                                           _product("ml.g5.2xlarge", "9.0", "USE1-Cluster:ml.g5.2xlarge", unit="GB-Mo")],
                token="page-2")  # fmt: skip
        _expect(stubber, "ml.g6e.2xlarge", [_product("ml.g6e.2xlarge", "2.2420800000", "USE1-Cluster:ml.g6e.2xlarge")])
        listed = price_lookup.lookup(client, "us-east-1", ["ml.g5.2xlarge", "ml.g6e.2xlarge"])
        stubber.assert_no_pending_responses()
    assert [(p.instance_type, p.hourly, p.looks_like_hyperpod) for p in listed] == [
        ("ml.g5.2xlarge", 1.515, False),  # notebook product: not HyperPod
        ("ml.g5.2xlarge", 1.515, True),  # the GB-Mo dimension is skipped
        ("ml.g6e.2xlarge", 2.24208, True),
    ]
    (line,) = price_lookup.differences(config, listed)
    assert line.startswith("ml.g5.2xlarge: listed 1.515 USD/h") and "configured 1.212 (ec2_on_demand" in line


def test_no_hyperpod_product_is_said_not_guessed(client: Any) -> None:
    config = load_config()
    listed = list(price_lookup.parse_products([_product("ml.g5.2xlarge", "1.4", "USE1-Train:ml.g5.2xlarge")]))
    lines = price_lookup.differences(config, listed)
    assert lines == [
        "ml.g5.2xlarge: no HyperPod-looking product listed (attribute unverified; see above)",
        "ml.g6e.2xlarge: no HyperPod-looking product listed (attribute unverified; see above)",
    ]


@pytest.mark.parametrize(
    ("region", "endpoint"),
    [
        ("us-east-1", "us-east-1"),
        ("eu-west-1", "us-east-1"),
        ("ap-southeast-2", "us-east-1"),
        ("cn-north-1", "cn-northwest-1"),
    ],
)
def test_the_price_list_endpoint_is_in_a_fixed_region_whatever_the_configured_one(region: str, endpoint: str) -> None:
    assert price_lookup.price_list_region(region) == endpoint


def test_the_table_shows_the_fleet_and_counts_the_rest() -> None:
    lines = price_lookup.table_lines(load_config())
    assert [line.split()[1] for line in lines[:-1]] == ["ml.g5.2xlarge", "ml.g6e.2xlarge"]
    everything = price_lookup.table_lines(load_config(), all_types=True)
    unsourced = sum("UNSOURCED" in line for line in everything)
    assert (
        lines[-1]
        == f"  ({len(everything) - 2} other instance types, {unsourced} unsourced: make prices ALL=1 lists them)"
    )


def test_the_table_flags_unsourced_types_and_marks_the_fleet() -> None:
    lines = price_lookup.table_lines(load_config(), all_types=True)
    g5 = next(line for line in lines if "ml.g5.2xlarge" in line)
    assert g5.startswith("* ") and "1.2120" in g5 and "EC2 price, ml.* unverified" in g5
    assert any("ml.g6.2xlarge" in line and "UNSOURCED" in line for line in lines)


def test_main_without_lookup_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert price_lookup.main(["--no-lookup"]) == 0
    assert "ml.g6e.2xlarge" in capsys.readouterr().out
