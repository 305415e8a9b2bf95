"""The dashboard JSON loads back as a Grafana dashboard model (grafana-foundation-sdk types), has
the panels the operators need, and uses only expressions of observability/queries.py."""

from __future__ import annotations

import json

import pytest
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel

from observability import dashboard, queries
from settings import DEFAULT_CONFIG_PATH, load_config

REQUIRED_PANELS = {
    "Request rate: success / failure",
    "Cumulative requests",
    "Queued windows by level",
    "Windows answered and engine passes",
    "Mean batch (rows per engine pass)",
    "Active rows (windows decoding)",
    "Load ratio",
    "Load ratio over time",
    "Average latency: total / queue / compute",
    "Compute breakdown: input / infer / output",
    "Queue time per pod",
    "GPU utilization",
    "GPU memory used",
    "GPU power",
    "Gateway latency p50 / p90 / p99",
    "Audio seconds per second",
    "Real-time factor (RTF)",
}


@pytest.fixture(scope="module")
def config():
    return load_config(DEFAULT_CONFIG_PATH)


@pytest.fixture(scope="module")
def model(config) -> Dashboard:
    register_default_plugins()  # decode panel options/targets into their typed variants
    return Dashboard.from_json(json.loads(dashboard.dashboard_json(config)))


def _panels(model: Dashboard) -> list[Panel]:
    return [p for p in model.panels or [] if isinstance(p, Panel)]


LIVE_TITLES = {spec.title for spec in dashboard.live_panels()}
"""The live row's panels (their queries: observability/live_queries.py, tested in test_live_observability.py)."""
COST_TITLES = {
    "Cost per audio hour by GPU type",
    "Fleet cost per hour: total / idle",
    "Idle cost per hour by GPU type",
    "Utilisation of billed capacity",
    "Billed instances",
}
"""The cost row (tests/observability/test_cost_dashboard.py): recorded series, so left out below."""


def _query_panels(model: Dashboard) -> list[Panel]:
    return [p for p in _panels(model) if p.title not in COST_TITLES | LIVE_TITLES]


def test_json_loads_as_a_dashboard_model_with_the_required_panels(model):
    assert model.uid == dashboard.DASHBOARD_UID
    titles = [p.title for p in _panels(model)]
    assert set(titles) >= REQUIRED_PANELS, REQUIRED_PANELS - set(titles)
    assert len(titles) == len(set(titles))
    assert [r.title for r in model.panels if isinstance(r, RowPanel)] == [
        "Triton traffic",
        "Triton latency",
        "GPU (DCGM exporter)",
        "Gateway",
        dashboard.LIVE_ROW,
        dashboard.COST_ROW,
    ]


def test_every_panel_is_split_by_gpu_group_and_instance_type(model):
    for panel in _query_panels(model):
        assert panel.targets, panel.title
        for target in panel.targets:
            assert "by (gpu_group, instance_type" in target.expr, (panel.title, target.expr)
            assert "{{gpu_group}} ({{instance_type}})" in target.legend_format
            assert target.datasource.uid == dashboard.DATASOURCE_UID


def test_panels_use_exactly_the_query_module(model):
    used = {t.expr for p in _query_panels(model) for t in p.targets}
    assert used == {q.expr for q in queries.panel_queries()}


def test_gpu_utilization_has_a_threshold_line_and_compute_breakdown_is_stacked(model):
    by_title = {p.title: p for p in _panels(model)}
    gpu = by_title["GPU utilization"]
    assert gpu.field_config.defaults.custom.thresholds_style.mode == "line"
    steps = gpu.field_config.defaults.thresholds.steps
    assert steps[-1].value == queries.GPU_UTIL_THRESHOLD_PERCENT
    compute = by_title["Compute breakdown: input / infer / output"]
    assert compute.field_config.defaults.custom.stacking.mode == "normal"
    assert [t.ref_id for t in compute.targets] == ["A", "B", "C"]
    assert by_title["Load ratio"].type_val == "stat"


def test_utilization_threshold_follows_the_autoscaling_target(config):
    changed = config.model_copy(
        update={"autoscaling": config.autoscaling.model_copy(update={"target_utilization": 0.55})}
    )
    built = dashboard.build_dashboard(changed)
    panel = next(p for p in built["panels"] if p.get("title") == "Capacity-weighted utilization")
    assert panel["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] == 0.55


def test_write_dashboard_writes_indented_json(tmp_path, config):
    path = dashboard.write_dashboard(config, tmp_path / "grafana" / "d.json")
    assert json.loads(path.read_text()) == dashboard.build_dashboard(config)


def test_main_writes_dist_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert dashboard.main([str(DEFAULT_CONFIG_PATH)]) == 0
    written = tmp_path / dashboard.DASHBOARD_PATH
    assert json.loads(written.read_text())["title"] == dashboard.DASHBOARD_TITLE
    assert str(dashboard.DASHBOARD_PATH) in capsys.readouterr().out
