"""The step runner (:mod:`whisper_build.deploy.runner`): one deadline for a wait, the diagnosis before
the error, and a skip check that fails on expired credentials."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from botocore.stub import Stubber
from deploy_helpers import (
    _client,
    _session,
)

from settings import load_config
from whisper_build.deploy import (
    aws,
)
from whisper_build.deploy.destroy_plan import destroy_steps
from whisper_build.deploy.runner import Runner
from whisper_build.deploy.steps import AwsCall, Step, WaitAll

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_serving_wait_has_one_deadline_for_all_groups() -> None:
    now = [0.0]
    ran: list[tuple[str, ...]] = []

    def rollout_status(argv: Sequence[str]) -> None:
        ran.append(tuple(argv))
        now[0] += 600.0  # each group takes 10 min

    action = WaitAll((("kubectl", "rollout", "status", "a"), ("kubectl", "rollout", "status", "b"),
                      ("kubectl", "rollout", "status", "c")), 900)  # fmt: skip
    runner = Runner([], None, lambda _: None, rollout_status, clock=lambda: now[0])
    with pytest.raises(aws.DeployError, match="not ready within 15 min all together.*status c"):
        runner.wait_all(action)
    assert [argv[-1] for argv in ran] == ["--timeout=900s", "--timeout=300s"]


def test_a_failing_step_prints_its_diagnosis_before_the_error() -> None:
    def fail(session: Any) -> None:
        raise aws.DeployError("boom")

    step = Step("serving", "t", "1 min", "", (AwsCall("x", fail),), diagnose=lambda s: ["pod-a: waiting: …"])
    lines: list[str] = []
    with pytest.raises(aws.DeployError, match="step 'serving' failed"):
        Runner([step], object(), lines.append, lambda argv: None).run()  # type: ignore[arg-type]
    assert "    why: pod-a: waiting: …" in lines


def test_a_skip_check_that_fails_on_expired_credentials_says_to_log_in_and_re_run() -> None:
    eks = _client("eks")
    stub = Stubber(eks)
    stub.add_client_error("describe_cluster", "ExpiredTokenException", "The security token included in the "
                          "request is expired", expected_params={"name": "whisper-hyperpod"})  # fmt: skip
    lines: list[str] = []
    session = _session({"eks": eks}, lines)
    steps = destroy_steps(load_config(), "c.yaml", False, "123456789012")
    with stub, pytest.raises(aws.DeployError) as raised:
        Runner(steps, session, lines.append, lambda argv: None).run()
    message = str(raised.value)
    assert message.startswith("step 'endpoint': could not check whether EKS cluster whisper-hyperpod does not exist")
    assert "ExpiredTokenException" in message and "aws sso login" in message and "destroy included" in message
