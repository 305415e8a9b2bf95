"""The Grafana dashboard, as code (``grafana-foundation-sdk``), from :mod:`observability.queries`.

Every panel target is a :class:`observability.queries.Query` (PromQL, AMP data source) or, in the bulk
row, a :class:`observability.cloudwatch_queries.MetricQuery` (CloudWatch data source); no query is
written here. Series are split by GPU group and instance type through their labels (legend
``{{gpu_group}} ({{instance_type}})``).

Build the JSON with ``python -m observability.dashboard [config.yaml]``, which writes
:data:`DASHBOARD_PATH` (``make synth`` runs it); the observability stack provisions the same JSON
into the Grafana workspace.
Docs: docs/observability.md, "Dashboard".
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import cloudwatch, prometheus, stat, timeseries
from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import cloudwatch as cloudwatch_models
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DataSourceRef, Threshold, ThresholdsMode

from observability import cost_queries
from observability.bulk_queries import Bulk, BulkTriton
from observability.cloudwatch_queries import DEFAULT_REGION, MetricQuery, bulk_queue
from observability.live_queries import Live
from observability.queries import GPU_UTIL_THRESHOLD_PERCENT, Gateway, Gpu, Query, Triton
from settings import DEFAULT_CONFIG_PATH, DeploymentConfig, load_config

DASHBOARD_UID = "whisper-hyperpod"
DASHBOARD_TITLE = "Whisper on HyperPod"
DATASOURCE_UID = "whisper-amp"
"""Uid of the AMP data source; the Grafana provisioner creates the data source with this uid."""
DATASOURCE_NAME = "Amazon Managed Prometheus (whisper)"
CLOUDWATCH_DATASOURCE_UID = "whisper-cloudwatch"
"""Uid of the CloudWatch data source (``bulk.enabled``: the bulk row's ``AWS/SQS`` panels); the provisioner
creates it with this uid."""
CLOUDWATCH_DATASOURCE_NAME = "Amazon CloudWatch (whisper)"
DASHBOARD_PATH = Path("dist/grafana/whisper-dashboard.json")

GROUP_LEGEND = "{{gpu_group}} ({{instance_type}})"
_DATASOURCE = DataSourceRef(type_val="prometheus", uid=DATASOURCE_UID)
_CLOUDWATCH = DataSourceRef(type_val="cloudwatch", uid=CLOUDWATCH_DATASOURCE_UID)
_REF_IDS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class Target:
    """A panel target: a query and the legend prefix naming it among the panel's series."""

    query: Query | MetricQuery
    name: str = ""


@dataclass(frozen=True)
class PanelSpec:
    """What one panel shows.

    Attributes:
        title: panel title.
        targets: the queries (one series per GPU group / instance type each).
        kind: ``timeseries`` or ``stat``.
        stacked: stack the series (compute breakdown).
        threshold: value drawn as a red threshold line (time series) or colour step (stat).
        width: grid columns out of 24.
    """

    title: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"
    stacked: bool = False
    threshold: float | None = None
    width: int = 12


def _legend(target: Target) -> str:
    assert isinstance(target.query, Query)
    extra = [label for label in target.query.labels if label not in ("gpu_group", "instance_type")]
    parts = [target.name] if target.name else []
    if "gpu_group" in target.query.labels:  # fleet-wide series carry no group
        parts.append(GROUP_LEGEND)
    parts += [f"{{{{{label}}}}}" for label in extra]
    return " ".join(parts)


def _thresholds(value: float) -> dash.ThresholdsConfig:
    return (
        dash.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=None, color="green"), Threshold(value=value, color="red")])
    )


def _panel(spec: PanelSpec) -> Any:
    unit = spec.targets[0].query.unit
    description = " ".join(t.query.description for t in spec.targets)
    panel: Any
    if spec.kind == "stat":
        panel = stat.Panel()
    elif spec.kind == "timeseries":
        panel = timeseries.Panel().fill_opacity(10).line_width(1)
        if spec.stacked:
            panel = panel.stacking(common_builder.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(60)
        if spec.threshold is not None:
            panel = panel.thresholds_style(
                common_builder.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE)
            )
    else:
        raise ValueError(f"panel '{spec.title}': unknown kind '{spec.kind}' (timeseries or stat)")
    panel = (
        panel.title(spec.title)
        .description(description)
        .unit(unit)
        .datasource(_datasource(spec))
        .height(8)
        .span(spec.width)
    )
    if spec.threshold is not None:
        panel = panel.thresholds(_thresholds(spec.threshold))
    for ref_id, target in zip(_REF_IDS, spec.targets, strict=False):
        panel = panel.with_target(_target(ref_id, target))
    return panel


