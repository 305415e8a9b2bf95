"""The cost row of the dashboard and the cost rules: titles, unit currencyUSD, prices rendered from the config."""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest
import yaml

from observability import cost_queries, dashboard, queries, rules
from settings import DEFAULT_CONFIG_PATH, load_config, parse_config

COST_PANELS = {
    "Cost per audio hour by GPU type": "currencyUSD",
    "Fleet cost per hour: total / idle": "currencyUSD",
    "Idle cost per hour by GPU type": "currencyUSD",
    "Utilisation of billed capacity": "percentunit",
    "Billed instances": "short",
}


def _cost_row(built: dict) -> list[dict]:
    panels = built["panels"]
    start = next(i for i, p in enumerate(panels) if p.get("type") == "row" and p["title"] == dashboard.COST_ROW)
    return panels[start + 1 :]


def test_dashboard_has_the_cost_row_with_usd_units_and_recorded_series() -> None:
    row = _cost_row(dashboard.build_dashboard(load_config()))
    assert {p["title"]: p["fieldConfig"]["defaults"]["unit"] for p in row} == COST_PANELS
    exprs = {t["expr"] for p in row for t in p["targets"]}
    assert exprs == set(cost_queries.RECORD_NAMES.values()) - {cost_queries.RECORD_NAMES["audio_hours_per_hour"]}
    per_audio_hour = next(p for p in row if p["title"] == "Cost per audio hour by GPU type")
    assert [t["legendFormat"] for t in per_audio_hour["targets"]] == ["{{gpu_group}} ({{instance_type}})", "fleet"]


def test_prices_are_constants_rendered_from_the_config() -> None:
    data = copy.deepcopy(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")))
    price = {"hourly": 1.75, "source": "aws pricing get-products", "as_of": "2026-12-01"}
    data["pricing"] = {"instances": {"ml.g5.2xlarge": price}}
    hourly = cost_queries.cost_queries(cost_queries.cost_groups(parse_config(data))).hourly_cost.expr
    assert 'up{job="dcgm-exporter",gpu_group="g5"}) * 1.75' in hourly
    assert 'gpu_group="g6e"}) * 2.24208' in hourly  # the sourced default


def test_a_group_without_a_price_is_left_out_and_named() -> None:
    data = copy.deepcopy(yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8")))
    data["gpu_groups"][1]["instance_type"] = "ml.g6.2xlarge"  # no sourced default
    config = parse_config(data)
    assert [g.name for g in cost_queries.cost_groups(config)] == ["g5"]
    assert cost_queries.unpriced_groups(config) == ["g6e"]
    assert "g6e" not in cost_queries.cost_queries(cost_queries.cost_groups(config)).hourly_cost.expr


def test_no_priced_group_means_no_cost_rules_and_no_cost_row() -> None:
    config = load_config()
    empty = config.model_copy(update={"gpu_groups": []})
    assert cost_queries.recording_rules(cost_queries.cost_groups(empty)) == ()
    assert all(title != dashboard.COST_ROW for title, _ in dashboard.dashboard_rows(empty))
    document = rules.rule_groups(["g5"], 30)
    assert [g["name"] for g in document["groups"]] == [rules.RECORDING_GROUP, rules.ALERT_GROUP]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (make system-deps)")
def test_rules_file_with_the_cost_group_passes_promtool(tmp_path) -> None:
    config = load_config()
    path = tmp_path / "rules.yml"
    path.write_text(rules.rules_yaml(["g5", "g6e"], 30, cost_queries.recording_rules(cost_queries.cost_groups(config))))
    checked = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    expected = len(cost_queries.RECORD_NAMES) + len(queries.RECORDING_RULES) + len(queries.alert_rules(["g5", "g6e"]))
    assert f"{expected} rules found" in checked.stdout
