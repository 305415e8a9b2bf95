"""``make deploy``'s prerequisite checks against fake programs on a fake ``PATH``: every tool
missing, too old, or good, each with the message that says what to install."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from whisper_build.deploy import prereqs


def _tool(bin_dir: Path, name: str, output: str) -> None:
    path = bin_dir / name
    quoted = output.replace("'", "'\\''")
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{quoted}'\n", encoding="utf-8")  # printf: a shell builtin
    path.chmod(0o755)


def _kubectl_json(minor: str) -> str:
    return json.dumps({"clientVersion": {"major": "1", "minor": minor, "gitVersion": f"v1.{minor}.0"}})


@pytest.fixture()
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def _good(bin_dir: Path) -> None:
    _tool(bin_dir, "node", "v22.11.0")
    _tool(bin_dir, "npx", "")
    _tool(bin_dir, "aws", "aws-cli/2.22.4 Python/3.12.6 Linux/6.1 exe/x86_64.debian.12")
    _tool(bin_dir, "helm", "v3.16.2+g13654a5")
    _tool(bin_dir, "kubectl", _kubectl_json("33"))
    _tool(bin_dir, "git", "git version 2.39.5")


def test_good_tools_pass(fake_path: Path) -> None:
    _good(fake_path)
    assert prereqs.check_all("1.33") == []


def test_nothing_installed_names_every_tool(fake_path: Path) -> None:
    problems = prereqs.check_all("1.33")
    for tool in ("node not found", "npx not found", "aws not found", "kubectl not found", "helm not found",
                 "git not found"):  # fmt: skip
        assert any(p.startswith(tool) for p in problems), (tool, problems)


@pytest.mark.parametrize(
    ("tool", "output", "message"),
    [
        ("node", "v20.20.2", "Node.js v20.20.2 is too old: the AWS CDK CLI needs Node.js >= 22"),
        ("aws", "aws-cli/1.33.1 Python/3.11.2 Linux/6.1 botocore/1.34.1", "is not version 2: install the AWS CLI v2"),
        ("helm", "v3.7.2+g663a896", "helm v3.7.2+g663a896 is too old: the chart publish needs helm >= 3.8"),
        ("kubectl", _kubectl_json("30"), "kubectl 1.30 is more than one minor version from the cluster's 1.33"),
        ("kubectl", "not json", "kubectl version unreadable"),
    ],
    ids=["node-20", "aws-v1", "helm-3.7", "kubectl-skew", "kubectl-garbage"],
)
def test_too_old_tools_are_refused_with_what_to_install(fake_path: Path, tool: str, output: str, message: str) -> None:
    _good(fake_path)
    _tool(fake_path, tool, output)
    problems = prereqs.check_all("1.33")
    assert len(problems) == 1 and message in problems[0], problems


def test_kubectl_one_minor_version_apart_is_fine(fake_path: Path) -> None:
    _good(fake_path)
    _tool(fake_path, "kubectl", _kubectl_json("34+"))
    assert prereqs.check_kubectl("1.33") == []