def _datasource(spec: PanelSpec) -> DataSourceRef:
    """The one data source of a panel's targets (a panel mixes none)."""
    kinds = {isinstance(t.query, MetricQuery) for t in spec.targets}
    if len(kinds) != 1:
        raise ValueError(f"panel '{spec.title}': PromQL and CloudWatch targets in one panel")
    return _CLOUDWATCH if kinds == {True} else _DATASOURCE


def _target(ref_id: str, target: Target) -> Any:
    """A Prometheus target, or a CloudWatch metric-search target (builder mode) labelled ``target.name``.

    The CloudWatch fields are those of Grafana's CloudWatch query model (grafana-foundation-sdk
    ``models.cloudwatch.CloudWatchMetricsQuery``); ``id`` (a ``GetMetricData`` query id: a lowercase letter,
    then letters, digits, ``_``) is the query's key, ``matchExact`` keeps other dimension sets out.
    """
    query = target.query
    if isinstance(query, Query):
        return (
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(_legend(target))
            .ref_id(ref_id)
            .datasource(_DATASOURCE)
        )
    return (
        cloudwatch.CloudWatchMetricsQuery()
        .metric_query_type(cloudwatch_models.MetricQueryType.SEARCH)
        .metric_editor_mode(cloudwatch_models.MetricEditorMode.BUILDER)
        .region(DEFAULT_REGION)
        .namespace(query.namespace)
        .metric_name(query.metric_name)
        .dimensions(dict(query.dimensions))
        .match_exact(True)
        .statistic(query.statistic)
        .id(query.key)
        .label(target.name or query.metric_name)
        .ref_id(ref_id)
        .datasource(_CLOUDWATCH)
    )


