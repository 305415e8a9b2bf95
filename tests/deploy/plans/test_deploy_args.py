"""The deploy tool's arguments (:mod:`whisper_build.deploy.args`): every action the Makefile runs, and refusals."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from deploy_helpers import REPO_ROOT

from whisper_build.deploy.args import build_parser


def test_every_action_the_makefile_runs_parses() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    actions = set(re.findall(r"-m whisper_build\.deploy (\S+)", makefile))
    assert actions == {"deploy", "destroy", "env", "pods", "endpoint", "diff", "publish-ctranslate2"}
    for action in actions:
        args = build_parser().parse_args([action, "--config", "c.yaml"])
        assert args.action == action and args.config == Path("c.yaml") and not args.dry_run


def test_flags_parse_and_a_missing_config_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["destroy", "--config", "c.yaml", "--dry-run", "--purge", "--only", "billing"])
    assert (args.dry_run, args.purge, args.only, args.approve) == (True, True, "billing", False)
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["deploy"])
    assert exited.value.code == 2 and "--config" in capsys.readouterr().err
