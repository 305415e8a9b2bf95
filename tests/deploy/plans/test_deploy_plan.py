"""``make deploy``'s steps (:mod:`whisper_build.deploy.deploy_plan`) run with a recording session: order,
skips on a re-run, failures, the CTranslate2 fallback's engines step, the storage step's diagnosis,
``APPROVE=1``, the serving wait's one deadline."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from deploy_helpers import (
    CONTEXT,
    REPO_ROOT,
    _commands,
    _config,
    _dry_run_lines,
    _steps,
)

from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.deploy import (
    aws,
)
from whisper_build.deploy.deploy_plan import deploy_steps
from whisper_build.deploy.runner import Runner
from whisper_build.deploy.steps import WaitAll


class RecordingSession:
    """Stands in for :class:`aws_session.AwsSession`: records calls; ``have`` lists ECR images that exist."""

    def __init__(self, have: set[str], fail_builds: set[str] | None = None) -> None:
        self.have = have
        self.fail_builds = fail_builds or set()
        self.calls: list[str] = []

    def image_exists(self, repository: str, tag: str) -> bool:
        self.calls.append(f"image_exists {repository}:{tag}")
        return f"{repository}:{tag}" in self.have

    def run_builds(self, projects: Sequence[str]) -> None:
        self.calls.append(f"builds {' '.join(projects)}")
        failed = self.fail_builds & set(projects)
        if failed:
            raise aws.DeployError(f"CodeBuild project {sorted(failed)[0]} ended FAILED")

    def grant_kubectl(self, cluster: str, namespace: str) -> None:
        self.calls.append(f"grant {cluster} {namespace}")

    def check_capacity(self) -> None:
        self.calls.append("capacity")

    def mig_layout_changes(self) -> dict[str, str]:
        return {}  # a first deploy: no HyperPod cluster yet

    def drained_groups(self) -> list[str]:
        return []

    def pod_report(self) -> list[str]:
        return ["whisper-g5-abc: waiting: Init:Error, expected on a first deploy"]


def _run_plan(session: RecordingSession, config_path: Path = DEFAULT_CONFIG_PATH) -> tuple[list[str], list[str]]:
    config = load_config(config_path)
    commands: list[str] = []
    lines: list[str] = []
    steps = deploy_steps(config, "cfg.yaml", "123456789012")
    Runner(steps, session, lines.append, lambda argv: commands.append(" ".join(argv)), clock=lambda: 0.0).run()  # type: ignore[arg-type]
    return commands, lines


def test_first_deploy_runs_every_step_in_order() -> None:
    session = RecordingSession(have=set())
    commands, lines = _run_plan(session)
    assert commands == [
        "make synth CONFIG=cfg.yaml SYNTH_OUTDIR=cdk.out",  # synthesized and gated once ...
        "npx cdk bootstrap aws://123456789012/us-east-1 --app cdk.out",  # ... and that assembly deployed
        "npx cdk deploy WhisperHyperpodStorage --exclusively --require-approval never --import-existing-resources "
        "--app cdk.out",
        "scripts/publish_hyperpod_chart.sh cfg.yaml",
        "npx cdk deploy --all --require-approval never --app cdk.out",
        "aws eks update-kubeconfig --name whisper-hyperpod --region us-east-1",  # kubectl right after the cluster
        # this config's cluster, never the kubeconfig's current context (another config's, maybe)
        f"kubectl --context {CONTEXT} -n whisper rollout status deployment/whisper-g5 --timeout=900s",
        f"kubectl --context {CONTEXT} -n whisper rollout status deployment/whisper-g6e --timeout=900s",  # one deadline
    ]
    assert session.calls == [
        "capacity",
        "image_exists whisper-hyperpod/charts/hyperpod-helm-chart:0.1.0-067d658",
        "grant whisper-hyperpod whisper",
        "image_exists whisper-hyperpod/whisper-serving:0.1.0",
        "builds whisper-hyperpod-serving-image",
        "builds whisper-hyperpod-engine-sm86 whisper-hyperpod-engine-sm89",
        "builds whisper-hyperpod-rollout",
    ]
    assert sum(line.strip().startswith("done in ") for line in lines) == 11  # + mig-drain, mig-resume skipped


def test_rerun_skips_the_chart_and_image_that_exist() -> None:
    session = RecordingSession(
        have={"whisper-hyperpod/charts/hyperpod-helm-chart:0.1.0-067d658", "whisper-hyperpod/whisper-serving:0.1.0"}
    )
    commands, lines = _run_plan(session)
    assert "scripts/publish_hyperpod_chart.sh cfg.yaml" not in commands
    assert "builds whisper-hyperpod-serving-image" not in session.calls
    assert sum(line.strip() == "skipped: already done" for line in lines) == 4  # + mig-drain, mig-resume


def test_a_failed_step_stops_the_run_naming_it_and_how_to_resume() -> None:
    session = RecordingSession(have=set(), fail_builds={"whisper-hyperpod-engine-sm89"})
    with pytest.raises(
        aws.DeployError, match=r"step 'engines' failed after .*whisper-hyperpod-engine-sm89.*run the same"
    ):
        _run_plan(session)
    assert "builds whisper-hyperpod-rollout" not in session.calls


def test_a_failing_command_stops_the_run() -> None:
    config = load_config()
    ran: list[str] = []

    def fail(argv: Sequence[str]) -> None:
        ran.append(" ".join(argv))
        raise subprocess.CalledProcessError(1, list(argv))

    session = RecordingSession(set())
    # a gate finding (make synth exits 1) stops the run before anything is deployed
    with pytest.raises(aws.DeployError, match="step 'synth' failed"):
        Runner(deploy_steps(config, "c.yaml", "1"), session, lambda _: None, fail).run()  # type: ignore[arg-type]
    assert ran == ["make synth CONFIG=c.yaml SYNTH_OUTDIR=cdk.out"] and session.calls == []


def test_engines_step_skips_architectures_whose_groups_all_serve_ctranslate2(tmp_path: Path) -> None:
    lines = _dry_run_lines("deploy", _config(tmp_path, engines={"g6e": "ctranslate2"}))
    engines = [c for c in _commands(lines) if "codebuild start-build" in c and "-engine-" in c]
    assert engines and "whisper-hyperpod-engine-sm86" in engines[0]
    assert "engine-sm89" not in "\n".join(lines)  # neither started nor waited for
    assert "serving" in _steps(lines) and "rollout" in _steps(lines)


def test_a_fleet_serving_only_ctranslate2_or_torch_has_no_engines_step(tmp_path: Path) -> None:
    lines = _dry_run_lines("deploy", _config(tmp_path, engines={"g5": "torch", "g6e": "ctranslate2"}))
    assert "engines" not in _steps(lines)
    assert _steps(lines)[-2:] == ["rollout", "serving"]
    assert "-engine-" not in "\n".join(_commands(lines))


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
    steps = [s for s in deploy_steps(config, "c.yaml", "1") if s.name in ("bootstrap", "storage")]
    with pytest.raises(aws.DeployError, match="step 'storage' failed"):
        Runner(steps, Session(), lines.append, fail_storage).run()  # type: ignore[arg-type]
    assert "    why: WhisperHyperpodStorage: ROLLBACK_COMPLETE" in lines


def test_approve_leaves_cdk_approval_on_for_every_deploy(tmp_path: Path) -> None:
    default = [c for c in _commands(_dry_run_lines("deploy", DEFAULT_CONFIG_PATH)) if c.startswith("npx cdk deploy")]
    approved = [c for c in _commands(_dry_run_lines("deploy", DEFAULT_CONFIG_PATH, "--approve"))
                if c.startswith("npx cdk deploy")]  # fmt: skip
    assert len(default) == len(approved) == 2
    assert all("--require-approval never" in c for c in default)
    assert all("--require-approval any-change" in c and "never" not in c for c in approved)
    planned = subprocess.run(["make", "-n", "deploy", "APPROVE=1", "DRY_RUN=1"], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout  # fmt: skip
    assert "--approve" in planned


def test_serving_step_waits_for_every_group_under_one_deadline() -> None:
    (serving,) = [s for s in deploy_steps(load_config(), "c.yaml", "1") if s.name == "serving"]
    (action,) = serving.actions
    assert isinstance(action, WaitAll) and action.deadline_s == 15 * 60
    assert [argv[-1] for argv in action.argvs] == ["deployment/whisper-g5", "deployment/whisper-g6e"]
    assert "gives up after 15" in serving.duration
