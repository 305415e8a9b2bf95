"""The step types (:mod:`whisper_build.deploy.steps`): what ``--dry-run`` prints for each action."""

from __future__ import annotations

from whisper_build.deploy.steps import AwsCall, Command, WaitAll, cdk, diff_command


def test_a_command_prints_as_the_shell_would_read_it() -> None:
    assert str(Command(("npx", "cdk", "deploy", "-c", "config=my config.yaml"))) == (
        "npx cdk deploy -c 'config=my config.yaml'"
    )
    assert cdk("bootstrap", "aws://1/us-east-1", config_file="c.yaml").argv == (
        "npx", "cdk", "bootstrap", "aws://1/us-east-1", "-c", "config=c.yaml",
    )  # fmt: skip
    assert str(diff_command("c.yaml")) == "npx cdk diff --all -c config=c.yaml"


def test_an_aws_call_prints_its_cli_equivalent_and_compares_by_it() -> None:
    call = AwsCall("aws eks describe-cluster --name c", lambda session: None)
    assert str(call) == "aws eks describe-cluster --name c"
    assert call == AwsCall("aws eks describe-cluster --name c", lambda session: session.check_billing())


def test_wait_all_prints_every_command_and_the_one_deadline() -> None:
    wait = WaitAll((("kubectl", "rollout", "status", "a"), ("kubectl", "rollout", "status", "b")), 900)
    assert str(wait) == (
        "kubectl rollout status a && kubectl rollout status b"
        "  # one deadline for all: 15 min together (each gets --timeout=<seconds left>)"
    )
