"""``make destroy``'s steps (:mod:`whisper_build.deploy.destroy_plan`): the endpoint before the stacks,
the billing check last, a re-run that skips what is gone, the inference operator target."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import (
    DRY_CONTEXT,
    OPERATOR_CONFIG,
    _dry_run_argv,
    _dry_run_lines,
)

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.deploy.destroy_plan import destroy_steps
from whisper_build.deploy.runner import Runner

pytestmark = pytest.mark.usefixtures("kubectl_installed")


def test_dry_run_of_destroy_names_the_config(custom_config: Path) -> None:
    lines = _dry_run_lines("destroy", custom_config, "--purge")
    assert f"$ npx cdk destroy --all --force -c 'config={custom_config}'" in [line.strip() for line in lines]
    assert any("Key=project,Values=speech-prod" in line and "then delete them" in line and "--region eu-west-1" in line
               for line in lines)  # fmt: skip


def test_destroy_dry_run_deletes_the_endpoint_before_the_stacks_and_ends_with_the_billing_check() -> None:
    code, lines = _dry_run_argv(["destroy", "--config", str(DEFAULT_CONFIG_PATH)])
    assert code == 0
    steps = [line.split(":")[0] for line in lines if line.startswith("[")]
    assert steps == ["[1/4] endpoint", "[2/4] stacks", "[3/4] retained", "[4/4] billing"]
    commands = [line.strip() for line in lines if line.strip().startswith("$ ")]
    delete = commands.index(f"$ kubectl --context '{DRY_CONTEXT}' -n whisper delete service/whisper --ignore-not-found "
                            "--wait=true --timeout=10m")  # fmt: skip
    destroy = commands.index("$ npx cdk destroy --all --force -c config=config/default.yaml")
    assert delete < destroy
    text = "\n".join(lines)
    assert "Key=elbv2.k8s.aws/cluster,Values=whisper-hyperpod" in text
    assert "kubectl config delete-context arn:aws:eks:us-east-1:<account>:cluster/whisper-hyperpod" in text
    assert "aws cloudformation delete-stack --stack-name CDKToolkit --region us-east-1" in text


class DestroySession:
    """A re-run after everything but the retained resources is gone."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def cluster_active(self) -> bool:
        return False

    def stacks_gone(self) -> bool:
        return True

    def report_retained(self, purge: bool) -> None:
        self.calls.append("retained")

    def check_billing(self) -> None:
        self.calls.append("billing")


def test_destroy_rerun_skips_the_endpoint_and_the_stacks_already_gone() -> None:
    commands: list[str] = []
    lines: list[str] = []
    session = DestroySession()
    steps = destroy_steps(load_config(), "c.yaml", False, "123456789012")
    Runner(steps, session, lines.append, lambda argv: commands.append(" ".join(argv))).run()  # type: ignore[arg-type]
    assert commands == [] and session.calls == ["retained", "billing"]
    assert sum(line.strip() == "skipped: already done" for line in lines) == 2


def test_destroy_of_the_operator_target_deletes_its_inference_endpoint_configs_and_checks_its_endpoint() -> None:
    code, lines = _dry_run_argv(["destroy", "--config", str(OPERATOR_CONFIG)])
    assert code == 0
    commands = [line.strip() for line in lines if line.strip().startswith("$ ")]
    assert (
        f"$ kubectl --context '{DRY_CONTEXT}' -n whisper delete inferenceendpointconfigs.inference.sagemaker.aws."
        "amazon.com -l app.kubernetes.io/name=whisper --ignore-not-found --wait=true --timeout=10m" in commands
    )
    assert not any("service/whisper" in command for command in commands)  # the operator target has no Service
    text = "\n".join(lines)
    assert "aws sagemaker describe-endpoint --endpoint-name whisper-hyperpod --region us-east-1" in text
    _, deployments = _dry_run_argv(["destroy", "--config", str(DEFAULT_CONFIG_PATH)])
    assert "describe-endpoint" not in "\n".join(deployments)