def dashboard_rows(config: DeploymentConfig) -> tuple[tuple[str, tuple[PanelSpec, ...]], ...]:
    """Rows of the dashboard: ``(row title, panels)``; panel set documented in docs/observability.md."""
    target = config.autoscaling.target_utilization
    traffic = (
        PanelSpec(
            "Request rate: success / failure",
            (
                Target(Triton.REQUEST_RATE, "all"),
                Target(Triton.SUCCESS_RATE, "success"),
                Target(Triton.FAILURE_RATE, "failure"),
            ),
        ),
        PanelSpec("Cumulative requests", (Target(Triton.CUMULATIVE_REQUESTS),)),
        PanelSpec("Queued windows by level", (Target(Triton.QUEUED_WINDOWS),)),
        PanelSpec(
            "Windows answered and engine passes",
            (Target(Triton.FINISHED_THROUGHPUT, "windows/s"), Target(Triton.STEP_THROUGHPUT, "passes/s")),
        ),
        PanelSpec("Mean batch (rows per engine pass)", (Target(Triton.MEAN_STEP_ROWS),), width=6),
        PanelSpec("Load ratio", (Target(Triton.LOAD_RATIO),), kind="stat", width=6),
        PanelSpec("Load ratio over time", (Target(Triton.LOAD_RATIO),)),
        PanelSpec("Failure ratio", (Target(Triton.FAILURE_RATIO),), width=6),
        PanelSpec("Ready Triton instances", (Target(Triton.READY_INSTANCES),), kind="stat", width=6),
        PanelSpec("Active rows (windows decoding)", (Target(Triton.ACTIVE_ROWS),)),
    )
    latency = (
        PanelSpec(
            "Average latency: total / queue / compute",
            (
                Target(Triton.LATENCY_TOTAL_MS, "total"),
                Target(Triton.LATENCY_QUEUE_MS, "queue"),
                Target(Triton.LATENCY_COMPUTE_MS, "compute"),
            ),
        ),
        PanelSpec(
            "Compute breakdown: input / infer / output",
            (
                Target(Triton.COMPUTE_INPUT_MS, "input"),
                Target(Triton.COMPUTE_INFER_MS, "infer"),
                Target(Triton.COMPUTE_OUTPUT_MS, "output"),
            ),
            stacked=True,
        ),
        PanelSpec("Queue time per pod", (Target(Triton.QUEUE_MS_BY_POD),), width=24),
    )
    gpu = (
        PanelSpec("GPU utilization", (Target(Gpu.UTILIZATION),), threshold=GPU_UTIL_THRESHOLD_PERCENT),
        PanelSpec("GPU memory used", (Target(Gpu.MEMORY_USED),)),
        PanelSpec("GPU memory used (fullest GPU)", (Target(Gpu.MEMORY_USED_RATIO),)),
        PanelSpec("GPU power", (Target(Gpu.POWER),)),
        PanelSpec("MIG slice activity", (Target(Gpu.SLICE_ACTIVITY),), width=24),
    )
    gateway = (
        PanelSpec(
            "Gateway latency p50 / p90 / p99",
            (
                Target(Gateway.LATENCY_P50, "p50"),
                Target(Gateway.LATENCY_P90, "p90"),
                Target(Gateway.LATENCY_P99, "p99"),
            ),
        ),
        PanelSpec("Gateway requests by status", (Target(Gateway.REQUEST_RATE_BY_STATUS),)),
        PanelSpec("Audio seconds per second", (Target(Gateway.AUDIO_SECONDS_PER_SECOND),)),
        PanelSpec("Real-time factor (RTF)", (Target(Gateway.REAL_TIME_FACTOR),), threshold=1.0),
        PanelSpec(
            "Capacity-weighted utilization",
            (Target(Gateway.UTILIZATION),),
            threshold=target,
        ),
        PanelSpec("In-flight requests", (Target(Gateway.INFLIGHT),), width=6),
        PanelSpec("Ready gateway pods", (Target(Gateway.READY_PODS),), kind="stat", width=6),
    )
    rows = (
        ("Triton traffic", traffic),
        ("Triton latency", latency),
        ("GPU (DCGM exporter)", gpu),
        ("Gateway", gateway),
    )
    cost = cost_panels(config)
    extra: list[tuple[str, tuple[PanelSpec, ...]]] = [(COST_ROW, cost)] if cost else []
    if config.serving.realtime_max_sessions > 0:
        extra.insert(0, (LIVE_ROW, live_panels()))
    if config.bulk.enabled:
        extra.append((BULK_ROW, bulk_panels(config)))
    return (*rows, *extra)


LIVE_ROW = "Live transcription"


def live_panels() -> tuple[PanelSpec, ...]:
    """The live row (shown with ``serving.realtime_max_sessions`` > 0): :class:`observability.live_queries.Live`."""
    return (
        PanelSpec("Open live sessions", (Target(Live.SESSIONS_ACTIVE),)),
        PanelSpec("Sessions refused by reason", (Target(Live.SESSIONS_REFUSED),)),
        PanelSpec(
            "First delta after speech start p50 / p95",
            (Target(Live.FIRST_DELTA_P50, "p50"), Target(Live.FIRST_DELTA_P95, "p95")),
        ),
        PanelSpec(
            "Completed after turn end p50 / p95",
            (Target(Live.FINALISATION_P50, "p50"), Target(Live.FINALISATION_P95, "p95")),
        ),
        PanelSpec(
            "Session duration p50 / p95",
            (Target(Live.SESSION_DURATION_P50, "p50"), Target(Live.SESSION_DURATION_P95, "p95")),
        ),
        PanelSpec("Dropped updates per second", (Target(Live.UPDATES_DROPPED),), width=6),
        PanelSpec("Windows per update", (Target(Live.WINDOWS_PER_UPDATE),), width=6),
    )


BULK_ROW = "Bulk jobs"


