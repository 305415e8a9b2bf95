"""Synthesis of the bulk job path (config/examples/bulk.yaml): queue, DLQ, key, bucket events, roles, alarms."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match
from cdk_assembly import CONFIGS, synthesized

from settings import ConfigError, load_config, names, parse_config
from stacks.bulk_stack import KEDA_QUEUE_ACTIONS, WORKER_QUEUE_ACTIONS

BULK = "WhisperHyperpodBulk"


def _resources(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == kind}


def _one(template: dict[str, Any], kind: str, **match: Any) -> dict[str, Any]:
    found = [
        v["Properties"]
        for v in _resources(template, kind).values()
        if all(v["Properties"].get(key) == value for key, value in match.items())
    ]
    assert len(found) == 1, f"{len(found)} {kind} match {match}"
    return found[0]


@pytest.fixture(scope="module")
def bulk_template() -> dict[str, Any]:
    result = synthesized(CONFIGS["bulk"])
    assert result.error is None, result.error
    return result.template_json(BULK)


def test_default_config_has_no_bulk_stack() -> None:
    assert BULK not in synthesized(CONFIGS["default"]).templates


def test_queue_has_dead_letter_queue_customer_key_and_visibility(bulk_template: dict[str, Any]) -> None:
    config = load_config(CONFIGS["bulk"]).bulk
    queues = _resources(bulk_template, "AWS::SQS::Queue")
    keys = _resources(bulk_template, "AWS::KMS::Key")
    (key_id,) = keys
    main = next(q["Properties"] for q in queues.values() if "RedrivePolicy" in q["Properties"])
    (dlq_id,) = [k for k, q in queues.items() if "RedrivePolicy" not in q["Properties"]]
    assert main["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": config.max_receive_count,
    }
    assert main["VisibilityTimeout"] == config.visibility_timeout_seconds
    assert main["MaximumMessageSize"] >= 64 * 1024  # S3 events are up to 64 KB
    for queue in queues.values():
        assert queue["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert keys[key_id]["Properties"]["EnableKeyRotation"] is True


def test_key_policy_lets_s3_of_this_bucket_use_it(bulk_template: dict[str, Any]) -> None:
    (key,) = _resources(bulk_template, "AWS::KMS::Key").values()
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    s3 = [s for s in statements if s.get("Principal") == {"Service": "s3.amazonaws.com"}]
    assert len(s3) == 1
    assert set(s3[0]["Action"]) == {"kms:GenerateDataKey", "kms:Decrypt"}
    assert "aws:SourceArn" in s3[0]["Condition"]["ArnLike"]
    assert "aws:SourceAccount" in s3[0]["Condition"]["StringEquals"]


def test_queues_and_buckets_refuse_plain_http(bulk_template: dict[str, Any]) -> None:
    policies = [
        *_resources(bulk_template, "AWS::SQS::QueuePolicy").values(),
        *_resources(bulk_template, "AWS::S3::BucketPolicy").values(),
    ]
    assert len(policies) == 4  # queue, DLQ, job bucket, log bucket
    for policy in policies:
        deny = [s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
        assert deny and deny[0]["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}


def test_input_prefix_object_created_events_feed_the_queue(bulk_template: dict[str, Any]) -> None:
    config = load_config(CONFIGS["bulk"]).bulk
    buckets = _resources(bulk_template, "AWS::S3::Bucket")
    (jobs_id,) = [k for k, b in buckets.items() if "NotificationConfiguration" in b["Properties"]]
    (queue_id,) = [
        k for k, q in _resources(bulk_template, "AWS::SQS::Queue").items() if "RedrivePolicy" in q["Properties"]
    ]
    (notification,) = buckets[jobs_id]["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    assert notification["Event"] == "s3:ObjectCreated:*"
    assert notification["Queue"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert notification["Filter"]["S3Key"]["Rules"] == [{"Name": "prefix", "Value": config.input_prefix}]
    # the queue policy allows S3 before the notification's test event is sent
    policy_ids = [
        k for k, p in _resources(bulk_template, "AWS::SQS::QueuePolicy").items()
        if p["Properties"]["Queues"] == [{"Ref": queue_id}]
    ]  # fmt: skip
    assert set(policy_ids) <= set(buckets[jobs_id].get("DependsOn", []))
    statements = _resources(bulk_template, "AWS::SQS::QueuePolicy")[policy_ids[0]]["Properties"]["PolicyDocument"]
    allow = [s for s in statements["Statement"] if s["Effect"] == "Allow"]
    assert allow[0]["Principal"] == {"Service": "s3.amazonaws.com"} and allow[0]["Action"] == "sqs:SendMessage"
    assert (
        buckets[jobs_id]["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
            "ServerSideEncryptionByDefault"
        ]["SSEAlgorithm"]
        == "aws:kms"
    )


def test_worker_role_is_least_privilege(bulk_template: dict[str, Any]) -> None:
    config = load_config(CONFIGS["bulk"]).bulk
    (policy,) = _resources(bulk_template, "AWS::IAM::Policy").values()
    statements = {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"]}
    assert set(statements) == {"ReadInputs", "WriteOutputs", "ListOutputs", "WorkTheQueue", "UseTheKey"}
    rendered = json.dumps(statements)
    assert "s3:DeleteObject" not in rendered and '"*"' not in rendered
    assert statements["ReadInputs"]["Action"] == ["s3:GetObject", "s3:GetObjectVersion"]
    assert json.dumps(statements["ReadInputs"]["Resource"]).endswith(f'/{config.input_prefix}*"]]}}')
    assert statements["WriteOutputs"]["Action"] == ["s3:GetObject", "s3:PutObject"]
    assert json.dumps(statements["WriteOutputs"]["Resource"]).endswith(f'/{config.output_prefix}*"]]}}')
    assert statements["ListOutputs"]["Condition"] == {"StringLike": {"s3:prefix": [f"{config.output_prefix}*"]}}
    assert sorted(statements["WorkTheQueue"]["Action"]) == sorted(WORKER_QUEUE_ACTIONS)
    association = _one(bulk_template, "AWS::EKS::PodIdentityAssociation", ServiceAccount="whisper-bulk")
    assert association["Namespace"] == "whisper"


def test_keda_operator_may_read_the_queue_length_only() -> None:
    template = synthesized(CONFIGS["bulk"]).template("WhisperHyperpodWorkloads")
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Action": KEDA_QUEUE_ACTIONS[0], "Resource": Match.any_value()})]
                )
            }
        },
    )


def test_alarms_on_dead_letters_and_oldest_message(bulk_template: dict[str, Any]) -> None:
    alarms = {
        a["Properties"]["MetricName"]: a["Properties"]
        for a in _resources(bulk_template, "AWS::CloudWatch::Alarm").values()
    }
    assert alarms["ApproximateNumberOfMessagesVisible"]["Threshold"] == 1
    assert (
        alarms["ApproximateAgeOfOldestMessage"]["Threshold"]
        == load_config(CONFIGS["bulk"]).bulk.oldest_message_alarm_seconds
    )


def _config(**bulk: Any) -> dict[str, Any]:
    return {
        "region": "us-east-1",
        "gpu_groups": [{"name": "g5", "instance_type": "ml.g5.2xlarge"}],
        "bulk": {"enabled": True, **bulk},
    }


@pytest.mark.parametrize(
    ("bulk", "message"),
    [
        ({"gpu_groups": ["g7"]}, "bulk.gpu_groups.0: 'g7' is not a GPU group; known: g5"),
        ({"output_prefix": "input/results/"}, "must not contain each other"),
        ({"input_prefix": "in"}, "ending in '/'"),
        ({"heartbeat_seconds": 300}, "at most a third of visibility_timeout_seconds"),
        ({}, "set cluster.node_autoscaling: true"),  # 1 GPU: serving pod + 2 bulk workers do not fit
    ],
)
def test_invalid_bulk_config_names_the_field(bulk: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="bulk") as raised:
        parse_config(_config(**bulk))
    assert message in str(raised.value)


def test_bulk_with_node_autoscaling_fits() -> None:
    data = {**_config(), "cluster": {"node_autoscaling": True}}
    assert parse_config(data).bulk.enabled


def test_stack_outputs_are_the_names_the_bulk_commands_read(bulk_template: dict[str, Any]) -> None:
    # make submit / jobs / fetch read these keys from settings.names, never from this stack's module
    assert set(bulk_template["Outputs"]) >= set(names.BULK_STACK_OUTPUTS.values())
