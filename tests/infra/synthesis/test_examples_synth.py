"""Every config a user is pointed at passes ``make synth`` with the three gates green.

One ``scripts/synth.py`` run per config (synthesis + cfn-lint + cdk-nag + checkov, about a minute each
on 2 cores), including the default with ``account`` pinned as docs/deploy.md recommends: offline, its
AZs must not become CDK's ``dummy1a`` placeholders (cfn-lint W3010).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml
from cdk_assembly import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "config" / "examples").glob("*.yaml"))
PINNED_ACCOUNT = "pinned-account"


def _synth_main():
    spec = importlib.util.spec_from_file_location("synth_script_examples", REPO_ROOT / "scripts" / "synth.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _config_path(name: str, tmp_path: Path) -> Path:
    if name != PINNED_ACCOUNT:
        return REPO_ROOT / "config" / name if name == "default.yaml" else REPO_ROOT / "config" / "examples" / name
    data = yaml.safe_load((REPO_ROOT / "config" / "default.yaml").read_text(encoding="utf-8"))
    data["account"] = "123456789012"
    path = tmp_path / "pinned.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["default.yaml", PINNED_ACCOUNT, *(path.name for path in EXAMPLES)])
def test_config_passes_make_synth_with_gates_green(name: str, tmp_path: Path, capsys) -> None:
    status = _synth_main()(["--config", str(_config_path(name, tmp_path)), "--outdir", str(tmp_path / "cdk.out")])
    out = capsys.readouterr().out
    assert "dummy1" not in out
    assert status == 0, out[-4000:]
    assert "Gates: cfn-lint + cdk-nag AwsSolutions + checkov over" in out and out.rstrip().endswith("PASS")


def test_every_example_is_covered() -> None:
    assert {path.name for path in EXAMPLES} >= {"pipeline.yaml", "three-groups.yaml", "mig.yaml"}
