"""The cost rules on a real Prometheus: synthetic node and audio series → the hand-computed USD per audio hour.

Two hours of series up to now, as the production relabelling labels them, are written into the TSDB
with ``promtool tsdb create-blocks-from openmetrics`` before Prometheus starts with the production
rules file (``observability.rules`` with ``observability.cost_queries``), so the rules' one-hour rates
see a full hour. Expressions are evaluated at the last sample's time (``rate`` then extrapolates to
the window's ends and is exact); recorded series at their first evaluation, which on a busy machine
may come over a sample interval later, when ``rate`` extrapolates by half an interval only (< 2 %). The fleet, priced in the config at round figures:

* g5 (1.5 USD/h): two nodes (two dcgm-exporter targets; one of them failing its scrapes, ``up == 0``,
  still billed), one gateway pod transcribing 0.3 + 0.2 audio s/s over two routes, 4 requests in flight,
  8 slots per node (A10G default capacity, one pod per node), and Triton/gateway ``up`` series that
  must not count as instances;
* g6e (3.0 USD/h): one node, no serving pod at all (billed, idle).

By hand: g5 costs 2 × 1.5 = 3.0 USD/h for 0.5 audio h/h = 6.0 USD per audio hour; g6e 3.0 USD/h with
no audio (no figure); fleet 6.0 USD/h ÷ 0.5 = 12.0 USD per audio hour; utilisation g5 4 ÷ 16 = 0.25,
g6e 0; idle g5 3.0 × 0.75 = 2.25, g6e 3.0, fleet 5.25 USD/h.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
import yaml
from prometheus_server import PROMETHEUS, running_prometheus

from observability import cost_queries, queries, rules
from settings import DEFAULT_CONFIG_PATH, parse_config

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PROMETHEUS is None or shutil.which("promtool") is None, reason="needs prometheus + promtool"),
]

_DATA = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
_PRICE = {"source": "test fixture", "as_of": "2026-12-01", "basis": "estimate"}
_DATA["pricing"] = {
    "instances": {"ml.g5.2xlarge": {"hourly": 1.5, **_PRICE}, "ml.g6e.2xlarge": {"hourly": 3.0, **_PRICE}}
}
CONFIG = parse_config(copy.deepcopy(_DATA))
GROUPS = cost_queries.cost_groups(CONFIG)
COST = cost_queries.cost_queries(GROUPS)
STEP_S = 30
HISTORY_S = 2 * 3600

G5 = {"gpu_group": "g5", "instance_type": "ml.g5.2xlarge"}
G6E = {"gpu_group": "g6e", "instance_type": "ml.g6e.2xlarge"}


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _series(now: int) -> list[tuple[str, str, float, float]]:
    """(metric, labels, value at the first sample, increase per second)."""
    ns = CONFIG.serving.namespace
    return [
        ("up", _labels(job=queries.JOB_DCGM, pod="dcgm-exporter-g5-a", **G5), 1, 0),
        ("up", _labels(job=queries.JOB_DCGM, pod="dcgm-exporter-g5-b", **G5), 0, 0),  # scrape failing, still billed
        ("up", _labels(job=queries.JOB_DCGM, pod="dcgm-exporter-g6e-a", **G6E), 1, 0),
        ("up", _labels(job=queries.JOB_TRITON, pod="whisper-g5-0", namespace=ns, **G5), 1, 0),
        ("up", _labels(job=queries.JOB_GATEWAY, pod="whisper-g5-0", namespace=ns, **G5), 1, 0),
        ("whisper_gateway_audio_seconds_total", _labels(route="/v1/audio/transcriptions", pod="whisper-g5-0", **G5), 500, 0.3),
        ("whisper_gateway_audio_seconds_total", _labels(route="/invocations", pod="whisper-g5-0", **G5), 20, 0.2),
        ("whisper_gateway_inflight_requests", _labels(pod="whisper-g5-0", **G5), 4, 0),
    ]  # fmt: skip


def _openmetrics(now: int) -> str:
    lines: list[str] = []
    series = _series(now)
    for metric in dict.fromkeys(name for name, *_ in series):
        lines.append(f"# TYPE {metric} unknown")
        for name, labels, start, slope in series:
            if name != metric:
                continue
            for t in range(now - HISTORY_S, now + 1, STEP_S):
                lines.append(f"{name}{labels} {start + slope * (t - now + HISTORY_S)} {t}")
    return "\n".join([*lines, "# EOF"]) + "\n"


def _query(url: str, expr: str, at: float | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
    answer = httpx.get(f"{url}/api/v1/query", params=params, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return {
        tuple(sorted((k, v) for k, v in s["metric"].items() if k in ("gpu_group", "instance_type"))): float(
            s["value"][1]
        )
        for s in answer["data"]["result"]
    }


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory) -> Iterator[tuple[str, float, float]]:
    """(URL, time of the last sample, time by which the cost rules had evaluated once)."""
    workdir = tmp_path_factory.mktemp("cost-prometheus")
    now = int(time.time())
    source = workdir / "series.om"
    source.write_text(_openmetrics(now))
    subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(source), str(workdir / "data")],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    rules_path = workdir / "rules.yml"
    groups = [g.name for g in CONFIG.gpu_groups]
    rules_path.write_text(rules.rules_yaml(groups, 1, cost_queries.recording_rules(GROUPS)))
    config = {"global": {"evaluation_interval": "1s"}, "rule_files": [str(rules_path)], "scrape_configs": []}
    with running_prometheus(config, workdir) as url:
        deadline = time.monotonic() + 90
        while not _query(url, cost_queries.RECORD_NAMES["fleet_idle_cost"]):
            assert time.monotonic() < deadline, "cost rules did not evaluate within 90 s"
            time.sleep(0.5)
        yield url, float(now), time.time()


G5_KEY = tuple(sorted(G5.items()))
G6E_KEY = tuple(sorted(G6E.items()))
EXPECTED = {
    "billed_instances": {G5_KEY: 2, G6E_KEY: 1},
    "hourly_cost": {G5_KEY: 3.0, G6E_KEY: 3.0},
    "audio_hours_per_hour": {G5_KEY: 0.5},
    "cost_per_audio_hour": {G5_KEY: 6.0},
    "fleet_hourly_cost": {(): 6.0},
    "fleet_cost_per_audio_hour": {(): 12.0},
    "billed_utilization": {G5_KEY: 0.25, G6E_KEY: 0.0},
    "idle_cost": {G5_KEY: 2.25, G6E_KEY: 3.0},
    "fleet_idle_cost": {(): 5.25},
}


@pytest.mark.parametrize("query", COST.all(), ids=[q.key for q in COST.all()])
def test_expression_gives_the_hand_computed_figure(prometheus, query):
    url, last_sample, _ = prometheus
    assert _query(url, query.expr, last_sample) == pytest.approx(EXPECTED[query.key], rel=1e-9)


@pytest.mark.parametrize("rule", cost_queries.recording_rules(GROUPS), ids=lambda r: r.record)
def test_recorded_series_gives_the_hand_computed_figure(prometheus, rule):
    url, _, evaluated = prometheus
    assert _query(url, rule.record, evaluated) == pytest.approx(EXPECTED[rule.query.key], rel=0.02)


def test_every_cost_rule_evaluates_cleanly(prometheus):
    loaded = httpx.get(f"{prometheus[0]}/api/v1/rules", timeout=10).json()["data"]["groups"]
    (cost,) = [g for g in loaded if g["name"] == rules.COST_GROUP]
    assert [(r["name"], r["health"]) for r in cost["rules"]] == [(n, "ok") for n in cost_queries.RECORD_NAMES.values()]
