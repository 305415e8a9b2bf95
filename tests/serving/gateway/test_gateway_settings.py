"""The gateway's settings: grouped by concern, each field still ``WHISPER_GATEWAY_<FIELD>`` as docs/gateway.md says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic_settings import BaseSettings

from whisper_build.serving.gateway.settings import GROUPS, GatewaySettings

DOC = Path(__file__).resolve().parents[3] / "docs" / "gateway.md"
ROW = re.compile(r"^\| `WHISPER_GATEWAY_(?P<name>[A-Z_]+)` \| (?P<default>[^|]+) \|", re.MULTILINE)
MAX_FIELDS = 20


def _documented() -> dict[str, str]:
    """``field name -> default column`` of the "Settings" table."""
    table = DOC.read_text(encoding="utf-8").split("## Settings", 1)[1].split("\n## ", 1)[0]
    return {m["name"].lower(): m["default"].strip() for m in ROW.finditer(table)}


def _owner(settings: GatewaySettings, name: str) -> BaseSettings:
    """The group (or the top level) holding the field ``name``."""
    for group, group_cls in GROUPS.items():
        if name in group_cls.model_fields:
            owner: BaseSettings = getattr(settings, group)
            return owner
    assert name in GatewaySettings.model_fields, f"WHISPER_GATEWAY_{name.upper()} is documented but no field reads it"
    return settings


def _shown(value: object) -> str:
    """A default as the table writes it: ``unset``, JSON-ish lists, ``false``, numbers without a trailing ``.0``."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_documented_variable_is_read_by_one_field_with_the_documented_default(monkeypatch) -> None:
    # GIVEN the table of docs/gateway.md and an environment without gateway variables
    for name in _documented():
        monkeypatch.delenv(f"WHISPER_GATEWAY_{name.upper()}", raising=False)
    settings = GatewaySettings()
    documented = _documented()
    assert len(documented) >= 45
    for name, default in documented.items():
        value = getattr(_owner(settings, name), name)
        shown = re.match(r"`([^`]*)`", default)
        if shown is None:  # "unset", or a rule computed from other fields ("2 × max audio")
            assert value in (None, ""), name  # an empty URL is "unset" too
            continue
        if name == "predicted_rtf":  # this machine's loaded figure, rounded in the table
            assert round(value, 3) == float(shown[1]), name
            continue
        assert _shown(value) == shown[1], f"WHISPER_GATEWAY_{name.upper()}: {value!r} is documented as {default}"


SAMPLES = {
    "host": ("0.0.0.0", "0.0.0.0"),
    "log_level": ("debug", "debug"),
    "triton_url": ("triton:9001", "triton:9001"),
    "triton_metrics_url": ("http://triton:9002/metrics", "http://triton:9002/metrics"),
    "model_name": ("large-v3", "large-v3"),
    "model_aliases": ('["a", "b"]', ["a", "b"]),
    "api_keys_secret": ("whisper/keys", "whisper/keys"),
    "audio_budget_seconds": ("90", 90.0),
    "supervisor_heartbeat_file": ("/run/hb", Path("/run/hb")),
    "window_seconds": ("20", 20.0),  # at most 30
    "workers": ("2", 2),
}
"""Values of their own type for the fields whose default cannot simply grow."""


def _sample(name: str, default: object) -> tuple[str, object]:
    """A valid value other than the default, as the environment writes it and as the field then holds it."""
    if name in SAMPLES:
        return SAMPLES[name]
    if isinstance(default, bool):
        return str(not default).lower(), not default
    if isinstance(default, int):
        return str(default + 1), default + 1
    assert isinstance(default, float), f"{name}: add a sample value to SAMPLES"
    return str(default * 1.25), default * 1.25


@pytest.mark.parametrize("name", sorted(set(_documented()) - {"api_keys"}))  # a secret: test_gateway_auth.py
def test_each_documented_variable_sets_its_field(name: str, monkeypatch) -> None:
    # GIVEN one documented variable set in the environment WHEN the settings are read THEN its field holds it
    raw, expected = _sample(name, getattr(_owner(GatewaySettings(), name), name))
    monkeypatch.setenv(f"WHISPER_GATEWAY_{name.upper()}", raw)
    if name in ("canary_interval_seconds", "canary_timeout_seconds"):  # staleness stays above interval + timeout
        monkeypatch.setenv("WHISPER_GATEWAY_STALE_AFTER_SECONDS", "20")
    read = getattr(_owner(GatewaySettings(), name), name)
    assert read == (pytest.approx(expected) if isinstance(expected, float) else expected), name


def test_a_flat_name_reaches_its_group_and_the_environment_fills_the_rest(monkeypatch) -> None:
    monkeypatch.setenv("WHISPER_GATEWAY_QUEUE_SIZE", "3")
    settings = GatewaySettings(capacity=2)
    assert (settings.admission.capacity, settings.admission.queue_size) == (2, 3)


def test_no_settings_class_has_more_than_twenty_fields() -> None:
    for cls in (GatewaySettings, *GROUPS.values()):
        assert len(cls.model_fields) <= MAX_FIELDS, cls.__name__


def test_a_bad_variable_is_named_by_its_flat_name(monkeypatch) -> None:
    monkeypatch.setenv("WHISPER_GATEWAY_CANARY_TIMEOUT_SECONDS", "-1")
    with pytest.raises(ValueError) as raised:
        GatewaySettings()
    assert [e["loc"] for e in raised.value.errors()] == [("canary_timeout_seconds",)]  # type: ignore[attr-defined]
