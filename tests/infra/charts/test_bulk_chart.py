"""The ``whisper-bulk`` chart: KEDA aws-sqs-queue ScaledObjects from zero, worker Deployments, schema-valid."""

from __future__ import annotations

import json

import pytest
from k8s_support import config_with, of_kind, synth, validate

from k8s_charts.bulk import TRIGGER_AUTH_NAME, worker_grace_seconds
from k8s_charts.inputs import PLACEHOLDER_BULK_QUEUE_URL
from settings import load_config
from whisper_build.paths import REPO_ROOT

BULK = REPO_ROOT / "config" / "examples" / "bulk.yaml"


@pytest.fixture(scope="module")
def manifests():
    return synth(load_config(BULK))


def test_default_config_has_no_bulk_objects() -> None:
    assert not [m for m in synth(config_with()) if m["metadata"]["name"].startswith("whisper-bulk")]


def test_scaled_object_scales_from_zero_on_the_queue(manifests) -> None:
    config = load_config(BULK)
    (scaled,) = [m for name, m in of_kind(manifests, "ScaledObject").items() if name.startswith("whisper-bulk")]
    spec = scaled["spec"]
    assert scaled["metadata"]["name"] == "whisper-bulk-g6e"
    assert spec["scaleTargetRef"] == {"name": "whisper-bulk-g6e"}
    assert spec["minReplicaCount"] == 0
    assert spec["maxReplicaCount"] == config.bulk.max_replicas
    assert spec["cooldownPeriod"] == config.bulk.cooldown_seconds
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "aws-sqs-queue"
    assert trigger["authenticationRef"] == {"name": TRIGGER_AUTH_NAME}
    # the CRD types metadata as a free string map: pin every key and value (keda-docs 2.18 scalers/aws-sqs.md)
    assert trigger["metadata"] == {
        "queueURL": PLACEHOLDER_BULK_QUEUE_URL,
        # files one worker keeps in flight: ceil(best batch / window_group_size 8); the L40S's best batch
        # within max_batch_size 16 in settings.throughput is 7.9 (estimated from the H200's measured run)
        "queueLength": "1",
        "activationQueueLength": "0",
        "awsRegion": "us-east-1",
        "scaleOnInFlight": "true",
    }


def test_trigger_authentication_is_the_operators_identity(manifests) -> None:
    auth = of_kind(manifests, "TriggerAuthentication")[TRIGGER_AUTH_NAME]
    assert auth["spec"] == {"podIdentity": {"provider": "aws", "identityOwner": "keda"}}


def test_worker_deployment_runs_the_worker_beside_its_own_triton(manifests) -> None:
    config = load_config(BULK)
    deployment = of_kind(manifests, "Deployment")["whisper-bulk-g6e"]
    assert "replicas" not in deployment["spec"]  # KEDA's HPA owns the count
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "whisper-bulk"  # not behind the serving Service
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "whisper-bulk"
    (worker,) = spec["containers"]
    env = {e["name"]: e["value"] for e in worker["env"]}
    assert json.loads(env["WHISPER_SUPERVISOR_GATEWAY_COMMAND"]) == ["python3", "-m", "whisper_build.bulk.worker"]
    assert env["WHISPER_BULK_TRITON_URL"] == f"127.0.0.1:{config.serving.triton_grpc_port}"
    assert env["WHISPER_TRITON_HOST"] == "127.0.0.1"
    assert not [name for name in env if name.startswith("WHISPER_GATEWAY_")]
    # the supervisor waits for the drain, then Triton; the kubelet waits for both
    stop = float(env["WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S"])
    assert config.bulk.drain_seconds < stop < spec["terminationGracePeriodSeconds"] == worker_grace_seconds(config)
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert worker["resources"]["limits"]["ephemeral-storage"] == f"{config.bulk.max_file_gb + 1}Gi"


def test_bulk_manifests_validate(manifests) -> None:
    config = load_config(BULK)
    bulk = [m for m in manifests if m["metadata"].get("name", "").startswith(("whisper-bulk", "bulk-"))]
    kinds = {m["kind"] for m in bulk}
    assert kinds == {"ServiceAccount", "TriggerAuthentication", "NetworkPolicy", "Deployment", "ScaledObject"}
    results = {validate(m, config.cluster.kubernetes_version) for m in bulk}
    assert results == {
        f"k8s:{config.cluster.kubernetes_version}",
        "crd:keda.sh/v1alpha1/ScaledObject",
        "crd:keda.sh/v1alpha1/TriggerAuthentication",
    }


def test_queue_length_follows_the_throughput_table() -> None:
    from k8s_charts.bulk import best_batch

    config = load_config(BULK)
    (g6e,) = [g for g in config.gpu_groups if g.name == "g6e"]
    assert best_batch(config, g6e) == 7.9
    # a larger bulk batch share: the 27.3-window figure becomes the best one → ceil(27.3 / 8) = 4 files per worker;
    # at 64 the decoupled front's 61.1-row figure → ceil(61.1 / 8) = 8
    for max_batch_size, files in ((32, "4"), (64, "8")):
        bigger = config_with(BULK, model={"max_batch_size": max_batch_size})
        (scaled,) = [m for n, m in of_kind(synth(bigger), "ScaledObject").items() if n.startswith("whisper-bulk")]
        assert scaled["spec"]["triggers"][0]["metadata"]["queueLength"] == files


def test_a_short_drain_still_outlasts_the_long_poll_out_at_sigterm() -> None:
    """The worker returns what its last long poll brings; killed before that, those messages stay hidden."""
    from k8s_charts.bulk import worker_stop_seconds
    from settings.bulk import SQS_MAX_WAIT_SECONDS

    short = config_with(BULK, bulk={"drain_seconds": 10})
    assert worker_stop_seconds(short) > SQS_MAX_WAIT_SECONDS > short.bulk.drain_seconds
    assert worker_stop_seconds(short) < worker_grace_seconds(short)
    assert worker_stop_seconds(load_config(BULK)) > load_config(BULK).bulk.drain_seconds == 120
