"""PromQL of the bulk workers (``bulk.enabled``) and of their own Triton.

Workers: backlog, in flight, wait, audio hours, failures, wall ÷ audio; their Triton: windows per second,
batch, queue time.

Series: the workers' own metrics (docs/contracts.md §7, bulk workers), scraped by the ``whisper-bulk``
job (:func:`observability.scrape_config.scrape_jobs`) from every ``app.kubernetes.io/name=whisper-bulk``
pod, relabelled with its GPU group. Workers scale to zero: with none running these series are absent, not
0 — the queue itself is then CloudWatch's (``AWS/SQS``: :mod:`observability.cloudwatch_queries`, the bulk
stack's alarms) and ``make jobs``'.
"""

from __future__ import annotations

from observability.promql import GROUP_LABELS, group_by, selector, sum_rate
from observability.queries import RATE_WINDOW, TRITON_MODEL, Query, scheduler_wait_ms
from whisper_build.serving.contract import SCHEDULER_FINISHED, SCHEDULER_STEP_ROWS, SCHEDULER_STEPS

JOB_BULK = "whisper-bulk"
JOB_BULK_TRITON = "whisper-bulk-triton"
"""Scrape job of the bulk workers' own Triton (its ``nv_*`` series): a ``job`` of its own, so the serving
dashboards' ``job="whisper-triton"`` series stay those of the synchronous endpoint."""
BULK_WINDOW = "1h"
"""Window of the hourly figures (audio hours, failures, wall ÷ audio)."""
_JOB = '{job="whisper-bulk"}'
_TRITON = selector(job=JOB_BULK_TRITON, model=TRITON_MODEL)


class Bulk:
    """The bulk row's queries (the dashboard's "Bulk jobs" row; docs/observability.md)."""

    BACKLOG = Query(
        "bulk_backlog",
        f"max by (state) (whisper_bulk_queue_messages{_JOB})",
        "short",
        "Job messages waiting / in flight / delayed (GetQueueAttributes, as the workers see it)",
        labels=("state",),
    )
    IN_PROGRESS = Query(
        "bulk_in_progress",
        f"sum by ({group_by()}) (whisper_bulk_files_in_progress{_JOB})",
        "short",
        "Files the workers are transcribing now",
    )
    WAIT_P99 = Query(
        "bulk_wait_p99",
        f"histogram_quantile(0.99, sum by (le) (rate(whisper_bulk_queue_wait_seconds_bucket{_JOB}[{BULK_WINDOW}])))",
        "s",
        "p99 of the time a job message waited in the queue before a worker took it",
        labels=(),
    )
    AUDIO_HOURS = Query(
        "bulk_audio_hours",
        f"sum by ({group_by()}) (increase(whisper_bulk_audio_seconds_total{_JOB}[{BULK_WINDOW}])) / 3600",
        "short",
        "Audio hours of jobs completed in the last hour",
    )
    FAILURES = Query(
        "bulk_failures",
        f"sum by (reason) (increase(whisper_bulk_failures_total{_JOB}[{BULK_WINDOW}]))",
        "short",
        "Job failures and retries in the last hour, by reason",
        labels=("reason",),
    )
    WALL_PER_AUDIO = Query(
        "bulk_wall_per_audio",
        f"sum by ({group_by()}) (rate(whisper_bulk_wall_per_audio_ratio_sum{_JOB}[{BULK_WINDOW}])) / "
        f"sum by ({group_by()}) (rate(whisper_bulk_wall_per_audio_ratio_count{_JOB}[{BULK_WINDOW}]))",
        "short",
        "Mean per-file wall time ÷ audio duration of the files completed in the last hour (1 = real time)",
    )


def _triton_rate(metric: str) -> str:
    return sum_rate(metric, _TRITON, RATE_WINDOW)


class BulkTriton:
    """The bulk pods' own Triton: the model scheduler's series of job ``whisper-bulk-triton``.

    Read as in :class:`observability.queries.Triton` (``contract.SCHEDULER_METRICS``).
    """

    WINDOWS = Query(
        "bulk_triton_windows",
        _triton_rate(SCHEDULER_FINISHED),
        "short",
        "Bulk windows the bulk pods' model answers per second",
    )
    EXECUTIONS = Query(
        "bulk_triton_executions",
        _triton_rate(SCHEDULER_STEPS),
        "short",
        "Engine passes per second in the bulk pods' model (static batches, or in-flight decode steps)",
    )
    AVERAGE_BATCH = Query(
        "bulk_triton_average_batch",
        f"{_triton_rate(SCHEDULER_STEP_ROWS)} / {_triton_rate(SCHEDULER_STEPS)}",
        "short",
        "Mean batch of the bulk pods' model: rows per engine pass (up to max_batch_size when files fill it)",
    )
    QUEUE_MS = Query(
        "bulk_triton_queue_ms",
        scheduler_wait_ms(_TRITON),
        "ms",
        "Mean time a window waits in the bulk pods' model scheduler: queued ÷ finished per second",
    )


BULK_TRITON_QUERIES = (BulkTriton.WINDOWS, BulkTriton.EXECUTIONS, BulkTriton.AVERAGE_BATCH, BulkTriton.QUEUE_MS)
BULK_QUERIES = (Bulk.BACKLOG, Bulk.IN_PROGRESS, Bulk.WAIT_P99, Bulk.AUDIO_HOURS, Bulk.FAILURES, Bulk.WALL_PER_AUDIO)
assert all(q.labels in (GROUP_LABELS, ("state",), ("reason",), ()) for q in BULK_QUERIES)
