"""``python -m whisper_build.deploy`` (:mod:`whisper_build.deploy.cli`): the dry run carries the config
through every step, ``make`` targets, refusals (pipeline configs, unknown steps, a pinned account),
prerequisite checks, ``env`` exports."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import (
    REPO_ROOT,
    FakeBoto3,
    NoBoto,
    _config,
    _dry_run_lines,
)

from settings import DEFAULT_CONFIG_PATH
from whisper_build.deploy import (
    aws_session,
    cli,
    prereqs,
)
from whisper_build.deploy.prereqs import check_aws_cli, check_kubectl

pytestmark = pytest.mark.usefixtures("kubectl_installed")


@pytest.mark.parametrize(
    ("config_fixture", "project", "prefix", "region"),
    [(None, "whisper-hyperpod", "WhisperHyperpod", "us-east-1"), ("custom", "speech-prod", "SpeechProd", "eu-west-1")],
)
def test_dry_run_carries_the_config_through_every_step(
    config_fixture: str | None, project: str, prefix: str, region: str, custom_config: Path
) -> None:
    config_path = custom_config if config_fixture else DEFAULT_CONFIG_PATH
    shown = str(config_path) if config_fixture else "config/default.yaml"
    lines = _dry_run_lines("deploy", config_path)
    commands = [line.strip().removeprefix("$ ") for line in lines if line.strip().startswith("$ ")]
    steps = [line.split(":")[0] for line in lines if line.startswith("[")]
    assert steps == [f"[{i}/11] {name}" for i, name in enumerate(
        ["synth", "capacity", "bootstrap", "storage", "hyperpod-chart", "stacks", "kubectl",
         "serving-image", "engines", "rollout", "serving"], 1
    )]  # fmt: skip
    # no group has mig_profile: the MIG steps are left out of the plan, in one line
    assert any(line.startswith("not listed: mig-drain, mig-resume (no GPU group has mig_profile") for line in lines)
    assert not any("mig-drain:" in line for line in lines)
    # the config is synthesized and gated once; every cdk command deploys that assembly, none synthesizes again
    assert commands[0] == shlex.join(["make", "synth", f"CONFIG={shown}", "SYNTH_OUTDIR=cdk.out"])
    synth_line = next(line for line in lines if line.startswith("[1/11] synth: "))
    assert "run cfn-lint + cdk-nag AwsSolutions + checkov on that assembly (cdk.out/)" in synth_line
    cdk_commands = [c for c in commands if c.startswith("npx cdk")]
    assert len(cdk_commands) == 3
    for command in cdk_commands:
        assert command.endswith("--app cdk.out") and "-c config=" not in command
    assert f"npx cdk deploy {prefix}Storage --exclusively" in cdk_commands[1]
    assert shlex.join(["scripts/publish_hyperpod_chart.sh", shown]) in commands
    kubectl = [command for command in commands if command.startswith("kubectl")]
    assert kubectl and all(
        command.startswith(f"kubectl --context 'arn:aws:eks:{region}:<account>:cluster/{project}' -n whisper ")
        for command in kubectl
    ), kubectl
    for command in commands:
        if command.startswith("aws ") or command.startswith("kubectl"):
            assert region in command
            assert project in command or "deployment/whisper-" in command or "instance-type-offerings" in command
    text = "\n".join(lines)
    for name in (
        f"{project}-serving-image",
        f"{project}-engine-sm86",
        f"{project}-engine-sm89",
        f"{project}-rollout",
        f"--name {project} --region {region}",
        f"{project}/charts/hyperpod-helm-chart:0.1.0-067d658",
    ):
        assert name in text  # fmt: skip
    if config_fixture:
        # the default project's name nowhere; the label domain whisper-hyperpod.io/ is the product's, not a name
        unnamed = text.replace("whisper-hyperpod.io/", "")
        assert "whisper-hyperpod" not in unnamed and "WhisperHyperpod" not in unnamed


def test_make_deploy_dry_run_runs_the_same_plan_and_installs_nothing(custom_config: Path) -> None:
    completed = subprocess.run(
        ["make", "-s", "deploy", "DRY_RUN=1", f"CONFIG={custom_config}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "[11/11] serving" in completed.stdout and "speech-prod-rollout" in completed.stdout
    # even with every install input "modified" (-W), a dry run's recipe has no install step
    planned = subprocess.run(
        ["make", "-n", "-W", "requirements/infrastructure.txt", "-W", "requirements/checkov.txt", "-W", "package.json",
         "deploy", "DRY_RUN=1", f"CONFIG={custom_config}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "pip install" not in planned and "npm install" not in planned and "--dry-run" in planned
    planned = subprocess.run(["make", "-n", "-W", "requirements/infrastructure.txt", "deploy", f"CONFIG={custom_config}"],
                             cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    assert "pip install" in planned  # the real deploy does install


def test_pipeline_configs_are_refused_with_the_way_to_deploy_them(capsys: pytest.CaptureFixture[str]) -> None:
    config = REPO_ROOT / "config" / "examples" / "pipeline.yaml"
    assert cli.main(["deploy", "--config", str(config), "--dry-run"]) == 2
    assert f"npx cdk deploy --all -c config={config}" in capsys.readouterr().err


def test_env_prints_the_config_names_as_shell_exports(custom_config: Path) -> None:
    lines: list[str] = []
    assert cli.main(["env", "--config", str(custom_config)], out=lines.append) == 0
    exported = subprocess.run(["bash", "-c", lines[0] + '\necho "$PROJECT|$REGION|$NAMESPACE|$STACK_PREFIX|$CONFIG"'],
                              capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    assert exported == f"speech-prod|eu-west-1|whisper|SpeechProd|{custom_config}"


def test_only_runs_one_step_and_rejects_unknown_ones(custom_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _dry_run_lines("deploy", custom_config, "--only", "kubectl")
    assert [line.split(":")[0] for line in lines if line.startswith("[")] == ["[1/1] kubectl"]
    assert cli.main(["deploy", "--config", str(custom_config), "--dry-run", "--only", "kubeconfig"]) == 2
    assert (
        "no such step; steps: synth, capacity, bootstrap, storage, hyperpod-chart, mig-drain" in capsys.readouterr().err
    )


def test_make_capacity_runs_the_capacity_step_alone_without_tool_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done = subprocess.run(["make", "-s", "capacity", "DRY_RUN=1"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert re.findall(r"^\[\d+/\d+\] \w+", done.stdout, re.M) == ["[1/1] capacity"]

    def no_tools(*_: Any) -> list[str]:
        raise AssertionError("make capacity needs no local tools")

    monkeypatch.setattr(prereqs, "check_all", no_tools)

    class Sts:
        def get_caller_identity(self) -> dict[str, str]:
            return {"Account": "123456789012", "Arn": "arn:aws:iam::123456789012:user/me"}

    class Boto:
        def client(self, service: str, **_: Any) -> Any:
            assert service == "sts"
            return Sts()

        resource = client

    checked: list[str] = []
    monkeypatch.setattr(aws_session.AwsSession, "check_capacity", lambda self: checked.append("capacity"))
    lines: list[str] = []
    code = cli.main(["deploy", "--config", str(DEFAULT_CONFIG_PATH), "--only", "capacity"], out=lines.append,
                    run_command=lambda argv: None, boto3_module=Boto())  # fmt: skip
    assert code == 0 and checked == ["capacity"]


def test_make_diff_runs_cdk_diff_for_every_stack_with_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs, "check_node", lambda: [])
    ran: list[list[str]] = []
    lines: list[str] = []
    code = cli.main(["diff", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    run_command=lambda argv: ran.append(list(argv)), boto3_module=NoBoto())  # fmt: skip
    assert code == 0
    assert ran == [["npx", "cdk", "diff", "--all", "-c", "config=config/default.yaml"]]
    assert lines == ["$ npx cdk diff --all -c config=config/default.yaml"]


def test_dry_run_says_what_it_would_check_and_print(tmp_path: Path) -> None:
    text = "\n".join(_dry_run_lines("deploy", DEFAULT_CONFIG_PATH))
    assert (
        "would check the tools first: Node.js >= 22 with npx, AWS CLI v2, kubectl 1.32-1.34, helm >= 3.8, git" in text
    )
    assert "would print: deploy INTO account <aws sts get-caller-identity>, region us-east-1" in text
    assert "IAM Identity Center" in text and "observability.grafana: false" in text
    assert "Whisper is serving." not in text
    assert "(dry run) once every step has run" in text
    assert '"transcribe_text"' in text
    pinned = "\n".join(_dry_run_lines("deploy", _config(tmp_path, account="123456789012",
                                                   observability={"grafana": False})))  # fmt: skip
    assert "refuse unless the account is 123456789012" in pinned
    assert "IAM Identity Center" not in pinned


def test_a_pinned_account_refuses_other_credentials_and_says_how_to_pick_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data["account"] = "111111111111"
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    monkeypatch.setattr(prereqs, "check_all", lambda version: [])
    fake = FakeBoto3("222222222222")
    monkeypatch.setenv("AWS_PROFILE", "sandbox")
    lines: list[str] = []

    def no_commands(argv: Sequence[str]) -> None:
        raise AssertionError("nothing may run in the wrong account")

    code = cli.main(["deploy", "--config", str(path)], out=lines.append, run_command=no_commands,
                    boto3_module=fake)  # fmt: skip
    assert code == 2
    assert "deploy INTO account 222222222222, region us-east-1, as arn:aws:iam::222222222222:user/me " \
        "(AWS_PROFILE=sandbox)" in lines  # fmt: skip
    err = capsys.readouterr().err
    assert "the config pins account 111111111111 (account:) but your credentials (AWS_PROFILE=sandbox)" in err
    assert "AWS_PROFILE=<profile> make deploy" in err


def test_make_pods_and_endpoint_check_kubectl_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(prereqs, "check_aws_cli", check_aws_cli)
    monkeypatch.setattr(prereqs, "check_kubectl", check_kubectl)
    monkeypatch.setenv("PATH", str(tmp_path))  # neither kubectl nor aws

    def never(argv: Sequence[str]) -> str:
        raise AssertionError("kubectl must not be called before the check")

    for action in ("pods", "endpoint"):
        assert cli.main([action, "--config", str(DEFAULT_CONFIG_PATH)], kubectl=never, endpoint_wait_s=0) == 2
        err = capsys.readouterr().err
        assert "missing prerequisites" in err and "kubectl not found on PATH" in err and "aws not found" in err
