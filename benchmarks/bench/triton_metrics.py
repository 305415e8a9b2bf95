"""Triton's Prometheus counters, scraped before and after a level to get the average batch size.

Triton exports ``nv_inference_count`` (inferences = batch items) and ``nv_inference_exec_count``
(model executions) per ``model``/``version`` on its metrics port (default 8002, path
``/metrics``; Triton docs "Metrics"). Their deltas over a level give the batch items per
execution, i.e. how much dynamic batching batched.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

INFERENCE_COUNT = "nv_inference_count"
EXEC_COUNT = "nv_inference_exec_count"


@dataclass(frozen=True)
class Counts:
    """Summed counters of one model at one moment."""

    inferences: float
    executions: float


def parse_counts(text: str, model: str) -> Counts:
    """Sum ``nv_inference_count`` and ``nv_inference_exec_count`` over every version of ``model``.

    Reads a Prometheus text exposition; missing counters read as 0.
    """
    totals = {INFERENCE_COUNT: 0.0, EXEC_COUNT: 0.0}
    for family in text_string_to_metric_families(text):
        if family.name not in totals:
            continue
        for sample in family.samples:
            # the parser names counter samples ``<family>_total``; ``_created`` ones are timestamps
            if sample.name in (family.name, family.name + "_total") and sample.labels.get("model") == model:
                totals[family.name] += sample.value
    return Counts(totals[INFERENCE_COUNT], totals[EXEC_COUNT])


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
