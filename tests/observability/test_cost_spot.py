"""Spot nodes in the cost rules: their own exporter's series, priced at the Spot price, added to the group.

The ``up`` series are what the production scrape config makes of the synthesized exporters (one node each);
``promtool test rules`` evaluates the production expressions on them (no server).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from capacity_support import config, spot_data
from k8s_support import of_kind, scraped_by, synth

from observability import cost_queries
from observability.scrape_config import scrape_config
from settings import prices

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)")

OD_2X = 1.212  # settings.prices default for ml.g5.2xlarge
G6E = 2.24208


def _spot_fleet(**pricing: object) -> tuple[object, list[dict[str, str]]]:
    data = spot_data()  # g5: ml.g5.2/4/8xlarge, bulk on g5 with a g5-spot group of ml.g5.2xlarge
    data["pricing"] = pricing
    cfg = config(data)
    daemonsets = of_kind(synth(cfg), "DaemonSet")
    job = next(j for j in scrape_config(cfg)["scrape_configs"] if j["job_name"] == "dcgm-exporter")
    nodes = ("dcgm-exporter-g5-g5-2xlarge-abcde", "dcgm-exporter-g5-g5-2xlarge-spot-abcde", "dcgm-exporter-g6e-abcde")
    targets = [t for t in scraped_by(job, list(daemonsets.values())) if t["pod"] in nodes]
    assert len(targets) == 3, targets
    return cfg, targets


def _evaluate(expr: str, targets: list[dict[str, str]], tmp_path: Path) -> dict[str, float]:
    """``expr`` at 2 min over ``up{<target>} = 1``: value by ``gpu_group/instance_type`` (promtool's checker)."""
    series = [
        {
            "series": "up{" + ",".join(f'{k}="{v}"' for k, v in {"job": "dcgm-exporter", **t}.items()) + "}",
            "values": "1x5",
        }
        for t in targets
    ]
    (tmp_path / "rules.yml").write_text("groups: []\n")
    expected = {"g5": OD_2X + OD_2X * 0.5, "g6e": G6E}
    tests = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "2m",
                        "exp_samples": [
                            {
                                "labels": '{gpu_group="g5",instance_type="ml.g5.2xlarge"}',
                                "value": round(expected["g5"], 6),
                            },
                            {"labels": '{gpu_group="g6e",instance_type="ml.g6e.2xlarge"}', "value": G6E},
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(tests))
    run = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    return expected


def test_a_spot_node_is_billed_at_the_spot_price_beside_the_on_demand_node(tmp_path: Path) -> None:
    cfg, targets = _spot_fleet(spot_discount=0.5)
    assert {t.get("capacity") for t in targets} == {None, "spot"}
    groups = cost_queries.cost_groups(cfg)
    assert [(g.name, g.instance_type, g.spot, g.usd_per_hour) for g in groups if g.name == "g5"] == [
        ("g5", "ml.g5.2xlarge", False, OD_2X),
        ("g5", "ml.g5.2xlarge", True, round(OD_2X * 0.5, 6)),
    ]
    _evaluate(cost_queries.hourly_cost_expr(groups), targets, tmp_path)  # 1.212 + 0.606 for g5, g6e as before


def test_spot_prices_are_a_labelled_assumption_or_a_sourced_proxy_or_none() -> None:
    proxy = {"hourly": 0.5, "source": "EC2 Spot price history g5.2xlarge use1-az4", "as_of": "2026-12-01"}
    pricing = prices.PricingSettings(
        spot_discount=0.6, spot_instances={"ml.g5.4xlarge": {**proxy, "basis": "ec2_spot_proxy"}}
    )
    assumed = pricing.spot_price_of("ml.g5.2xlarge")
    assert assumed is not None and assumed.hourly == pytest.approx(OD_2X * 0.4)
    assert assumed.source.startswith("ASSUMPTION: pricing.spot_discount 60% off") and assumed.basis == "estimate"
    sourced = pricing.spot_price_of("ml.g5.4xlarge")
    assert sourced is not None and (sourced.hourly, sourced.basis) == (0.5, "ec2_spot_proxy")
    assert pricing.spot_price_of("ml.g5.8xlarge") is None  # no on-demand price to discount: stays unpriced
    assert prices.PricingSettings().spot_price_of("ml.g5.2xlarge") is None  # no invented default
    warnings = prices.spot_price_warnings(pricing, {"g5-spot": "ml.g5.2xlarge", "x-spot": "ml.g5.8xlarge"})
    assert warnings[0].startswith("pricing.spot_discount: g5-spot (ml.g5.2xlarge) is costed at ASSUMPTION")
    assert warnings[1].startswith("pricing.spot_instances: x-spot (ml.g5.8xlarge) has no Spot price")


def test_without_a_spot_price_the_spot_nodes_are_left_out_and_named() -> None:
    cfg, _ = _spot_fleet()
    assert not any(g.spot for g in cost_queries.cost_groups(cfg))
    assert "g5-spot" in cost_queries.unpriced_groups(cfg)
