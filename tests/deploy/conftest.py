"""Fixtures of the deploy tool's tests (``whisper_build.deploy``); plain helpers are in ``deploy_helpers``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from settings import DEFAULT_CONFIG_PATH
from whisper_build.deploy import prereqs


@pytest.fixture()
def custom_config(tmp_path: Path) -> Path:
    """The default config with another project name and region."""
    data = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    data.update(project_name="speech-prod", region="eu-west-1")
    path = tmp_path / "my config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.fixture()
def kubectl_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """make pods / make endpoint check kubectl and the AWS CLI first; here both are taken as installed."""
    monkeypatch.setattr(prereqs, "check_aws_cli", lambda: [])
    monkeypatch.setattr(prereqs, "check_kubectl", lambda version: [])
