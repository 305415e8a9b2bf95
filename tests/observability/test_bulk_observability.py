"""The bulk row: its queries read only metrics the worker defines, and the bulk config gets the row and the scrape job."""

from __future__ import annotations

import re

from cdk_assembly import CONFIGS
from prometheus_client import REGISTRY

import whisper_build.bulk.metrics  # noqa: F401 (registers the worker's metrics)
from observability.bulk_queries import BULK_QUERIES, JOB_BULK
from observability.dashboard import BULK_ROW, dashboard_rows
from observability.scrape_config import scrape_jobs
from settings import load_config

SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _sample_names() -> set[str]:
    """Every series name the registry exposes (labelled metrics too, before their first child)."""
    return {family.name + suffix for family in REGISTRY.collect() for suffix in SUFFIXES.get(family.type, ())}


def test_bulk_queries_read_metrics_the_worker_defines() -> None:
    names = _sample_names()
    for query in BULK_QUERIES:
        used = set(re.findall(r"whisper_bulk_[a-z_]+", query.expr))
        assert used and used <= names, (query.key, used - names)
        assert f'job="{JOB_BULK}"' in query.expr


def test_bulk_config_scrapes_workers_and_shows_the_row() -> None:
    bulk, default = load_config(CONFIGS["bulk"]), load_config(CONFIGS["default"])
    assert JOB_BULK in [job.name for job in scrape_jobs(bulk)]
    assert JOB_BULK not in [job.name for job in scrape_jobs(default)]
    assert BULK_ROW in [title for title, _ in dashboard_rows(bulk)]
    assert BULK_ROW not in [title for title, _ in dashboard_rows(default)]