def bulk_panels(config: DeploymentConfig) -> tuple[PanelSpec, ...]:
    """The bulk row (``bulk.enabled``).

    The queue from CloudWatch (:mod:`observability.cloudwatch_queries`), the workers' and their Triton's
    series (:mod:`observability.bulk_queries`).
    """
    sqs = bulk_queue(config)
    return (
        PanelSpec(
            "Oldest waiting job (SQS)",
            (Target(sqs.oldest_age, "oldest message age"),),
            threshold=config.bulk.oldest_message_alarm_seconds,
        ),
        PanelSpec(
            "Job queue: waiting / in flight (SQS)",
            (Target(sqs.visible, "waiting"), Target(sqs.in_flight, "in flight")),
        ),
        PanelSpec("Dead-letter queue (SQS)", (Target(sqs.dead_letter, "dead-lettered"),), threshold=1.0),
        PanelSpec("Queue: waiting / in flight / delayed (workers' view)", (Target(Bulk.BACKLOG),)),
        PanelSpec("Files in progress", (Target(Bulk.IN_PROGRESS),)),
        PanelSpec("Queue wait p99", (Target(Bulk.WAIT_P99),), width=6),
        PanelSpec("Audio hours done (last hour)", (Target(Bulk.AUDIO_HOURS),), width=6),
        PanelSpec("Wall time ÷ audio duration per file", (Target(Bulk.WALL_PER_AUDIO),), threshold=1.0),
        PanelSpec("Failures by reason (last hour)", (Target(Bulk.FAILURES),)),
        PanelSpec(
            "Bulk Triton: windows answered / engine passes per second",
            (Target(BulkTriton.WINDOWS, "windows/s"), Target(BulkTriton.EXECUTIONS, "passes/s")),
        ),
        PanelSpec("Bulk Triton: mean batch (rows per pass)", (Target(BulkTriton.AVERAGE_BATCH),), width=6),
        PanelSpec("Bulk Triton: window wait in the scheduler", (Target(BulkTriton.QUEUE_MS),), width=6),
    )


COST_ROW = "Cost (USD)"


def cost_panels(config: DeploymentConfig) -> tuple[PanelSpec, ...]:
    """The cost row: recorded series of ``observability.cost_queries``; empty when no group is priced."""
    rules = cost_queries.recording_rules(cost_queries.cost_groups(config))
    if not rules:
        return ()
    recorded = {rule.query.key: rule.recorded for rule in rules}
    return (
        PanelSpec(
            "Cost per audio hour by GPU type",
            (Target(recorded["cost_per_audio_hour"]), Target(recorded["fleet_cost_per_audio_hour"], "fleet")),
        ),
        PanelSpec(
            "Fleet cost per hour: total / idle",
            (
                Target(recorded["hourly_cost"]),
                Target(recorded["fleet_hourly_cost"], "fleet total"),
                Target(recorded["fleet_idle_cost"], "fleet idle"),
            ),
        ),
        PanelSpec("Idle cost per hour by GPU type", (Target(recorded["idle_cost"]),)),
        PanelSpec("Utilisation of billed capacity", (Target(recorded["billed_utilization"]),), width=6),
        PanelSpec("Billed instances", (Target(recorded["billed_instances"]),), kind="stat", width=6),
    )


def build_dashboard(config: DeploymentConfig) -> dict[str, Any]:
    """The dashboard as a JSON-ready dict (Grafana dashboard model, schema of the SDK)."""
    builder = (
        dash.Dashboard(DASHBOARD_TITLE)
        .uid(DASHBOARD_UID)
        .tags(["whisper", "triton", "hyperpod"])
        .refresh("1m")
        .time("now-3h", "now")
        .timezone("utc")
        .editable()
    )
    for row_title, panels in dashboard_rows(config):
        builder = builder.with_row(dash.Row(row_title))
        for spec in panels:
            builder = builder.with_panel(_panel(spec))
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


def dashboard_json(config: DeploymentConfig, indent: int | None = None) -> str:
    """:func:`build_dashboard` as JSON text (``indent=None``: compact, for the custom resource)."""
    return json.dumps(build_dashboard(config), indent=indent, sort_keys=True)


def write_dashboard(config: DeploymentConfig, path: Path = DASHBOARD_PATH) -> Path:
    """Write the dashboard JSON (indented) to ``path``, creating its folder. Returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dashboard_json(config, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m observability.dashboard [--out PATH] [config.yaml]``: write the dashboard JSON."""
    parser = argparse.ArgumentParser(prog="python -m observability.dashboard", description=main.__doc__)
    parser.add_argument("config", nargs="?", type=Path, default=DEFAULT_CONFIG_PATH, help="deployment config YAML")
    parser.add_argument("--out", type=Path, default=DASHBOARD_PATH, help=f"output file (default {DASHBOARD_PATH})")
    args = parser.parse_args(argv)
    print(write_dashboard(load_config(args.config), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
