"""Queries, rules and scrape config of observability/: shape, names, and PromQL syntax checked by
the real Prometheus parser (``promtool`` from the Debian ``prometheus`` package)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from observability import queries, rules, scrape_config
from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.paths import REPO_ROOT
from whisper_build.serving.gateway import app as gateway_app

EXAMPLE_CONFIG = REPO_ROOT / "config" / "examples" / "three-groups.yaml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (make system-deps)")


@pytest.fixture(scope="module")
def config():
    return load_config(DEFAULT_CONFIG_PATH)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_query_keys_are_unique_and_every_query_is_labelled():
    everything = queries.all_queries(["g5", "g6e"])
    keys = [q.key for q in everything]
    assert len(keys) == len(set(keys))
    for query in queries.panel_queries():
        assert set(queries.GROUP_LABELS) <= set(query.labels), query.key
        assert all(label in query.expr for label in query.labels), query.key


def test_scaling_query_is_capacity_weighted_utilization_of_one_group():
    assert queries.scaling_utilization_query("g5", 0) == (
        'sum(whisper_gateway_inflight_requests{gpu_group="g5"}) / '
        'sum(whisper_gateway_capacity_requests{gpu_group="g5"})'
    )


@pytest.mark.parametrize("bad", ["G5", 'g5"} or vector(1) #', "", "-g5"])
def test_group_names_that_could_break_promql_are_rejected(bad):
    with pytest.raises(ValueError, match="gpu_groups"):
        queries.scaling_utilization_query(bad, 64)
    with pytest.raises(ValueError, match="gpu_groups"):
        queries.alert_rules([bad])


def test_transcription_routes_match_the_gateway():
    assert set(queries.TRANSCRIBE_ROUTES) == {gateway_app.INVOCATIONS, gateway_app.OPENAI, gateway_app.TRANSLATIONS}
    assert set(queries.TRANSCRIBE_ROUTES) < gateway_app.ROUTES


def test_one_no_ready_pods_alert_per_group_carrying_its_group():
    alerts = [a for a in queries.alert_rules(["g5", "g6e"]) if a.alert == "WhisperNoReadyPods"]
    assert [dict(a.labels)["gpu_group"] for a in alerts] == ["g5", "g6e"]
    assert 'gpu_group="g6e"' in alerts[1].expr and "absent(" in alerts[1].expr


def test_alerts_on_recorded_series_refer_to_existing_recording_rules():
    recorded = {rule.record for rule in queries.RECORDING_RULES}
    for alert in queries.alert_rules(["g5"]):
        names = [token for token in alert.expr.split() if token.startswith("whisper:")]
        assert all(name in recorded for name in names), alert.alert


def test_rules_file_has_every_recording_rule_and_alert(config):
    doc = rules.rule_groups([g.name for g in config.gpu_groups], 30)
    recording, alerting = doc["groups"]
    assert [r["record"] for r in recording["rules"]] == [r.record for r in queries.RECORDING_RULES]
    assert {r["alert"] for r in alerting["rules"]} == {
        "WhisperHighFailureRatio",
        "WhisperHighQueueTime",
        "WhisperGpuMemoryNearFull",
        "WhisperNoReadyPods",
    }
    assert recording["interval"] == "30s"
    with pytest.raises(ValueError, match="positive"):
        rules.rule_groups(["g5"], 0)


@needs_promtool
def test_every_expression_parses_with_prometheus(tmp_path):
    """All queries (panels, recorded series, KEDA) and the rules file pass ``promtool check rules``."""
    every = [{"record": f"check:{i}", "expr": q.expr} for i, q in enumerate(queries.all_queries(["g5", "g6e"]))]
    every += [{"record": f"alert_signal:{i}", "expr": a.expr} for i, a in enumerate(queries.alert_rules(["g5"]))]
    path = tmp_path / "all.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "all", "rules": every}]}))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    path.write_text(rules.rules_yaml(["g5", "g6e"], 30))
    result = _promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def test_scrape_config_jobs_relabel_pod_labels_and_map_instance_types():
    config = load_config(EXAMPLE_CONFIG)
    doc = scrape_config.scrape_config(config)
    assert doc["global"]["scrape_interval"] == f"{config.observability.scrape_interval_seconds}s"
    jobs = {job["job_name"]: job for job in doc["scrape_configs"]}
    assert set(jobs) == {queries.JOB_TRITON, queries.JOB_GATEWAY, queries.JOB_DCGM}
    for job in jobs.values():
        assert [sd["role"] for sd in job["kubernetes_sd_configs"]] == ["pod"]
        targets = {r.get("target_label"): r for r in job["relabel_configs"]}
        assert targets["gpu_group"]["source_labels"] == ["__meta_kubernetes_pod_label_whisper_hyperpod_io_gpu_group"]
        assert targets["gpu_arch"]["source_labels"] == ["__meta_kubernetes_pod_label_whisper_hyperpod_io_gpu_arch"]
        mapping = {
            r["regex"]: r["replacement"] for r in job["relabel_configs"] if r.get("target_label") == "instance_type"
        }
        assert mapping == {g.name: g.instance_type for g in config.gpu_groups}
    ports = {
        name: [
            r["regex"]
            for r in job["relabel_configs"]
            if r.get("source_labels") == ["__meta_kubernetes_pod_container_port_number"]
        ]
        for name, job in jobs.items()
    }
    assert ports[queries.JOB_TRITON] == [str(config.serving.triton_metrics_port)]
    assert ports[queries.JOB_GATEWAY] == [str(config.serving.gateway_metrics_port)]  # not the traffic port
    ready = [
        r
        for r in jobs[queries.JOB_GATEWAY]["relabel_configs"]
        if r.get("source_labels") == ["__meta_kubernetes_pod_ready"]
    ]
    assert ready == [{"source_labels": ["__meta_kubernetes_pod_ready"], "regex": "true", "action": "keep"}]
    assert yaml.safe_load(scrape_config.scrape_config_yaml(config)) == doc


@needs_promtool
def test_local_scrape_config_reuses_the_production_relabels_and_is_a_valid_prometheus_config(config, tmp_path):
    rules_path = tmp_path / "rules.yml"
    rules_path.write_text(rules.rules_yaml(["g5"], 1))
    pod = scrape_config.LocalPod("127.0.0.1:1", "whisper-g5-0", config.serving.namespace, "g5", "sm86")
    doc = scrape_config.local_scrape_config(
        config, {queries.JOB_TRITON: [pod], queries.JOB_GATEWAY: [pod]}, 1, [str(rules_path)]
    )
    production = {
        job["job_name"]: job["relabel_configs"] for job in scrape_config.scrape_config(config)["scrape_configs"]
    }
    for job in doc["scrape_configs"]:
        assert job["relabel_configs"] == production[job["job_name"]]
        (static,) = job["static_configs"]
        assert static["labels"]["__meta_kubernetes_pod_label_whisper_hyperpod_io_gpu_group"] == "g5"
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(doc))
    result = _promtool("check", "config", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    with pytest.raises(ValueError, match="unknown scrape job"):
        scrape_config.local_scrape_config(config, {"nope": [pod]}, 1)


def test_rule_expressions_and_alert_signals_are_panel_queries():
    """So the live check, which evaluates every panel query, covers them all."""
    panels = set(queries.panel_queries())
    assert {rule.query for rule in queries.RECORDING_RULES} <= panels
    assert {alert.signal for alert in queries.alert_rules(["g5"])} <= panels
