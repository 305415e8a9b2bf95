"""The price list in the typed config: currency, unknown instance types, unsourced rows flagged."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
import yaml

from settings import DEFAULT_CONFIG_PATH, ConfigError, parse_config
from settings.prices import DEFAULT_PRICES, PricingSettings, catalog_instance_types, price_table


def _config_with(prices: dict[str, Any]) -> Any:
    data = copy.deepcopy(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")))
    data["pricing"] = {"instances": prices}
    return parse_config(data)


def _price(**changes: Any) -> dict[str, Any]:
    return {"hourly": 1.5, "source": "aws pricing get-products (HyperPod, us-east-1)", "as_of": "2026-12-01", **changes}


def test_default_fleet_is_priced_from_the_sourced_table() -> None:
    config = parse_config(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")))
    g5, g6e = (config.pricing.price_of(g.instance_type) for g in config.gpu_groups)
    assert g5 is not None and g6e is not None
    assert (g5.hourly, g5.currency, g5.basis) == (1.212, "USD", "ec2_on_demand")
    assert g6e.hourly == 2.24208
    assert "https://aws.amazon.com/ec2/pricing/on-demand/" in g5.source


def test_a_configured_price_overrides_the_default_and_keeps_its_source_and_date() -> None:
    config = _config_with({"ml.g5.2xlarge": _price(basis="sagemaker_hyperpod")})
    price = config.pricing.price_of("ml.g5.2xlarge")
    assert price is not None
    assert (price.hourly, price.as_of, price.verified_hyperpod) == (1.5, datetime.date(2026, 12, 1), True)
    assert config.pricing.price_of("ml.g6e.2xlarge") == DEFAULT_PRICES["ml.g6e.2xlarge"]


def test_a_price_in_another_currency_fails_naming_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        _config_with({"ml.g5.2xlarge": _price(currency="EUR")})
    message = str(err.value)
    assert "pricing.instances.ml.g5.2xlarge.currency" in message
    assert "currency 'EUR' is not supported" in message


@pytest.mark.parametrize(
    ("prices", "field", "reason"),
    [
        ({"ml.g5.2xlarg": _price()}, "pricing.instances", "ml.g5.2xlarg: not a SageMaker HyperPod instance type"),
        ({"ml.g5.2xlarge": _price(hourly=0)}, "pricing.instances.ml.g5.2xlarge.hourly", "greater than 0"),
        ({"ml.g5.2xlarge": {"hourly": 1.5, "as_of": "2026-12-01"}}, "pricing.instances.ml.g5.2xlarge.source", ""),
        ({"ml.g5.2xlarge": _price(as_of="yesterday")}, "pricing.instances.ml.g5.2xlarge.as_of", ""),
    ],
    ids=["unknown-type", "zero-price", "no-source", "bad-date"],
)
def test_invalid_prices_fail_naming_the_field(prices: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config_with(prices)
    assert field in str(err.value)
    assert reason in str(err.value)


def test_every_catalog_type_has_a_row_and_unsourced_rows_are_flagged() -> None:
    rows = {row.instance_type: row for row in price_table(PricingSettings())}
    assert set(catalog_instance_types()) <= set(rows)
    assert rows["ml.g6.2xlarge"].price is None and rows["ml.g6.2xlarge"].flag == "UNSOURCED"
    assert rows["ml.p5en.48xlarge"].flag == "EC2 price, ml.* unverified"
    assert {name for name, row in rows.items() if row.price is not None} == set(DEFAULT_PRICES)
    assert all(price.source and price.as_of for price in DEFAULT_PRICES.values())


def test_a_configured_unsourced_type_is_no_longer_flagged() -> None:
    pricing = PricingSettings.model_validate({"instances": {"ml.g6.2xlarge": _price(basis="estimate")}})
    row = next(r for r in price_table(pricing) if r.instance_type == "ml.g6.2xlarge")
    assert (row.origin, row.flag) == ("config", "estimate")


def test_synth_warns_about_unpriced_types_and_ec2_stand_ins() -> None:
    from settings.advisories import config_warnings

    data = copy.deepcopy(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")))
    data["gpu_groups"][1]["instance_type"] = "ml.g6.2xlarge"
    warnings = [w for w in config_warnings(parse_config(data)) if "price" in w]
    assert warnings == [
        "gpu_groups.1.instance_type: ml.g6.2xlarge has no price (no sourced default in settings/prices.py): the group "
        "is left out of the dashboard's cost row, make sizing's mix and make bench-cost; set "
        "pricing.instances.ml.g6.2xlarge (make prices)",
        "pricing.instances: ml.g5.2xlarge priced at the EC2 on-demand default (the HyperPod ml.* price is not "
        "sourced); the Grafana dashboard's cost row and make sizing use it: make prices compares it with the AWS Price List, then set "
        "pricing.instances with the ml.* price",
    ]
    data["pricing"] = {"instances": {"ml.g5.2xlarge": _price(), "ml.g6.2xlarge": _price()}}
    assert [w for w in config_warnings(parse_config(data)) if "price" in w] == []
