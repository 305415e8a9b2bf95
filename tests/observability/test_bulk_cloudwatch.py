"""The bulk row's CloudWatch panels read the queues the bulk stack creates, through the data source the
provisioner gets, with the workspace role allowed to read them; the bulk pods' Triton has panels of its own
and stays out of the serving panels."""

from __future__ import annotations

import json
from typing import Any

import pytest
from cdk_assembly import CONFIGS, synthesized

from observability import dashboard, queries
from observability.bulk_queries import BULK_TRITON_QUERIES, JOB_BULK_TRITON
from observability.cloudwatch_queries import SQS_NAMESPACE, bulk_queue
from observability.dashboard import BULK_ROW, PanelSpec, Target, dashboard_rows
from observability.queries import JOB_TRITON, Triton
from settings import load_config
from stacks.observability_stack import CLOUDWATCH_READ_ACTIONS

BULK_STACK = "WhisperHyperpodBulk"
OBSERVABILITY_STACK = "WhisperHyperpodObservability"


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in template["Resources"].items() if v["Type"] == kind}


@pytest.fixture(scope="module")
def bulk() -> Any:
    result = synthesized(CONFIGS["bulk"])
    assert result.error is None, result.error
    return result


@pytest.fixture(scope="module")
def queue_names(bulk) -> dict[str, str]:
    """``QueueName`` of the job queue (the one with a ``RedrivePolicy``) and of its dead-letter target."""
    queues = _resources(bulk.template_json(BULK_STACK), "AWS::SQS::Queue")
    (main,) = [q for q in queues.values() if "RedrivePolicy" in q]
    dead_id = main["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    return {"jobs": main["QueueName"], "dead": queues[dead_id]["QueueName"]}


@pytest.fixture(scope="module")
def panels(bulk) -> dict[str, dict[str, Any]]:
    """The bulk config's dashboard as the observability stack hands it to the provisioner."""
    (props,) = _resources(bulk.template_json(OBSERVABILITY_STACK), "Custom::GrafanaDashboard").values()
    built = json.loads(props["DashboardJson"])
    assert props["CloudWatchDatasourceUid"] == dashboard.CLOUDWATCH_DATASOURCE_UID
    return {p["title"]: p for p in built["panels"] if p.get("type") != "row"}


def _cloudwatch_targets(panels: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(title, t) for title, p in panels.items() for t in p.get("targets", []) if "namespace" in t]


def test_cloudwatch_targets_read_the_synthesized_queues(panels, queue_names) -> None:
    found = {
        (t["metricName"], t["dimensions"]["QueueName"]): (title, t["statistic"], t["namespace"])
        for title, t in _cloudwatch_targets(panels)
    }
    jobs, dead = queue_names["jobs"], queue_names["dead"]
    assert set(found) == {
        ("ApproximateAgeOfOldestMessage", jobs),
        ("ApproximateNumberOfMessagesVisible", jobs),
        ("ApproximateNumberOfMessagesNotVisible", jobs),
        ("ApproximateNumberOfMessagesVisible", dead),
    }
    assert {(statistic, namespace) for _, statistic, namespace in found.values()} == {("Maximum", SQS_NAMESPACE)}
    for _, target in _cloudwatch_targets(panels):
        assert list(target["dimensions"]) == ["QueueName"] and target["matchExact"] is True
        assert target["region"] == "default"  # the data source's defaultRegion: the stack's region


def test_cloudwatch_panels_use_the_cloudwatch_datasource_only(panels) -> None:
    titles = {title for title, _ in _cloudwatch_targets(panels)}
    assert titles
    for title in titles:
        panel = panels[title]
        assert panel["datasource"] == {"type": "cloudwatch", "uid": dashboard.CLOUDWATCH_DATASOURCE_UID}
        assert {t["datasource"]["uid"] for t in panel["targets"]} == {dashboard.CLOUDWATCH_DATASOURCE_UID}
    others = {t["datasource"]["uid"] for title, p in panels.items() if title not in titles for t in p["targets"]}
    assert others == {dashboard.DATASOURCE_UID}


def test_oldest_message_panel_has_the_alarm_threshold_in_seconds(panels) -> None:
    config = load_config(CONFIGS["bulk"])
    (title,) = {title for title, t in _cloudwatch_targets(panels) if t["metricName"] == "ApproximateAgeOfOldestMessage"}
    defaults = panels[title]["fieldConfig"]["defaults"]
    assert defaults["unit"] == "s"
    assert defaults["custom"]["thresholdsStyle"]["mode"] == "line"
    assert defaults["thresholds"]["steps"][-1]["value"] == config.bulk.oldest_message_alarm_seconds


def _statements(template: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for p in _resources(template, "AWS::IAM::Policy").values() for s in p["PolicyDocument"]["Statement"]]


def test_workspace_role_reads_cloudwatch_in_its_region_only_with_bulk(bulk) -> None:
    template = bulk.template_json(OBSERVABILITY_STACK)
    (role_id,) = [k for k, r in _resources(template, "AWS::IAM::Role").items() if _trusts(r, "grafana.amazonaws.com")]
    policies = [p for p in _resources(template, "AWS::IAM::Policy").values() if {"Ref": role_id} in p["Roles"]]
    reads = [s for p in policies for s in p["PolicyDocument"]["Statement"] if s.get("Sid") == "ReadCloudWatchMetrics"]
    assert reads == [
        {
            "Sid": "ReadCloudWatchMetrics",
            "Effect": "Allow",
            "Action": CLOUDWATCH_READ_ACTIONS,
            "Resource": "*",
            "Condition": {"StringEquals": {"aws:RequestedRegion": bulk.config.region}},
        }
    ]
    default = synthesized(CONFIGS["default"]).template_json(OBSERVABILITY_STACK)
    actions = [a for s in _statements(default) for a in _list(s["Action"])]
    assert not [a for a in actions if a.startswith("cloudwatch:")]
    (props,) = _resources(default, "Custom::GrafanaDashboard").values()
    assert "CloudWatchDatasourceUid" not in props


def _trusts(role: dict[str, Any], service: str) -> bool:
    return any(s["Principal"].get("Service") == service for s in role["AssumeRolePolicyDocument"]["Statement"])


def _list(value: str | list[str]) -> list[str]:
    return value if isinstance(value, list) else [value]


def test_bulk_triton_panels_read_the_bulk_triton_job_and_serving_panels_do_not() -> None:
    bulk_row = dict(dashboard_rows(load_config(CONFIGS["bulk"])))[BULK_ROW]
    shown = {t.query for spec in bulk_row for t in spec.targets}
    assert set(BULK_TRITON_QUERIES) <= shown
    for query in BULK_TRITON_QUERIES:
        assert f'job="{JOB_BULK_TRITON}"' in query.expr and "whisper_scheduler_" in query.expr
    for query in queries.panel_queries():
        if "nv_inference_" in query.expr or "whisper_scheduler_" in query.expr:
            assert f'job="{JOB_TRITON}"' in query.expr and JOB_BULK_TRITON not in query.expr, query.key


def test_a_panel_mixing_promql_and_cloudwatch_is_refused() -> None:
    sqs = bulk_queue(load_config(CONFIGS["bulk"]))
    mixed = PanelSpec("mixed", (Target(Triton.REQUEST_RATE), Target(sqs.visible)))
    with pytest.raises(ValueError, match="mixed.*PromQL and CloudWatch"):
        dashboard._panel(mixed)
