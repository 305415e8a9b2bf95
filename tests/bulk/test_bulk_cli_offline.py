"""``make submit`` / ``jobs`` / ``fetch`` against AWS without credentials: no CDK, one line with what to run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from whisper_build.bulk.cli import main
from whisper_build.paths import REPO_ROOT

RUN_AND_REPORT = """
import json, sys
from whisper_build.bulk.cli import main
code = main(sys.argv[1:])
loaded = sorted({name.split(".")[0] for name in sys.modules} & {"stacks", "aws_cdk", "jsii", "constructs"})
print(json.dumps({"code": code, "loaded": loaded}))
"""


def no_credentials(tmp_path: Path) -> dict[str, str]:
    """An environment in which botocore finds no credentials and asks no metadata service."""
    (tmp_path / "credentials").write_text("")
    (tmp_path / "config").write_text("")
    env = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}
    return env | {
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYTHONPATH": str(REPO_ROOT),
    }


@pytest.mark.parametrize("command", [["jobs"], ["fetch", "--out", "out"], ["submit", "--src", "recordings"]])
def test_without_credentials_one_line_says_what_to_run_and_no_cdk_loads(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "recordings").mkdir()
    (tmp_path / "recordings" / "a.wav").write_bytes(b"RIFF")
    config = str(REPO_ROOT / "config" / "examples" / "bulk.yaml")
    ran = subprocess.run(
        [sys.executable, "-c", RUN_AND_REPORT, "--config", config, *command],
        cwd=tmp_path, env=no_credentials(tmp_path), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert report == {"code": 1, "loaded": []}, ran.stderr
    assert ran.stdout.strip().splitlines() == [ran.stdout.strip()]  # the report only
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("error: no AWS credentials found") and "aws sso login" in lines[0]
    assert "without AWS: `make bulk-local`" in lines[0]  # the way to try bulk with no account


def test_a_config_without_bulk_points_to_the_local_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WHISPER_BULK_ENDPOINT_URL", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(REPO_ROOT / "config" / "default.yaml"), "jobs"])
    assert "bulk.enabled is false" in str(exited.value) and "`make bulk-local`" in str(exited.value)
