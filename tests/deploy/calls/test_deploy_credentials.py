"""Credential problems become one line saying what to run; offline commands need no profile."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from botocore.exceptions import (
    ClientError,
    NoCredentialsError,
    ProfileNotFound,
    TokenRetrievalError,
    UnauthorizedSSOTokenError,
)

from whisper_build.deploy import credentials
from whisper_build.paths import REPO_ROOT

MISSING_PROFILE = "no-such-profile-for-whisper-tests"


def _client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}}, "GetCallerIdentity")


@pytest.mark.parametrize(
    ("error", "profile", "expected"),
    [
        (
            ProfileNotFound(profile="p1"),
            "p1",
            "AWS_PROFILE=p1 names no profile of your AWS config: `aws configure list-profiles`",
        ),
        (
            NoCredentialsError(),
            None,
            "no AWS credentials found (the default credential chain (no AWS_PROFILE)): `aws configure list-profiles`",
        ),
        (
            UnauthorizedSSOTokenError(),
            "sso",
            "session of AWS_PROFILE=sso has expired or was never started: `aws sso login --profile sso`",
        ),
        (
            TokenRetrievalError(provider="sso", error_msg="expired"),
            None,
            "`aws sso login`, then run the same command again",
        ),
        (
            _client_error("ExpiredToken"),
            "p2",
            "the credentials of AWS_PROFILE=p2 have expired (ExpiredToken): `aws sso login`",
        ),
        (_client_error("InvalidClientTokenId"), None, "AWS rejected the credentials of the default credential chain"),
    ],
)
def test_each_credential_failure_is_one_line_with_what_to_run(monkeypatch, error, profile, expected) -> None:
    if profile is None:
        monkeypatch.delenv("AWS_PROFILE", raising=False)
    else:
        monkeypatch.setenv("AWS_PROFILE", profile)

    class Boto3:
        @staticmethod
        def client(service: str, region_name: str):
            raise error

    with pytest.raises(credentials.CredentialsProblem) as excinfo:
        credentials.caller_identity(Boto3, "us-east-1")
    message = str(excinfo.value)
    assert expected in message and "\n" not in message


INSTALLED = ("-o", ".venv/.installed-infrastructure", "-o", ".venv-checkov/.installed", "-o", "node_modules/.installed")
"""Treat the install markers as current: installing is not what these tests are about (a worktree whose
requirements file is newer than its shared ``.venv`` marker would otherwise try to reinstall)."""


def _make(target: str, *variables: str, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    argv = ["make", "-s", *INSTALLED, target, *variables]
    return subprocess.run(argv, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def _tool_lines(stderr: str) -> list[str]:
    """stderr without make's own ``make: *** [Makefile:…] Error 2`` line (``make[1]: …`` under ``make test``)."""
    return [line for line in stderr.strip().splitlines() if not re.match(r"make(\[\d+\])?: ", line)]


def _offline_env(**extra: str) -> dict[str, str]:
    """This process's environment without AWS credentials, the AWS config files pointing nowhere, IMDS off."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env |= {"AWS_CONFIG_FILE": "/nonexistent/aws-config", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
            "AWS_EC2_METADATA_DISABLED": "true", **extra}  # fmt: skip
    return env


@pytest.mark.slow
def test_offline_commands_need_no_profile_and_capacity_says_what_to_run(tmp_path: Path) -> None:
    env = _offline_env(AWS_PROFILE=MISSING_PROFILE)
    runs = {
        "synth": _make("synth", f"SYNTH_OUTDIR={tmp_path / 'cdk.out'}", env=env),
        "deploy": _make("deploy", "DRY_RUN=1", env=env, timeout=120),
        "env": _make("env", env=env, timeout=120),
        "capacity": _make("capacity", env=env, timeout=120),
    }
    for name, run in runs.items():
        assert "Traceback" not in run.stdout + run.stderr, (name, run.stderr[-3000:])
    assert [runs[name].returncode for name in ("synth", "deploy", "env")] == [0, 0, 0], runs["synth"].stdout[-2000:]
    assert runs["synth"].stdout.rstrip().endswith("PASS")
    assert "[1/11] synth: synthesize once and run cfn-lint + cdk-nag AwsSolutions + checkov" in runs["deploy"].stdout
    assert "export PROJECT=whisper-hyperpod" in runs["env"].stdout
    capacity = runs["capacity"]
    assert capacity.returncode == 2
    assert _tool_lines(capacity.stderr) == [
        f"error: AWS_PROFILE={MISSING_PROFILE} names no profile of your AWS config: `aws configure list-profiles` lists "
        f"them; set AWS_PROFILE to one of those, or create it (`aws configure sso --profile {MISSING_PROFILE}` for IAM "
        "Identity Center, `aws configure --profile …` for access keys)"
    ]


@pytest.mark.slow
def test_capacity_without_any_credentials_is_one_line() -> None:
    run = _make("capacity", env=_offline_env(), timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stdout + run.stderr
    [line] = _tool_lines(run.stderr)
    assert line.startswith("error: no AWS credentials found (the default credential chain (no AWS_PROFILE)):")
    assert "aws sso login" in line


def test_an_sso_session_expiring_mid_run_names_the_step_and_the_login() -> None:
    from settings import load_config
    from whisper_build.deploy import aws
    from whisper_build.deploy.deploy_plan import deploy_steps
    from whisper_build.deploy.runner import Runner

    class ExpiredSession:
        def check_capacity(self) -> None:
            raise TokenRetrievalError(provider="sso", error_msg="Token has expired and refresh failed")

    steps = [step for step in deploy_steps(load_config(), "c.yaml", "1") if step.name == "capacity"]
    with pytest.raises(aws.DeployError) as excinfo:
        Runner(steps, ExpiredSession(), lambda _: None, lambda argv: None).run()  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert (
        message.startswith("step 'capacity' failed after ")
        and "has expired or was never started: `aws sso login" in message
    )
