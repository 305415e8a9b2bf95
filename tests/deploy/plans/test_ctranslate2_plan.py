"""``make publish-ctranslate2`` (:mod:`whisper_build.deploy.ctranslate2_plan`): one conversion, one upload
per fallback group, and the refusal of a config without one."""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import (
    REPO_ROOT,
    _commands,
    _config,
    _dry_run_lines,
)

from settings import DEFAULT_CONFIG_PATH
from whisper_build.deploy import (
    cli,
)


def test_publish_ctranslate2_converts_once_and_uploads_to_each_fallback_group(tmp_path: Path) -> None:
    lines = _dry_run_lines(
        "publish-ctranslate2", _config(tmp_path, engines={"g5": "ctranslate2", "g6e": "ctranslate2"})
    )
    commands = _commands(lines)
    assert commands[0] == "python3 -m venv .venv-ctranslate2"
    # the serving image's CTranslate2 (the serving set's pin), not whatever this environment has
    assert commands[1].startswith(
        f".venv-ctranslate2/bin/pip install -q ctranslate2=={cli.image_ctranslate2_version()} "
    )
    assert cli.image_ctranslate2_version() == importlib.metadata.version("ctranslate2")  # make test installs the pin
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


def test_make_publish_ctranslate2_dry_run_lines(tmp_path: Path) -> None:
    config = _config(tmp_path, engines={"g6e": "ctranslate2"})
    done = subprocess.run(["make", "-s", "publish-ctranslate2", "DRY_RUN=1", f"CONFIG={config}"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert "sm89/ctranslate2/" in done.stdout and "sm86/ctranslate2/" not in done.stdout
