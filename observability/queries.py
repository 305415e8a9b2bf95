"""Every PromQL expression of the project, in one place.

Dashboard panels (``observability/dashboard.py``), AMP recording and alert rules
(``observability/rules.py``), the KEDA scaling query (``k8s_charts``) and the live check
(``tests/observability/test_observability_live.py``) all import from here and never retype an
expression. Entry points: :class:`Triton`, :class:`Gpu`, :class:`Gateway` (the panels' queries),
:func:`scaling_utilization_query` (KEDA), :func:`alert_rules`; e.g.
``queries.Triton.SUCCESS_RATE.expr``. Labels ``gpu_group``, ``gpu_arch``, ``instance_type`` and
``pod`` come from the scrape relabelling (``observability/scrape_config.py``). Metric facts and
their sources: the docstrings of :class:`Triton` and :class:`Gpu`; docs/observability.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from observability.promql import GROUP_LABELS, check_group, group_by, selector, sum_rate
from whisper_build.contracts.live_metrics import SESSIONS_ACTIVE
from whisper_build.serving.contract import (
    SCHEDULER_ACTIVE_ROWS,
    SCHEDULER_FINISHED,
    SCHEDULER_QUEUED,
    SCHEDULER_STEP_ROWS,
    SCHEDULER_STEPS,
)

TRITON_MODEL = "whisper"
"""Triton model whose statistics are shown (docs/contracts.md §5). Nested models (a BLS call to
``tensorrt_llm``) are left out so that a request is not counted twice."""

TRANSCRIBE_ROUTES = ("/invocations", "/v1/audio/transcriptions", "/v1/audio/translations")
"""Gateway routes that transcribe (``whisper_build/serving/gateway/app.py``); ``/ping`` and ``/metrics``
are excluded from latency and throughput."""

JOB_TRITON = "whisper-triton"
JOB_GATEWAY = "whisper-gateway"
JOB_DCGM = "dcgm-exporter"
"""Scrape job names (``observability/scrape_config.py`` uses the same constants)."""

RATE_WINDOW = "2m"
"""Window of ``rate()`` in panels and rules: at least 4 scrapes at the 30 s AMP minimum interval,
so a rate always has two samples even when one scrape is missed (Prometheus ``rate`` docs)."""

RATIO_WINDOW = "5m"
"""Window of the failure ratio, long enough that one failed request in a quiet minute does not
read as a 100 % failure ratio."""

MIG_SLICE_LABELS = ("Hostname", "gpu", "GPU_I_PROFILE", "GPU_I_ID")
"""dcgm-exporter labels that identify one MIG slice: node, GPU index, GPU-instance profile and id."""

GPU_UTIL_THRESHOLD_PERCENT = 90.0
"""GPU utilization drawn as a threshold line on the dashboard (percent)."""

FAILURE_RATIO_ALERT = 0.05
QUEUE_MS_ALERT = 2000.0
GPU_MEMORY_ALERT_RATIO = 0.95
"""Alert thresholds: failure ratio (fraction), mean wait of a window in the model's scheduler (ms),
framebuffer used fraction."""


@dataclass(frozen=True)
class Query:
    """One PromQL expression with what a reader (panel, test) needs to know about its result.

    Attributes:
        key: stable identifier, unique across the module (used as panel ``refId`` base and in
            test ids).
        expr: the PromQL text.
        unit: Grafana unit id of the result (``reqps``, ``ms``, ``percent``, ``bytes``...).
        description: one line for humans (panel description, rule comment).
        labels: labels every result series carries (the live check asserts them).
    """

    key: str
    expr: str
    unit: str
    description: str
    labels: tuple[str, ...] = GROUP_LABELS


@dataclass(frozen=True)
class RecordingRule:
    """A Prometheus recording rule: ``record`` names the series ``query.expr`` produces."""

    record: str
    query: Query

    @property
    def recorded(self) -> Query:
        """A :class:`Query` that selects the recorded series (same labels and unit)."""
        return Query(
            key=f"recorded:{self.query.key}",
            expr=self.record,
            unit=self.query.unit,
            description=f"recorded: {self.query.description}",
            labels=self.query.labels,
        )


@dataclass(frozen=True)
class AlertRule:
    """A Prometheus alert rule.

    Attributes:
        alert: alert name.
        expr: the condition; returns series only while the alert should fire.
        signal: the underlying value the condition compares (returns data whenever the
            metrics exist, so it can be checked and graphed while all is well).
        for_: how long the condition must hold (Prometheus duration).
        severity: ``warning`` or ``critical`` (``severity`` label).
        summary: annotation text; may use ``{{ $labels.gpu_group }}`` and ``{{ $value }}``.
        labels: extra ``(name, value)`` labels of the alert (e.g. the GPU group of an
            ``absent()`` condition, whose result carries no labels).
    """

    alert: str
    expr: str
    signal: Query
    for_: str
    severity: str
    summary: str
    labels: tuple[tuple[str, str], ...] = ()


# --------------------------------------------------------------------------- helpers


_TRITON = selector(job=JOB_TRITON, model=TRITON_MODEL)
"""The serving pods' Triton only: the bulk pods' Triton (job ``whisper-bulk-triton``) has panels of its own and
must not move the serving panels, rules and alerts (a bulk window waits in Triton's queue by design)."""
_ROUTES = selector(route="~" + "|".join(TRANSCRIBE_ROUTES))


def _sum_rate(metric: str, matchers: str, *extra: str, window: str = RATE_WINDOW) -> str:
    return sum_rate(metric, matchers, window, *extra)


def _per_success_ms(duration_metric: str, *extra: str) -> str:
    """Average µs-counter time per successful request, in ms (latency counters count successes only)."""
    return (
        f"{_sum_rate(duration_metric, _TRITON, *extra)} / "
        f"{_sum_rate('nv_inference_request_success', _TRITON, *extra)} / 1000"
    )


def scheduler_wait_ms(matchers: str, *extra: str) -> str:
    """Mean wait of a window in the model's scheduler, in ms, summed by the group labels and ``extra``.

    Little's law: windows queued (averaged over the rate window) ÷ windows finished per second; ``+Inf``
    while windows wait and none finish (the hung case the alert must catch).
    """
    by = group_by(*extra)
    return (
        f"sum by ({by}) (avg_over_time({SCHEDULER_QUEUED}{matchers}[{RATE_WINDOW}])) / "
        f"sum by ({by}) (rate({SCHEDULER_FINISHED}{matchers}[{RATE_WINDOW}])) * 1000"
    )


def _all_outcomes(template: str, window: str = RATE_WINDOW) -> str:
    """``template`` applied to success and failure series joined with ``or``.

    Their label sets differ by ``reason``, so ``or`` keeps both and a missing failure series cannot
    empty the sum.
    """
    return (
        f"{template.format(m='nv_inference_request_success', s=_TRITON, w=window)} or "
        f"{template.format(m='nv_inference_request_failure', s=_TRITON, w=window)}"
    )


# --------------------------------------------------------------------------- Triton


class Triton:
    """Triton server statistics of model ``whisper``, per GPU group / instance type.

    Metric facts (Triton's metrics guide,
    https://github.com/triton-inference-server/server/blob/main/docs/user_guide/metrics.md, and Triton
    core ``src/metrics.cc`` / ``src/infer_stats.cc``; names as Triton 2.51 serves them): the latency
    counters (``nv_inference_*_duration_us``) grow only on **successful** requests, so averages divide
    by the success rate, never by success + failure. ``nv_inference_load_ratio`` no longer exists
    (removed in 2020); the load ratio here is end-to-end time ÷ compute-infer time, both from the
    cumulative µs counters. Queue and batches are the model scheduler's (``contract.SCHEDULER_METRICS``,
    Triton custom metrics): behind the decoupled front no request waits in Triton's queue and Triton's
    execution counters do not see the batches.
    """

    SUCCESS_RATE = Query(
        "triton_success_rate",
        _sum_rate("nv_inference_request_success", _TRITON),
        "reqps",
        "Successful inference requests per second.",
    )
    FAILURE_RATE = Query(
        "triton_failure_rate",
        _sum_rate("nv_inference_request_failure", _TRITON, "reason"),
        "reqps",
        "Failed inference requests per second, by failure reason (REJECTED, CANCELED, BACKEND, OTHER).",
        (*GROUP_LABELS, "reason"),
    )
    REQUEST_RATE = Query(
        "triton_request_rate",
        f"sum by ({group_by()}) ({_all_outcomes('rate({m}{s}[{w}])')})",
        "reqps",
        "Inference requests per second, all outcomes.",
    )
    CUMULATIVE_REQUESTS = Query(
        "triton_cumulative_requests",
        f"sum by ({group_by()}) ({_all_outcomes('{m}{s}')})",
        "short",
        "Inference requests since each Triton process started, all outcomes.",
    )
    FAILURE_RATIO = Query(
        "triton_failure_ratio",
        f"sum by ({group_by()}) (rate(nv_inference_request_failure{_TRITON}[{RATIO_WINDOW}])) / "
        f"sum by ({group_by()}) ({_all_outcomes('rate({m}{s}[{w}])', RATIO_WINDOW)})",
        "percentunit",
        f"Failed ÷ all inference requests over {RATIO_WINDOW}.",
    )
    QUEUED_WINDOWS = Query(
        "scheduler_queued_windows",
        f"sum by ({group_by('level')}) ({SCHEDULER_QUEUED}{_TRITON})",
        "short",
        "Windows waiting in the model's scheduler, by priority level (live, sync, bulk).",
        (*GROUP_LABELS, "level"),
    )
    ACTIVE_ROWS = Query(
        "scheduler_active_rows",
        f"sum by ({group_by()}) ({SCHEDULER_ACTIVE_ROWS}{_TRITON})",
        "short",
        "Windows being decoded now (rows of the running batches).",
    )
    FINISHED_THROUGHPUT = Query(
        "scheduler_finished_throughput",
        _sum_rate(SCHEDULER_FINISHED, _TRITON),
        "short",
        "Windows answered per second.",
    )
    STEP_THROUGHPUT = Query(
        "scheduler_step_throughput",
        _sum_rate(SCHEDULER_STEPS, _TRITON),
        "short",
        "Engine passes per second (static batches, or in-flight decode steps).",
    )
    MEAN_STEP_ROWS = Query(
        "scheduler_mean_step_rows",
        f"{_sum_rate(SCHEDULER_STEP_ROWS, _TRITON)} / {_sum_rate(SCHEDULER_STEPS, _TRITON)}",
        "short",
        "Mean batch: rows per engine pass.",
    )
    LOAD_RATIO = Query(
        "triton_load_ratio",
        f"{_sum_rate('nv_inference_request_duration_us', _TRITON)} / "
        f"{_sum_rate('nv_inference_compute_infer_duration_us', _TRITON)}",
        "short",
        "End-to-end time ÷ compute-infer time (1 = no queueing or I/O overhead).",
    )
    LATENCY_TOTAL_MS = Query(
        "triton_latency_total_ms",
        _per_success_ms("nv_inference_request_duration_us"),
        "ms",
        "Average end-to-end request time in Triton.",
    )
    LATENCY_QUEUE_MS = Query(
        "scheduler_wait_ms",
        scheduler_wait_ms(_TRITON),
        "ms",
        "Mean time a window waits in the model's scheduler: queued ÷ finished per second.",
    )
    LATENCY_COMPUTE_MS = Query(
        "triton_latency_compute_ms",
        f"sum by ({group_by()}) ("
        f"rate(nv_inference_compute_input_duration_us{_TRITON}[{RATE_WINDOW}]) + "
        f"rate(nv_inference_compute_infer_duration_us{_TRITON}[{RATE_WINDOW}]) + "
        f"rate(nv_inference_compute_output_duration_us{_TRITON}[{RATE_WINDOW}])) / "
        f"{_sum_rate('nv_inference_request_success', _TRITON)} / 1000",
        "ms",
        "Average compute time (input + infer + output) per request.",
    )
    COMPUTE_INPUT_MS = Query(
        "triton_compute_input_ms",
        _per_success_ms("nv_inference_compute_input_duration_us"),
        "ms",
        "Average compute-input time per request.",
    )
    COMPUTE_INFER_MS = Query(
        "triton_compute_infer_ms",
        _per_success_ms("nv_inference_compute_infer_duration_us"),
        "ms",
        "Average compute-infer time per request.",
    )
    COMPUTE_OUTPUT_MS = Query(
        "triton_compute_output_ms",
        _per_success_ms("nv_inference_compute_output_duration_us"),
        "ms",
        "Average compute-output time per request.",
    )
    QUEUE_MS_BY_POD = Query(
        "scheduler_wait_ms_by_pod",
        scheduler_wait_ms(_TRITON, "pod"),
        "ms",
        "Mean time a window waits in the model's scheduler, per pod.",
        (*GROUP_LABELS, "pod"),
    )
    READY_INSTANCES = Query(
        "triton_ready_instances",
        f"count by ({group_by()}) (up{selector(job=JOB_TRITON)} == 1)",
        "short",
        "Triton metrics endpoints answering scrapes.",
    )


# --------------------------------------------------------------------------- GPU (DCGM exporter)


class Gpu:
    """GPU gauges from the NVIDIA DCGM exporter, per GPU group / instance type.

    DCGM exporter gauges: ``DCGM_FI_DEV_GPU_UTIL`` (%), ``DCGM_FI_DEV_FB_USED`` /
    ``DCGM_FI_DEV_FB_FREE`` (MiB), ``DCGM_FI_DEV_POWER_USAGE`` (W) (NVIDIA dcgm-exporter
    ``etc/default-counters.csv``). On MIG slices ``DCGM_FI_DEV_GPU_UTIL`` is not reported per slice;
    the per-slice signal is the profiling gauge ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (ratio 0–1, in
    ``etc/dcp-metrics-included.csv``), labelled ``GPU_I_ID`` and ``GPU_I_PROFILE`` (dcgm-exporter
    README, "MIG"; DCGM user guide, profiling metrics).
    """

    UTILIZATION = Query(
        "gpu_utilization",
        f"avg by ({group_by()}) (DCGM_FI_DEV_GPU_UTIL)",
        "percent",
        "Average GPU utilization (DCGM_FI_DEV_GPU_UTIL, 0-100).",
    )
    MEMORY_USED = Query(
        "gpu_memory_used",
        f"sum by ({group_by()}) (DCGM_FI_DEV_FB_USED) * 1048576",
        "bytes",
        "GPU framebuffer memory used (DCGM reports MiB).",
    )
    MEMORY_USED_RATIO = Query(
        "gpu_memory_used_ratio",
        f"max by ({group_by()}) (DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))",
        "percentunit",
        "Fullest GPU's framebuffer used ÷ total.",
    )
    POWER = Query(
        "gpu_power",
        f"sum by ({group_by()}) (DCGM_FI_DEV_POWER_USAGE)",
        "watt",
        "GPU power draw.",
    )
    SLICE_ACTIVITY = Query(
        "gpu_slice_activity",
        f'avg by ({group_by(*MIG_SLICE_LABELS)}) (DCGM_FI_PROF_GR_ENGINE_ACTIVE{{GPU_I_ID!=""}})',
        "percentunit",
        "Graphics-engine activity per MIG slice (DCGM_FI_PROF_GR_ENGINE_ACTIVE by GPU instance, 0-1); "
        "MIG groups only: GPU utilization is not reported per slice.",
        (*GROUP_LABELS, *MIG_SLICE_LABELS),
    )


# --------------------------------------------------------------------------- gateway


def _gateway_latency(quantile: float) -> Query:
    pct = f"p{round(quantile * 100)}"
    return Query(
        f"gateway_latency_{pct}",
        f"histogram_quantile({quantile}, "
        f"{_sum_rate('whisper_gateway_request_duration_seconds_bucket', _ROUTES, 'le')})",
        "s",
        f"{pct} wall time of transcription requests at the gateway (histogram estimate).",
    )


class Gateway:
    """The gateway's own metrics (docs/contracts.md §7), per GPU group / instance type."""

    LATENCY_P50 = _gateway_latency(0.5)
    LATENCY_P90 = _gateway_latency(0.9)
    LATENCY_P99 = _gateway_latency(0.99)
    REQUEST_RATE_BY_STATUS = Query(
        "gateway_request_rate_by_status",
        _sum_rate("whisper_gateway_requests_total", _ROUTES, "status"),
        "reqps",
        "Transcription requests finished per second, by HTTP status.",
        (*GROUP_LABELS, "status"),
    )
    AUDIO_SECONDS_PER_SECOND = Query(
        "gateway_audio_seconds_per_second",
        _sum_rate("whisper_gateway_audio_seconds_total", _ROUTES),
        "short",
        "Seconds of audio transcribed per wall-clock second (throughput in real-time multiples).",
    )
    REAL_TIME_FACTOR = Query(
        "gateway_real_time_factor",
        f"{_sum_rate('whisper_gateway_request_duration_seconds_sum', _ROUTES)} / "
        f"{_sum_rate('whisper_gateway_audio_seconds_total', _ROUTES)}",
        "short",
        "Request wall time ÷ audio duration (RTF; below 1 is faster than real time).",
    )
    INFLIGHT = Query(
        "gateway_inflight",
        f"sum by ({group_by()}) (whisper_gateway_inflight_requests)",
        "short",
        "Requests being processed now.",
    )
    UTILIZATION = Query(
        "gateway_utilization",
        f"sum by ({group_by()}) (whisper_gateway_inflight_requests) / sum by ({group_by()}) (whisper_gateway_capacity_requests)",
        "percentunit",
        "Capacity-weighted utilization: in-flight (running + waiting) ÷ capacity of ready pods.",
    )
    READY_PODS = Query(
        "gateway_ready_pods",
        f"sum by ({group_by()}) (up{selector(job=JOB_GATEWAY)})",
        "short",
        "Ready gateway pods answering scrapes (the scraper keeps Ready pods only).",
    )


# --------------------------------------------------------------------------- rules


RECORDING_RULES: tuple[RecordingRule, ...] = (
    RecordingRule("whisper:triton_requests:rate2m", Triton.REQUEST_RATE),
    RecordingRule("whisper:triton_request_failures:ratio_rate5m", Triton.FAILURE_RATIO),
    RecordingRule("whisper:scheduler_wait_ms:mean2m", Triton.LATENCY_QUEUE_MS),
    RecordingRule("whisper:triton_compute_duration_ms:mean2m", Triton.LATENCY_COMPUTE_MS),
    RecordingRule("whisper:gateway_utilization:ratio", Gateway.UTILIZATION),
    RecordingRule("whisper:gpu_memory_used:ratio", Gpu.MEMORY_USED_RATIO),
)
"""Recording rules (names follow the Prometheus ``level:metric:operations`` convention)."""

_RECORD = {rule.query.key: rule.record for rule in RECORDING_RULES}


def no_ready_pods_expr(group: str) -> str:
    """Condition of the NoReadyPods alert for one GPU group: no Ready gateway pod answers scrapes.

    ``absent()`` returns one label-less series when no gateway target of the group is up, so the
    alert also fires for a group whose pods were never scheduled (the alert rule adds the
    ``gpu_group`` label itself).

    Raises:
        ValueError: ``group`` is not a lowercase DNS label.
    """
    return f"absent(up{selector(job=JOB_GATEWAY, gpu_group=check_group(group))} == 1)"


def alert_rules(groups: Sequence[str]) -> tuple[AlertRule, ...]:
    """Alert rules for a fleet whose GPU groups are ``groups`` (one NoReadyPods per group).

    Raises:
        ValueError: a group name is not a lowercase DNS label.
    """
    fixed = (
        AlertRule(
            "WhisperHighFailureRatio",
            f"{_RECORD[Triton.FAILURE_RATIO.key]} > {FAILURE_RATIO_ALERT}",
            Triton.FAILURE_RATIO,
            "10m",
            "critical",
            "More than 5 % of inference requests fail on GPU group {{ $labels.gpu_group }}.",
        ),
        AlertRule(
            "WhisperHighQueueTime",
            f"{_RECORD[Triton.LATENCY_QUEUE_MS.key]} > {QUEUE_MS_ALERT:g}",
            Triton.LATENCY_QUEUE_MS,
            "10m",
            "warning",
            "Windows wait {{ $value | humanize }} ms in the model's scheduler on GPU group "
            "{{ $labels.gpu_group }}: the group needs more replicas.",
        ),
        AlertRule(
            "WhisperGpuMemoryNearFull",
            f"{_RECORD[Gpu.MEMORY_USED_RATIO.key]} > {GPU_MEMORY_ALERT_RATIO}",
            Gpu.MEMORY_USED_RATIO,
            "15m",
            "warning",
            "A GPU of group {{ $labels.gpu_group }} has used {{ $value | humanizePercentage }} of its memory.",
        ),
    )
    per_group = tuple(
        AlertRule(
            "WhisperNoReadyPods",
            no_ready_pods_expr(group),
            Gateway.READY_PODS,
            "5m",
            "critical",
            f"GPU group {group} has no Ready serving pod.",
            (("gpu_group", group),),
        )
        for group in groups
    )
    return fixed + per_group


# --------------------------------------------------------------------------- autoscaling


def utilization_expr(matchers: str, realtime_max_sessions: int) -> str:
    """Capacity-weighted utilization of the pods ``matchers`` select: a fraction, label-less.

    ``sum(in-flight) / sum(capacity)`` + open live sessions ÷ (``realtime_max_sessions`` × pods): a
    session's updates take the same GPU as requests, so the two shares add. Pods are counted by their
    capacity series; ``or vector(0)`` keeps a gateway without the session gauge (an older image) from
    emptying the sum. ``realtime_max_sessions`` 0 (``serving.realtime_max_sessions``: no live
    sessions) leaves the request share alone.

    Raises:
        ValueError: ``realtime_max_sessions`` is negative.
    """
    requests = f"sum(whisper_gateway_inflight_requests{matchers}) / sum(whisper_gateway_capacity_requests{matchers})"
    if realtime_max_sessions < 0:
        raise ValueError(f"serving.realtime_max_sessions ({realtime_max_sessions}) must be 0 or more")
    if realtime_max_sessions == 0:
        return requests
    pods = f"count(count by (pod) (whisper_gateway_capacity_requests{matchers}))"
    sessions = f"(sum({SESSIONS_ACTIVE}{matchers}) or vector(0))"
    return f"{requests} + {sessions} / ({realtime_max_sessions} * {pods})"


def scaling_utilization_query(group: str, realtime_max_sessions: int) -> str:
    """KEDA query: capacity-weighted utilization of one GPU group (:func:`utilization_expr`).

    Only Ready pods are scraped (``observability/scrape_config.py``), so pods still loading their
    engine add no capacity. The result is a fraction; a KEDA ``prometheus`` trigger with
    ``metricType: Value`` and ``threshold: <autoscaling.target_utilization>`` scales the group's
    Deployment so that utilization stays near the target. Returns an empty vector when no pod of
    the group is scraped; the ScaledObjects set ``ignoreNullValues: "false"`` so KEDA treats that
    as an error and holds the ``fallback`` replicas instead of scaling to zero at peak
    (``k8s_charts/autoscaling.py``).

    Args:
        group: GPU group name, e.g. ``g5``.
        realtime_max_sessions: live sessions one pod holds (``serving.realtime_max_sessions``).

    Raises:
        ValueError: ``group`` is not a lowercase DNS label, or ``realtime_max_sessions`` < 0.
    """
    return utilization_expr(selector(gpu_group=check_group(group)), realtime_max_sessions)


def endpoint_utilization_query(namespace: str, endpoint: str, realtime_max_sessions: int) -> str:
    """Autoscaling query of one inference-operator endpoint (``serving.target: inference_operator``).

    The same capacity-weighted utilization as :func:`scaling_utilization_query`, over the pods of the
    ``InferenceEndpointConfig`` named ``endpoint``.

    The operator's pods carry the operator's labels, not this project's, so they are selected by
    namespace and by name: ``<endpoint>-<replica set hash>-<pod hash>``, assuming the operator names its
    Deployment after the endpoint config (the usual Deployment → ReplicaSet → pod naming; not verified
    on a cluster here). The two dash-free parts keep ``whisper`` from matching ``whisper-mig-1g-10gb``'s
    pods. Only Ready pods are scraped
    (``observability/scrape_config.py``).

    Raises:
        ValueError: ``namespace`` or ``endpoint`` is not a lowercase DNS label.
    """
    sel = selector(namespace=check_group(namespace), pod="~" + check_group(endpoint) + "-[a-z0-9]+-[a-z0-9]+")
    return utilization_expr(sel, realtime_max_sessions)


def scaling_query(group: str, realtime_max_sessions: int) -> Query:
    """:func:`scaling_utilization_query` as a :class:`Query` (result carries no labels)."""
    return Query(
        f"keda_utilization_{check_group(group)}",
        scaling_utilization_query(group, realtime_max_sessions),
        "percentunit",
        f"KEDA trigger: capacity-weighted utilization of GPU group {group}.",
        (),
    )


# --------------------------------------------------------------------------- catalogue


def _class_queries(namespace: type) -> Iterator[Query]:
    for value in vars(namespace).values():
        if isinstance(value, Query):
            yield value


PANEL_NAMESPACES = (Triton, Gpu, Gateway)


def panel_queries() -> tuple[Query, ...]:
    """Every panel-level query (Triton, GPU, gateway), in definition order."""
    return tuple(q for ns in PANEL_NAMESPACES for q in _class_queries(ns))


def all_queries(groups: Sequence[str], realtime_max_sessions: int = 64) -> tuple[Query, ...]:
    """Every expression of the project for a fleet of ``groups`` (KEDA's with ``realtime_max_sessions``).

    Panel queries (which include every recording-rule expression and every alert signal), the recorded
    series, and the KEDA query of each group.

    Alert conditions are not included (they return data only while firing); see
    :func:`alert_rules`.

    Raises:
        ValueError: a group name is not a lowercase DNS label.
    """
    recorded = tuple(rule.recorded for rule in RECORDING_RULES)
    keda = tuple(scaling_query(group, realtime_max_sessions) for group in groups)
    queries = (*panel_queries(), *recorded, *keda)
    keys = [q.key for q in queries]
    duplicates = {k for k in keys if keys.count(k) > 1}
    if duplicates:  # guards edits of this module
        raise RuntimeError(f"duplicate query keys in observability/queries.py: {sorted(duplicates)}")
    return queries
