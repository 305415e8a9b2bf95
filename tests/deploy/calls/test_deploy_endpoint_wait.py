"""``make endpoint`` (:mod:`whisper_build.deploy.endpoint_wait`): the wait for the load balancer's address,
its timeout, kubectl failures, and the inference operator target."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence

import pytest
from deploy_helpers import (
    CONTEXT,
    DRY_CONTEXT,
    OPERATOR_CONFIG,
    _dry_run_argv,
    _kubectl_main,
    _pod,
)

from settings import DEFAULT_CONFIG_PATH
from whisper_build.deploy import (
    kube,
    pods,
)

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_endpoint_timeout_exits_1_with_what_to_check_and_how_to_resume(capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    kubectl=lambda argv: json.dumps({"status": {}}), endpoint_wait_s=0)  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "the load balancer has no address after 0 s" in err  # the wait it really did
    assert f"kubectl --context {CONTEXT} -n whisper describe service whisper" in err
    assert f"kubectl --context {CONTEXT} -n kube-system logs deployment/aws-load-balancer-controller" in err
    assert "then resume: make endpoint CONFIG=config/default.yaml" in err
    status = {"status": {"loadBalancer": {"ingress": [{"hostname": "internal-k8s-x.elb.us-east-1.amazonaws.com"}]}}}
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    kubectl=lambda argv: json.dumps(status), endpoint_wait_s=0)  # fmt: skip
    assert code == 0 and "Whisper is serving." in "\n".join(lines)


def test_make_endpoint_says_why_kubectl_gave_no_address(capsys: pytest.CaptureFixture[str]) -> None:
    def missing(argv: Sequence[str]) -> str:
        raise FileNotFoundError(2, "No such file or directory", "kubectl")

    assert _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], kubectl=missing, endpoint_wait_s=900) == 1
    assert "cannot run kubectl" in capsys.readouterr().err  # at once, not after the 15 min wait

    def unauthorized(argv: Sequence[str]) -> str:
        raise subprocess.CalledProcessError(1, list(argv), "", "error: You must be logged in to the server")

    lines: list[str] = []
    code = _kubectl_main(["endpoint", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                         kubectl=unauthorized, endpoint_wait_s=0)  # fmt: skip
    assert code == 1
    assert "could not read the load balancer's address: kubectl failed: error: You must be logged in" in (
        capsys.readouterr().err
    )
    timeout = subprocess.TimeoutExpired(["kubectl"], 60)
    assert "did not answer within 60 s" in kube.describe_error(timeout)


def test_make_pods_and_endpoint_of_the_operator_target(capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _dry_run_argv(["pods", "--config", str(OPERATOR_CONFIG)])
    assert code == 0 and lines == [
        "$ aws sagemaker describe-cluster --cluster-name whisper-hyperpod-hp --region us-east-1",
        f"$ kubectl --context '{DRY_CONTEXT}' -n whisper get pods -o json",
    ]
    build = {"metadata": {"name": "engine-sm86-x", "ownerReferences": [{"kind": "Job", "name": "engine-sm86"}]},
             "status": {"phase": "Running"}}  # fmt: skip
    ready = _pod("whisper-abc", {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]})
    states = pods.pod_states(json.dumps({"items": [build, ready]}))
    assert states == [pods.PodState("whisper-abc", "ready", "serving")]
    assert pods.lines(states, "whisper") == ["whisper-abc: ready: serving", "every pod is ready"]

    def never(argv: Sequence[str]) -> str:
        raise AssertionError("the operator target has no Service of ours to read")

    out: list[str] = []
    assert _kubectl_main(["endpoint", "--config", str(OPERATOR_CONFIG)], out=out.append, kubectl=never) == 0
    text = "\n".join(out)
    assert "aws sagemaker describe-endpoint --endpoint-name whisper-hyperpod --region us-east-1" in text
    assert "--sagemaker-endpoint whisper-hyperpod --region us-east-1" in text
    assert f"kubectl --context {CONTEXT} -n whisper describe inferenceendpointconfigs" in text
