"""Prometheus rule file (recording + alert rules) generated from :mod:`observability.queries`.

The same text is the data of the AMP rule groups namespace (``AWS::APS::RuleGroupsNamespace``
takes a Prometheus rules file, AMP user guide "Recording rules and alerting rules") and the
``rule_files`` entry of the local Prometheus in the live check.
Docs: docs/observability.md, "Rules".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from observability import queries

RECORDING_GROUP = "whisper-recording"
ALERT_GROUP = "whisper-alerts"
COST_GROUP = "whisper-cost"


def rule_groups(
    groups: Sequence[str], interval_seconds: int, cost: Sequence[queries.RecordingRule] = ()
) -> dict[str, Any]:
    """Rules file content as a dict: one recording group, one alert group, and the cost group if any.

    Args:
        groups: GPU group names of the fleet (one NoReadyPods alert each).
        interval_seconds: evaluation interval of every group, seconds (use the scrape interval).
        cost: the cost recording rules (``observability.cost_queries.recording_rules``); none: no cost group.

    Raises:
        ValueError: a group name is not a lowercase DNS label, or the interval is not positive.
    """
    if interval_seconds <= 0:
        raise ValueError(f"rule evaluation interval must be positive seconds, got {interval_seconds}")
    interval = f"{interval_seconds}s"
    recording = [{"record": rule.record, "expr": rule.query.expr} for rule in queries.RECORDING_RULES]
    alerts = []
    for rule in queries.alert_rules(groups):
        alerts.append(
            {
                "alert": rule.alert,
                "expr": rule.expr,
                "for": rule.for_,
                "labels": {"severity": rule.severity, **dict(rule.labels)},
                "annotations": {"summary": rule.summary, "description": rule.signal.description},
            }
        )
    document: dict[str, Any] = {
        "groups": [
            {"name": RECORDING_GROUP, "interval": interval, "rules": recording},
            {"name": ALERT_GROUP, "interval": interval, "rules": alerts},
        ]
    }
    if cost:
        rules = [{"record": rule.record, "expr": rule.query.expr} for rule in cost]
        document["groups"].append({"name": COST_GROUP, "interval": interval, "rules": rules})
    return document


def rules_yaml(groups: Sequence[str], interval_seconds: int, cost: Sequence[queries.RecordingRule] = ()) -> str:
    """:func:`rule_groups` as YAML text (the AMP rule groups namespace ``data``)."""
    return yaml.safe_dump(rule_groups(groups, interval_seconds, cost), sort_keys=False, width=200)
