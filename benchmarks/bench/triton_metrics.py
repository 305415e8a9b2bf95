"""Triton's Prometheus counters, scraped before and after a level to get the average batch size.

Triton exports ``nv_inference_count`` (batch items) and ``nv_inference_exec_count`` (executions) per
``model``/``version`` on its metrics port (``/metrics``; Triton docs "Metrics"): their deltas over a
level give the batch items per execution.

Where the time goes inside Triton (:func:`server_timings`): Triton's cumulative per-request
``nv_inference_request_duration_us`` (the whole request in the server), ``..._queue_duration_us``
(waiting in the dynamic batcher), ``..._compute_input_duration_us`` / ``_infer_`` / ``_output_``
(a request in a batch is charged the batch's time) divided by ``nv_inference_request_success``,
and the model's own ``whisper_model_stage_seconds{stage}`` (parse / engine / decoding / response,
:mod:`whisper_build.serving.triton_model.stages`): ``engine``/``decoding`` per batch (÷ the scheduler's
steps where exported, else executions), ``parse``/``response`` per request there. Rows per engine pass
(:func:`mean_active_rows`): the model scheduler's step counters when it exports them, else the batch.
Docs: docs/benchmarks.md, "Why Triton's batches are half the clients".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from whisper_build.serving.contract import SCHEDULER_STEP_ROWS, SCHEDULER_STEPS

INFERENCE_COUNT = "nv_inference_count"
EXEC_COUNT = "nv_inference_exec_count"
DURATIONS_US = {
    "request": "nv_inference_request_duration_us",
    "queue": "nv_inference_queue_duration_us",
    "compute_input": "nv_inference_compute_input_duration_us",
    "compute_infer": "nv_inference_compute_infer_duration_us",
    "compute_output": "nv_inference_compute_output_duration_us",
}
"""Triton's cumulative per-request durations (µs) by short name."""
SUCCESS = "nv_inference_request_success"
STAGE_SECONDS = "whisper_model_stage_seconds"
"""The model's own counter (``whisper_build.serving.triton_model.stages.METRIC``; no ``model`` label)."""


@dataclass(frozen=True)
class Counts:
    """Summed counters of one model at one moment.

    ``durations_us`` holds :data:`DURATIONS_US` by short name, ``stage_seconds`` the model's stages.
    """

    inferences: float
    executions: float
    successes: float = 0.0
    durations_us: dict[str, float] = field(default_factory=dict)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    scheduler: dict[str, float] = field(default_factory=dict)
    """The model scheduler's ``steps`` and ``step_rows`` counters, when exported (else empty)."""


def parse_counts(text: str, model: str) -> Counts:
    """Sum Triton's counters over every version of ``model`` (and the model's stage counters).

    Reads a Prometheus text exposition; missing counters read as 0.
    """
    names = {INFERENCE_COUNT, EXEC_COUNT, SUCCESS, *DURATIONS_US.values()}
    totals = dict.fromkeys(names, 0.0)
    stages: dict[str, float] = {}
    scheduler: dict[str, float] = {}
    scheduler_names = {SCHEDULER_STEPS: "steps", SCHEDULER_STEP_ROWS: "step_rows"}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            # the parser names counter samples ``<family>_total``; ``_created`` ones are timestamps
            if sample.name not in (family.name, family.name + "_total"):
                continue
            if family.name == STAGE_SECONDS and "stage" in sample.labels:
                stages[sample.labels["stage"]] = stages.get(sample.labels["stage"], 0.0) + sample.value
            elif family.name in names and sample.labels.get("model") == model:
                totals[family.name] += sample.value
            elif sample.name in scheduler_names and sample.labels.get("model", model) == model:
                key = scheduler_names[sample.name]
                scheduler[key] = scheduler.get(key, 0.0) + sample.value
    durations = {short: totals[name] for short, name in DURATIONS_US.items()}
    return Counts(totals[INFERENCE_COUNT], totals[EXEC_COUNT], totals[SUCCESS], durations, stages, scheduler)


async def scrape(client: httpx.AsyncClient, url: str, model: str, timeout: float = 5.0) -> Counts | None:
    """GET ``url`` and parse the counters of ``model``; ``None`` when the scrape fails.

    A failed scrape makes the benchmark report no batch size rather than stop.
    """
    try:
        response = await client.get(url, timeout=timeout)
        response.raise_for_status()
        return parse_counts(response.text, model)
    except (httpx.HTTPError, ValueError):
        return None


def average_batch_size(before: Counts | None, after: Counts | None) -> float | None:
    """``Δ inferences / Δ executions``; ``None`` if a scrape failed or nothing ran."""
    if before is None or after is None:
        return None
    executions = after.executions - before.executions
    if executions <= 0:
        return None
    return (after.inferences - before.inferences) / executions


def mean_active_rows(before: Counts | None, after: Counts | None) -> tuple[float | None, str | None]:
    """(rows per engine pass over a level, its source); ``(None, None)`` if nothing ran.

    Source ``scheduler``: Δ step rows ÷ Δ steps, the model scheduler's own counters, when exported;
    else ``triton_batch``: :func:`average_batch_size`.
    """
    if before is not None and after is not None and "steps" in after.scheduler:
        steps = after.scheduler["steps"] - before.scheduler.get("steps", 0.0)
        if steps > 0:
            rows = after.scheduler.get("step_rows", 0.0) - before.scheduler.get("step_rows", 0.0)
            return rows / steps, "scheduler"
    batch = average_batch_size(before, after)
    return (batch, "triton_batch") if batch is not None else (None, None)


def server_timings(before: Counts | None, after: Counts | None) -> dict[str, float] | None:
    """Milliseconds inside Triton over a level (see the module docstring); ``None`` if a scrape failed or nothing ran.

    Keys: ``request``, ``queue``, ``compute_input``, ``compute_infer``, ``compute_output`` (means
    per successful request) and ``model_<stage>`` (when the model reports its stages: ``engine`` and
    ``decoding`` per scheduler step, ``parse`` and ``response`` per request, where the scheduler exports
    its steps; else each per execution).
    """
    if before is None or after is None:
        return None
    requests = after.successes - before.successes
    executions = after.executions - before.executions
    if requests <= 0 or executions <= 0:
        return None
    out = {
        short: round((after.durations_us.get(short, 0.0) - before.durations_us.get(short, 0.0)) / 1000 / requests, 3)
        for short in DURATIONS_US
    }
    steps = after.scheduler.get("steps", 0.0) - before.scheduler.get("steps", 0.0)
    for stage, seconds in after.stage_seconds.items():
        per = executions
        if steps > 0:  # the decoupled model: one execute() per request, batches formed by its scheduler
            per = steps if stage in ("engine", "decoding") else requests
        out[f"model_{stage}"] = round(1000 * (seconds - before.stage_seconds.get(stage, 0.0)) / per, 3)
    return out
