"""The bulk worker's settings: grouped by concern, each field still ``WHISPER_BULK_<FIELD>`` with its default."""

from __future__ import annotations

import pytest

from whisper_build.bulk.settings import GROUPS, WorkerSettings

DEFAULTS: dict[str, object] = {
    "region": "us-east-1", "endpoint_url": None, "input_prefix": "input/", "output_prefix": "output/",
    "triton_url": "127.0.0.1:8001", "triton_model": "whisper", "model": "tiny.en", "engine": None,
    "files_in_flight": 1, "window_group_size": 8, "checkpoint_every_groups": 4, "visibility_timeout_seconds": 600,
    "heartbeat_seconds": 120.0, "max_total_visibility_seconds": 43200.0, "continuation_margin_seconds": 1800.0,
    "max_file_bytes": 20 * 1024**3, "drain_seconds": 120.0, "scratch_dir": "/tmp", "receive_wait_seconds": 20,
    "idle_poll_seconds": 0.5, "retry_base_seconds": 30.0, "retry_max_seconds": 900.0,
    "call_timeout_seconds": 600.0, "diarization_timeout_seconds": 1800.0, "yield_to_metrics_url": None,
    "yield_hold_seconds": 2.0, "yield_max_wait_seconds": 30.0, "gather_seconds": 2.0, "http_host": "127.0.0.1",
    "http_port": 0,
}  # fmt: skip
"""Every variable the chart, ``make bulk-demo`` and docs/bulk.md rely on, by field, with its default."""


def _value(settings: WorkerSettings, name: str) -> object:
    for group, group_cls in GROUPS.items():
        if name in group_cls.model_fields:
            return getattr(getattr(settings, group), name)
    assert name in WorkerSettings.model_fields, f"WHISPER_BULK_{name.upper()}: no field reads it"
    return getattr(settings, name)


def test_every_variable_keeps_its_field_and_default(monkeypatch) -> None:
    for name in DEFAULTS:
        monkeypatch.delenv(f"WHISPER_BULK_{name.upper()}", raising=False)
    monkeypatch.setenv("WHISPER_BULK_QUEUE_URL", "https://sqs/q")
    monkeypatch.setenv("WHISPER_BULK_BUCKET", "jobs")
    settings = WorkerSettings()
    assert (settings.queue_url, settings.bucket) == ("https://sqs/q", "jobs")
    assert {name: _value(settings, name) for name in DEFAULTS} == DEFAULTS
    fields = {*WorkerSettings.model_fields, *(f for g in GROUPS.values() for f in g.model_fields)} - set(GROUPS)
    assert fields == {*DEFAULTS, "queue_url", "bucket", "worker_id"}  # worker_id: the host name


@pytest.mark.parametrize("name", ["window_group_size", "heartbeat_seconds", "gather_seconds", "files_in_flight"])
def test_a_grouped_variable_sets_its_field_from_the_environment_or_by_its_flat_name(name: str, monkeypatch) -> None:
    monkeypatch.setenv(f"WHISPER_BULK_{name.upper()}", "3")
    assert _value(WorkerSettings(queue_url="q", bucket="b"), name) == 3
    assert _value(WorkerSettings(queue_url="q", bucket="b", **{name: 5}), name) == 5  # type: ignore[arg-type]


def test_no_settings_class_has_more_than_twenty_fields() -> None:
    for cls in (WorkerSettings, *GROUPS.values()):
        assert len(cls.model_fields) <= 20, cls.__name__


def test_a_late_heartbeat_is_refused_naming_both_fields() -> None:
    with pytest.raises(ValueError, match=r"heartbeat_seconds \(400\) must be at most half of visibility_timeout"):
        WorkerSettings(queue_url="q", bucket="b", heartbeat_seconds=400)
