"""``make deploy``'s ways back and checks before billing: the CTranslate2 fallback after a failed
engine build, the recovery printed when the storage import fails, ``make capacity`` / ``make diff``
/ ``APPROVE=1``, the serving wait's one deadline, and the dry run's wording (tools, account, Grafana
prerequisite, what it would print at the end). Dry runs and the runner with injected commands; the
AWS side against botocore's Stubber."""

from __future__ import annotations

import itertools
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.stub import Stubber

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.workstation.deploy import aws, cli, plan, prereqs
from whisper_build.workstation.deploy.plan import WaitAll, running_cost_items

REPO_ROOT = Path(__file__).resolve().parent.parent
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"


def _config(tmp_path: Path, **changes: Any) -> Path:
    """The default config with top-level ``changes``; ``engines={"g6e": "ctranslate2"}`` sets serving engines."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    for group in data["gpu_groups"]:
        group["serving_engine"] = changes.get("engines", {}).get(group["name"], "tensorrt_llm")
    changes.pop("engines", None)
    for key, value in changes.items():
        data[key] = {**data[key], **value} if isinstance(value, dict) else value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


class NoBoto:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError("a dry run must not touch AWS")


def _dry_run(action: str, config: Path, *extra: str, expect: int = 0) -> list[str]:
    lines: list[str] = []

    def no_commands(argv: Sequence[str]) -> None:
        raise AssertionError(f"a dry run must not run {argv}")

    code = cli.main([action, "--config", str(config), "--dry-run", *extra], out=lines.append,
                    run_command=no_commands, boto3_module=NoBoto())  # fmt: skip
    assert code == expect
    return lines


def _commands(lines: list[str]) -> list[str]:
    return [line.strip().removeprefix("$ ") for line in lines if line.strip().startswith("$ ")]


def _steps(lines: list[str]) -> list[str]:
    return [line.split(":")[0].split("] ")[1] for line in lines if line.startswith("[")]


# ---------------------------------------------------------------- B1: the CTranslate2 fallback
def test_engines_step_skips_architectures_whose_groups_all_serve_ctranslate2(tmp_path: Path) -> None:
    lines = _dry_run("deploy", _config(tmp_path, engines={"g6e": "ctranslate2"}))
    engines = [c for c in _commands(lines) if "codebuild start-build" in c and "-engine-" in c]
    assert engines and "whisper-hyperpod-engine-sm86" in engines[0]
    assert "engine-sm89" not in "\n".join(lines)  # neither started nor waited for
    assert "serving" in _steps(lines) and "rollout" in _steps(lines)


def test_a_fleet_serving_only_ctranslate2_or_torch_has_no_engines_step(tmp_path: Path) -> None:
    lines = _dry_run("deploy", _config(tmp_path, engines={"g5": "torch", "g6e": "ctranslate2"}))
    assert "engines" not in _steps(lines)
    assert _steps(lines)[-2:] == ["rollout", "serving"]
    assert "-engine-" not in "\n".join(_commands(lines))


def test_publish_ctranslate2_converts_once_and_uploads_to_each_fallback_group(tmp_path: Path) -> None:
    lines = _dry_run("publish-ctranslate2", _config(tmp_path, engines={"g5": "ctranslate2", "g6e": "ctranslate2"}))
    commands = _commands(lines)
    assert commands[0] == "python3 -m venv .venv-ctranslate2"
    assert commands[1].startswith(".venv-ctranslate2/bin/pip install -q ctranslate2==")
    assert commands[2].startswith(
        ".venv-ctranslate2/bin/ct2-transformers-converter --model openai/whisper-large-v3-turbo"
    )
    assert "--quantization float16" in commands[2]
    assert commands[3:] == [
        f"aws s3 sync whisper-large-v3-turbo-ct2 's3://whisper-hyperpod-models-<account>-us-east-1/models/"
        f"large-v3-turbo/{arch}/ctranslate2/' --region us-east-1"
        for arch in ("sm86", "sm89")
    ]


def test_publish_ctranslate2_refuses_a_config_without_a_ctranslate2_group(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["publish-ctranslate2", "--config", str(DEFAULT_CONFIG_PATH), "--dry-run"]) == 2
    assert "serving_engine: ctranslate2" in capsys.readouterr().err


def test_make_publish_ctranslate2_dry_run(tmp_path: Path) -> None:
    config = _config(tmp_path, engines={"g6e": "ctranslate2"})
    done = subprocess.run(["make", "-s", "publish-ctranslate2", "DRY_RUN=1", f"CONFIG={config}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert "sm89/ctranslate2/" in done.stdout and "sm86/ctranslate2/" not in done.stdout


# ---------------------------------------------------------------- B2: a failed storage import
def test_storage_failure_report_names_the_failed_import_and_the_ways_out() -> None:
    config = load_config()
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    stub = Stubber(cloudformation)
    stack = {"StackName": "WhisperHyperpodStorage", "StackStatus": "ROLLBACK_COMPLETE", "CreationTime": "2026-12-01"}
    stub.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "WhisperHyperpodStorage"})
    event = {
        "StackId": "id", "EventId": "e1", "StackName": "WhisperHyperpodStorage", "Timestamp": "2026-12-01",
        "LogicalResourceId": "ModelBucket", "ResourceType": "AWS::S3::Bucket", "ResourceStatus": "IMPORT_FAILED",
        "ResourceStatusReason": "Resource import failed: the bucket's properties differ",
    }  # fmt: skip
    ok_event = {**event, "EventId": "e0", "ResourceStatus": "CREATE_COMPLETE"}
    stub.add_response(
        "describe_stack_events", {"StackEvents": [event, ok_event]}, {"StackName": "WhisperHyperpodStorage"}
    )
    stub.activate()
    session = cli.AwsSession(config, "123456789012", "arn", lambda *a, **k: cloudformation, lambda *a, **k: None,
                             lambda _: None)  # fmt: skip
    bucket = "whisper-hyperpod-models-123456789012-us-east-1"
    session.retained = lambda: [  # type: ignore[method-assign]
        aws.Retained("s3-bucket", bucket, "model engines"),
        aws.Retained("ecr-repository", "whisper-hyperpod/whisper-serving", "images"),
        aws.Retained("s3-bucket", "whisper-hyperpod-storage-logs-x", cli.ACCESS_LOG_WHY),
        aws.Retained("kms-key", "key-1", "key"),
    ]
    report = "\n".join(session.storage_failure_report())
    stub.assert_no_pending_responses()
    assert report.startswith("WhisperHyperpodStorage: ROLLBACK_COMPLETE")
    assert "ModelBucket (AWS::S3::Bucket) IMPORT_FAILED: Resource import failed" in report
    assert "CREATE_COMPLETE" not in report
    assert "aws cloudformation delete-stack --stack-name WhisperHyperpodStorage --region us-east-1" in report
    assert f"aws s3 rb s3://{bucket} --region us-east-1" in report
    assert "aws ecr delete-repository --repository-name whisper-hyperpod/whisper-serving --force" in report
    assert "storage-logs" not in report and "key-1" not in report  # only what the import is about
    assert "new project_name" in report


def test_storage_step_prints_the_report_when_it_fails() -> None:
    config = load_config()

    class Session:
        def storage_failure_report(self) -> list[str]:
            return ["WhisperHyperpodStorage: ROLLBACK_COMPLETE"]

        def check_capacity(self) -> None: ...

    def fail_storage(argv: Sequence[str]) -> None:
        if "WhisperHyperpodStorage" in argv:
            raise subprocess.CalledProcessError(1, list(argv))

    lines: list[str] = []
    steps = [s for s in cli.deploy_steps(config, "c.yaml", "1") if s.name in ("bootstrap", "storage")]
    with pytest.raises(aws.DeployError, match="step 'storage' failed"):
        cli.Runner(steps, Session(), lines.append, fail_storage).run()  # type: ignore[arg-type]
    assert "    why: WhisperHyperpodStorage: ROLLBACK_COMPLETE" in lines


# ---------------------------------------------------------------- checks and review before billing
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
    monkeypatch.setattr(cli.AwsSession, "check_capacity", lambda self: checked.append("capacity"))
    lines: list[str] = []
    code = cli.main(["deploy", "--config", str(DEFAULT_CONFIG_PATH), "--only", "capacity"], out=lines.append,
                    run_command=lambda argv: None, boto3_module=Boto())  # fmt: skip
    assert code == 0 and checked == ["capacity"]


def test_approve_leaves_cdk_approval_on_for_every_deploy(tmp_path: Path) -> None:
    default = [c for c in _commands(_dry_run("deploy", DEFAULT_CONFIG_PATH)) if c.startswith("npx cdk deploy")]
    approved = [c for c in _commands(_dry_run("deploy", DEFAULT_CONFIG_PATH, "--approve"))
                if c.startswith("npx cdk deploy")]  # fmt: skip
    assert len(default) == len(approved) == 2
    assert all("--require-approval never" in c for c in default)
    assert all("--require-approval any-change" in c and "never" not in c for c in approved)
    planned = subprocess.run(["make", "-n", "deploy", "APPROVE=1", "DRY_RUN=1"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout  # fmt: skip
    assert "--approve" in planned


def test_make_diff_runs_cdk_diff_for_every_stack_with_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prereqs, "check_node", lambda: [])
    ran: list[list[str]] = []
    lines: list[str] = []
    code = cli.main(["diff", "--config", str(DEFAULT_CONFIG_PATH)], out=lines.append,
                    run_command=lambda argv: ran.append(list(argv)), boto3_module=NoBoto())  # fmt: skip
    assert code == 0
    assert ran == [["npx", "cdk", "diff", "--all", "-c", "config=config/default.yaml"]]
    assert lines == ["$ npx cdk diff --all -c config=config/default.yaml"]


# ---------------------------------------------------------------- D4: one deadline for the serving wait
def test_serving_wait_has_one_deadline_for_all_groups() -> None:
    now = [0.0]
    ran: list[tuple[str, ...]] = []

    def rollout_status(argv: Sequence[str]) -> None:
        ran.append(tuple(argv))
        now[0] += 600.0  # each group takes 10 min

    action = WaitAll((("kubectl", "rollout", "status", "a"), ("kubectl", "rollout", "status", "b"),
                      ("kubectl", "rollout", "status", "c")), 900)  # fmt: skip
    runner = cli.Runner([], None, lambda _: None, rollout_status, clock=lambda: now[0])
    with pytest.raises(aws.DeployError, match="not ready within 15 min all together.*status c"):
        runner.wait_all(action)
    assert [argv[-1] for argv in ran] == ["--timeout=900s", "--timeout=300s"]


def test_serving_step_waits_for_every_group_under_one_deadline() -> None:
    (serving,) = [s for s in cli.deploy_steps(load_config(), "c.yaml", "1") if s.name == "serving"]
    (action,) = serving.actions
    assert isinstance(action, WaitAll) and action.deadline_s == 15 * 60
    assert [argv[-1] for argv in action.argvs] == ["deployment/whisper-g5", "deployment/whisper-g6e"]
    assert "gives up after 15" in serving.duration


# ---------------------------------------------------------------- the dry run's wording
def test_dry_run_says_what_it_would_check_and_print(tmp_path: Path) -> None:
    text = "\n".join(_dry_run("deploy", DEFAULT_CONFIG_PATH))
    assert (
        "would check the tools first: Node.js >= 22 with npx, AWS CLI v2, kubectl 1.32-1.34, helm >= 3.8, git" in text
    )
    assert "would print: deploy INTO account <aws sts get-caller-identity>, region us-east-1" in text
    assert "IAM Identity Center" in text and "observability.grafana: false" in text
    assert "Whisper is serving." not in text
    assert "(dry run) once every step has run" in text
    assert '"transcribe_text"' in text
    pinned = "\n".join(_dry_run("deploy", _config(tmp_path, account="123456789012",
                                                   observability={"grafana": False})))  # fmt: skip
    assert "refuse unless the account is 123456789012" in pinned
    assert "IAM Identity Center" not in pinned


def test_openai_example_is_the_same_command_in_the_dry_run_and_the_docs() -> None:
    text = "\n".join(_dry_run("deploy", DEFAULT_CONFIG_PATH))
    (printed,) = [line.strip() for line in text.splitlines() if "from openai import OpenAI" in line]
    assert printed.startswith(".venv/bin/python -c ")
    documented = [line for line in DEPLOY_DOC.read_text(encoding="utf-8").splitlines() if "from openai import" in line]
    assert documented and all(line.startswith(".venv/bin/python -c ") for line in documented)
    assert printed in documented


# ---------------------------------------------------------------- one list of what bills, in code and docs
def test_the_stacks_step_cost_line_and_the_docs_cost_table_list_the_same_items() -> None:
    config = load_config()
    section = DEPLOY_DOC.read_text(encoding="utf-8").split("### Cost (read before deploying)", 1)[1]
    lines = section.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("| "))
    table = [line for line in itertools.takewhile(lambda line: line.startswith("|"), lines[first:])]
    labels = [row.split("|")[1].strip().replace("`", "") for row in table[2:]]
    items = [item for item, _ in running_cost_items(config)]
    assert len(labels) == len(items)
    for label, item in zip(labels, items, strict=True):
        name, _, detail = item.partition(": ")
        assert label.startswith(name) and detail in label, (label, item)
    (stacks,) = [s for s in cli.deploy_steps(config, "c.yaml", "1") if s.name == "stacks"]
    for item in items:
        assert item in stacks.cost


def test_cost_items_follow_the_config_ebs_azs_and_nat() -> None:
    config = load_config()
    groups = [group.model_copy(update={"ebs_volume_gb": 100, "instance_count": 3}) for group in config.gpu_groups]
    network = config.network.model_copy(update={"max_azs": 3, "nat_gateways": 2})
    items = dict(running_cost_items(config.model_copy(update={"gpu_groups": groups, "network": network})))
    assert f"HyperPod instance EBS volumes: {100 * 3 * len(groups)} GB in all (ebs_volume_gb × instances)" in items
    assert "Secrets Manager interface VPC endpoint: 1 in each of 3 AZs" in items
    assert items["public IPv4 addresses: 2"] == "0.005 USD an hour each"  # the internal NLB adds none


def test_the_eks_price_follows_the_kubernetes_versions_support_dates() -> None:
    assert plan.eks_cost_item("1.33", as_of="2026-11-30") == (
        "EKS control plane: Kubernetes 1.33, in extended support since 2026-07-29",
        "0.60 USD an hour (standard support: 0.10)",
    )
    assert plan.eks_cost_item("1.34", as_of="2026-11-30")[1] == "0.10 USD an hour, 0.60 from 2026-12-02"
    assert plan.eks_cost_item("1.34", as_of="2026-12-02")[1].startswith("0.60 USD an hour")
    item, price = plan.eks_cost_item("1.30")
    assert "not sourced" in item and "describe-cluster-versions --cluster-versions 1.30" in price
