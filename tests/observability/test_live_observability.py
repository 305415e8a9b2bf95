"""Live transcription series: KEDA's utilization and the dashboard row's PromQL, evaluated by ``promtool test rules``.

docs/observability.md, "Live transcription"; observability/live_queries.py; observability/queries.py.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from observability import dashboard, queries
from observability.live_queries import Live
from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.contracts import live_metrics

needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (make system-deps)")
G5 = 'gpu_group="g5",instance_type="g5.xlarge"'


def _series(name: str, pod: str, values: str, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {"series": f'{name}{{{G5},pod="{pod}"{extra}}}', "values": values}


def _evaluate(tmp_path: Path, series: list[dict[str, str]], cases: list[tuple[str, list[tuple[str, float]]]]) -> None:
    """``promtool test rules``: each ``(expr, [(labels, value)])`` at 10 m over ``series`` sampled each minute."""
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": expr,
                    "eval_time": "10m",
                    "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
                }
                for expr, samples in cases
            ],
        }
    ]
    path = tmp_path / "live_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], "tests": tests}))
    result = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# two pods of capacity 4: 2 + 2 requests in flight (0.5), 16 + 32 sessions of 64 each (48 / 128 = 0.375)
REQUESTS = [
    _series("whisper_gateway_capacity_requests", "a", "4x15"),
    _series("whisper_gateway_capacity_requests", "b", "4x15"),
    _series("whisper_gateway_inflight_requests", "a", "2x15"),
    _series("whisper_gateway_inflight_requests", "b", "2x15"),
]
SESSIONS = [
    _series(live_metrics.SESSIONS_ACTIVE, "a", "16x15"),
    _series(live_metrics.SESSIONS_ACTIVE, "b", "32x15"),
]


@needs_promtool
def test_keda_utilization_adds_open_sessions_to_in_flight_requests(tmp_path: Path) -> None:
    _evaluate(
        tmp_path,
        REQUESTS + SESSIONS,
        [
            (queries.scaling_utilization_query("g5", 64), [("{}", 0.875)]),
            (queries.scaling_utilization_query("g5", 0), [("{}", 0.5)]),
            (queries.scaling_utilization_query("g6e", 64), []),  # no pod scraped: empty, KEDA's fallback
        ],
    )


@needs_promtool
def test_keda_utilization_of_a_gateway_without_the_session_gauge_is_its_requests(tmp_path: Path) -> None:
    _evaluate(tmp_path, REQUESTS, [(queries.scaling_utilization_query("g5", 64), [("{}", 0.5)])])


@needs_promtool
def test_live_row_queries_evaluate_per_group(tmp_path: Path) -> None:
    per_minute = {  # counters growing by these per minute → per second = ÷ 60
        "updates": (f"{live_metrics.UPDATES}_total", "0+60x15"),
        "windows": (f"{live_metrics.UPDATE_WINDOWS}_total", "0+90x15"),
        "dropped": (f"{live_metrics.UPDATES_DROPPED}_total", "0+6x15"),
    }
    series = [_series(name, "a", values) for name, values in per_minute.values()]
    series += [
        _series(f"{live_metrics.SESSIONS_REFUSED}_total", "a", "0+120x15", reason="full"),
        _series(f"{live_metrics.SESSIONS_REFUSED}_total", "b", "0+60x15", reason="full"),
        *SESSIONS,
    ]
    # first-delta histogram: 60 observations a minute, all in the (0.5, 1.0] bucket
    for le, per_min in (("0.5", "0"), ("1.0", "60"), ("+Inf", "60")):
        series.append(_series(f"{live_metrics.FIRST_DELTA}_bucket", "a", f"0+{per_min}x15", le=le))
    _evaluate(
        tmp_path,
        series,
        [
            (Live.SESSIONS_ACTIVE.expr, [(f"{{{G5}}}", 48)]),
            (Live.SESSIONS_REFUSED.expr, [(f'{{{G5},reason="full"}}', 3.0)]),
            (Live.WINDOWS_PER_UPDATE.expr, [(f"{{{G5}}}", 1.5)]),
            (Live.UPDATES_DROPPED.expr, [(f"{{{G5}}}", 0.1)]),
            (Live.FIRST_DELTA_P50.expr, [(f"{{{G5}}}", 0.75)]),
        ],
    )


def test_the_live_row_shows_every_live_query_and_only_with_live_sessions_on() -> None:
    config = load_config(DEFAULT_CONFIG_PATH)
    rows = dict(dashboard.dashboard_rows(config))
    used = {t.query.key for spec in rows[dashboard.LIVE_ROW] for t in spec.targets}
    assert used == {q.key for q in vars(Live).values() if isinstance(q, queries.Query)}
    assert all(
        "by (gpu_group, instance_type" in q.expr
        for spec in rows[dashboard.LIVE_ROW]
        for q in (t.query for t in spec.targets)
    )
    off = config.model_copy(update={"serving": config.serving.model_copy(update={"realtime_max_sessions": 0})})
    assert dashboard.LIVE_ROW not in dict(dashboard.dashboard_rows(off))
