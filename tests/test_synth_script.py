"""``scripts/synth.py`` (``make synth``) and ``app.py`` (``cdk synth``): bad configs fail naming the
field; the summary lists every template and instance group."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cdk_assembly import CONFIGS, REPO_ROOT, synthesized


def _load_synth_script():
    spec = importlib.util.spec_from_file_location("synth_script", REPO_ROOT / "scripts" / "synth.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def synth_script():
    return _load_synth_script()


@pytest.fixture()
def typo_config(tmp_path: Path) -> Path:
    data = yaml.safe_load(CONFIGS["default"].read_text(encoding="utf-8"))
    data["gpu_groups"][1]["instance_type"] = "ml.g6e.2xlargee"
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_synth_script_rejects_typo_with_field_path(synth_script, typo_config: Path, tmp_path: Path, capsys) -> None:
    outdir = tmp_path / "out"
    assert synth_script.main(["--config", str(typo_config), "--outdir", str(outdir)]) == 2
    err = capsys.readouterr().err
    assert "gpu_groups.1.instance_type: unknown HyperPod instance type 'ml.g6e.2xlargee'" in err
    assert "did you mean ml.g6e.2xlarge" in err
    assert not outdir.exists()


def test_cdk_app_rejects_typo_with_field_path(typo_config: Path) -> None:
    env = {**os.environ, "CDK_CONTEXT_JSON": json.dumps({"config": str(typo_config)}), "CDK_OUTDIR": "/nonexistent"}
    completed = subprocess.run(
        [sys.executable, "app.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 1
    assert "gpu_groups.1.instance_type: unknown HyperPod instance type" in completed.stderr


@pytest.mark.slow
def test_summary_lists_templates_and_instance_groups(synth_script, capsys) -> None:
    result = synthesized(CONFIGS["three-groups"])
    synth_script.print_summary(result.config, result.templates, [])
    out = capsys.readouterr().out
    for path in result.templates.values():
        assert str(path) in out
    assert "HyperPod instance groups (3):" in out
    for group in result.config.gpu_groups:
        assert f"{group.name:<12} {group.instance_type:<18} {group.gpu.name:<24} {group.arch:<6}" in out
