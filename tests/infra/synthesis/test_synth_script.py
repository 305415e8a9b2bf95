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
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("  name "))
    for group in result.config.gpu_groups:
        line = next(line for line in lines if line.startswith(f"  {group.name} "))
        for heading, cell in [("instance type", group.instance_type), ("GPU", group.gpu.name), ("arch", group.arch)]:
            assert line.index(f" {cell}") + 1 == header.index(heading), f"\n{header}\n{line}"
        assert line.endswith(f" {group.serving_engine}")


@pytest.fixture()
def last_good(tmp_path: Path) -> Path:
    """An output directory holding a previous run's assembly (a marker file stands in for it)."""
    outdir = tmp_path / "cdk.out"
    outdir.mkdir()
    (outdir / "manifest.json").write_text('{"previous": true}', encoding="utf-8")
    return outdir


def test_invalid_config_leaves_the_last_assembly(synth_script, typo_config: Path, last_good: Path) -> None:
    assert synth_script.main(["--config", str(typo_config), "--outdir", str(last_good)]) == 2
    assert (last_good / "manifest.json").read_text(encoding="utf-8") == '{"previous": true}'


def test_cdk_failure_leaves_the_last_assembly_and_no_traceback(
    synth_script, last_good: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """CDK raising before it writes an assembly (what a jsii error does) → exit 1, one line, nothing deleted."""

    def failing_synthesize(config, outdir, config_path):
        raise RuntimeError("Error: 1 of /19 exceeds remaining space of 10.42.0.0/18\n    at NetworkBuilder.addSubnets")

    monkeypatch.setattr(synth_script, "synthesize", failing_synthesize)
    assert synth_script.main(["--config", str(CONFIGS["default"]), "--outdir", str(last_good)]) == 1
    err = capsys.readouterr().err
    assert f"synthesis of {CONFIGS['default']} failed: Error: 1 of /19 exceeds remaining space" in err
    assert "NetworkBuilder.addSubnets" not in err and "Traceback" not in err
    assert (last_good / "manifest.json").read_text(encoding="utf-8") == '{"previous": true}'
    assert sorted(p.name for p in last_good.parent.iterdir()) == ["cdk.out"]  # staging directory removed


@pytest.mark.slow
def test_passing_run_replaces_the_assembly_and_names_the_config(
    synth_script, last_good: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The real gates over the real default assembly (copied in place of a fresh synthesis)."""
    import shutil

    source = synthesized(CONFIGS["default"]).outdir
    monkeypatch.setattr(
        synth_script, "synthesize", lambda config, outdir, path: shutil.copytree(source, outdir, dirs_exist_ok=True)
    )
    monkeypatch.setattr(synth_script, "EXTRA_OUTPUTS", [])
    assert synth_script.main(["--config", str(CONFIGS["default"]), "--outdir", str(last_good)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"Config: {CONFIGS['default']} (project whisper-hyperpod, region us-east-1)")
    assert "PASS" in out and str(last_good / "WhisperHyperpodNetwork.template.json") in out
    assert json.loads((last_good / "manifest.json").read_text(encoding="utf-8")) != {"previous": True}
    assert sorted(p.name for p in last_good.parent.iterdir()) == ["cdk.out"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"network": {"vpc_cidr": "10.42.0.1/16"}}, "network.vpc_cidr: '10.42.0.1/16' has host bits set"),
        ({"network": {"vpc_cidr": "10.42.0.0/33"}}, "network.vpc_cidr: '10.42.0.0/33' is not an IPv4 CIDR block"),
        ({"network": {"vpc_cidr": "10.42.0.0/28"}}, "network.vpc_cidr: 10.42.0.0/28 is too small"),
        ({"region": "us-east-9"}, "region: 'us-east-9' is not an AWS region botocore knows; did you mean us-east-2"),
        ({"projet_name": "x"}, "projet_name: unknown field; did you mean project_name?"),
        ({"project_name": "My_Project"}, "project_name: 'My_Project' must be 3–32 lowercase letters"),
    ],
)
def test_issue_16_config_mistakes_fail_before_cdk_and_keep_the_assembly(
    synth_script, tmp_path: Path, last_good: Path, capsys, change: dict, expected: str
) -> None:
    data = yaml.safe_load(CONFIGS["default"].read_text(encoding="utf-8"))
    for key, value in change.items():
        if isinstance(value, dict):
            data[key].update(value)
        else:
            data[key] = value
    path = tmp_path / "mistake.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    assert synth_script.main(["--config", str(path), "--outdir", str(last_good)]) == 2
    err = capsys.readouterr().err
    assert f"invalid deployment config {path}:" in err and expected in err
    assert "Traceback" not in err
    assert (last_good / "manifest.json").read_text(encoding="utf-8") == '{"previous": true}'


def test_yaml_syntax_error_names_the_file(synth_script, tmp_path: Path, last_good: Path, capsys) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("project_name: x\nnetwork: {vpc_cidr: 10.42.0.0/16\n", encoding="utf-8")
    assert synth_script.main(["--config", str(path), "--outdir", str(last_good)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3:1:" in err and "<unicode string>" not in err


def test_a_dedented_line_gets_its_line_and_an_indentation_hint(
    synth_script, tmp_path: Path, last_good: Path, capsys
) -> None:
    lines = CONFIGS["default"].read_text(encoding="utf-8").splitlines()
    n = next(i for i, line in enumerate(lines) if line.startswith("  max_azs:"))
    lines[n] = lines[n].lstrip()
    path = tmp_path / "dedented.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert synth_script.main(["--config", str(path), "--outdir", str(last_good)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:{n + 2}:" in err and f"{n + 1} | max_azs:" in err and "hint: usually indentation" in err
    assert "Traceback" not in err


def _template_groups(config, count) -> list[dict]:
    """``InstanceGroups`` as the HyperPod template holds them (``count(group)`` nodes each)."""
    return [
        {"InstanceGroupName": g.name, "InstanceType": g.instance_type, "InstanceCount": count(g), "ThreadsPerCore": 2}
        for g in config.gpu_groups
    ]


def test_the_summary_explains_count_0_of_karpenter_groups_and_shows_mig(synth_script) -> None:
    from settings import load_config

    bulk = load_config(CONFIGS["bulk"])
    assert bulk.cluster.node_autoscaling
    lines = synth_script.instance_group_lines(bulk, _template_groups(bulk, lambda g: 0))
    assert lines[-1].startswith("  count 0: cluster.node_autoscaling is on, so HyperPod's Karpenter owns these groups")
    mig = load_config(CONFIGS["mig"])
    lines = synth_script.instance_group_lines(mig, _template_groups(mig, lambda g: g.instance_count))
    assert lines[0].split()[-3:] == ["MIG", "serving", "engine"]
    p5 = next(line for line in lines if line.startswith("  p5 "))
    assert p5.split()[-2:] == ["1g.10gb", "tensorrt_llm"]
    assert all(" - " in line for line in lines[1:] if not line.startswith("  p5 "))
    assert not any(line.startswith("  count 0") for line in lines)


def test_the_group_table_stays_aligned_with_instance_type_lists(synth_script) -> None:
    from settings import load_config

    capacity = load_config(CONFIGS["capacity"])
    groups = [
        {"InstanceGroupName": g.name, "InstanceRequirements": {"InstanceTypes": g.instance_types},
         "InstanceCount": g.instance_count, "ThreadsPerCore": 2}
        for g in capacity.gpu_groups
    ]  # fmt: skip
    assert any(len(g.instance_types) > 1 for g in capacity.gpu_groups)
    header, *rows = synth_script.instance_group_lines(capacity, groups)[: 1 + len(groups)]
    for row, group in zip(rows, capacity.gpu_groups, strict=True):
        assert " > ".join(group.instance_types) in row
        # every column starts under its heading
        assert row.index(group.gpu.name) == header.index("GPU"), f"\n{header}\n{row}"
        assert row.index(f" {group.serving_engine}") + 1 == header.index("serving engine"), f"\n{header}\n{row}"


def test_the_summary_explains_aws_cdk_libs_oidc_deprecation_warning(synth_script, tmp_path: Path) -> None:
    with_provider, without = tmp_path / "a.template.json", tmp_path / "b.template.json"
    with_provider.write_text(json.dumps({"Resources": {"P": {"Type": "Custom::AWSCDKOpenIdConnectProvider"}}}))
    without.write_text(json.dumps({"Resources": {"B": {"Type": "AWS::S3::Bucket"}}}))
    (note,) = synth_script.synthesis_notes({"Cluster": with_provider, "Storage": without})
    assert "aws_eks_v2.OpenIdConnectProvider is deprecated" in note and "not from your config" in note
    assert "OidcProviderNative" in note and "docs/cdk-flags.md" in note
    assert synth_script.synthesis_notes({"Storage": without}) == []
