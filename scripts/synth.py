#!/usr/bin/env python3
"""``make synth``: synthesize a deployment config into ``cdk.out/``, run the gates, print a summary.

Usage: ``python -m scripts.synth [--config path.yaml] [--outdir cdk.out]``

Gates: cfn-lint and cdk-nag over every template, then checkov over the templates and the
Kubernetes manifests (``dist/k8s``). Exit status: 0 when no gate has an unexplained finding (every
skip carries its reason: ``.cfnlintrc``, the cdk-nag acknowledgements, ``stacks/checkov_skips.py``
and the ``checkov.io/skip`` annotations); 1 when a gate fails or CDK cannot synthesize; 2 when the
config is invalid. ``--outdir`` is only replaced by a run that passes the gates; a failing run
leaves its assembly in ``<outdir>.failed``.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from whisper_build.paths import REPO_ROOT

# jsii prints a multi-line banner when Node.js 20 is used; the README asks for Node.js >= 22.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import cx_api

from k8s_charts.synth import write_dist
from observability.dashboard import write_dashboard
from settings import DEFAULT_CONFIG_PATH, ConfigError, DeploymentConfig, load_config
from settings.advisories import config_warnings
from settings.fleet import spot_group_name, spot_groups
from stacks.assembly import synthesize
from stacks.cluster_request import template_problems
from stacks.gates import CheckovResult, Finding, read_nag_findings, run_cfn_lint, run_checkov, stack_templates


def _write_dashboard(config: DeploymentConfig, repo_root: Path) -> list[Path]:
    """``dist/grafana/whisper-dashboard.json``, the dashboard the observability stack provisions."""
    return [write_dashboard(config, repo_root / "dist" / "grafana" / "whisper-dashboard.json")]


FAILED_SUFFIX = ".failed"
"""A run whose gates fail leaves its assembly in ``<outdir>.failed`` for inspection, never in ``<outdir>``."""

EXTRA_OUTPUTS: list[Callable[[DeploymentConfig, Path], list[Path]]] = [write_dist, _write_dashboard]
"""Hooks run after a successful synthesis: ``hook(config, repo_root) -> written files``. The
Kubernetes charts add one here that writes ``dist/k8s/*.yaml``; the files are listed in the summary."""


def resource_families(template: dict) -> Counter[str]:
    """Resource counts by service, e.g. ``{"AWS::EC2": 31, "AWS::IAM": 9, "Custom::AWSCDK-EKS-HelmChart": 1}``."""
    return Counter("::".join(r["Type"].split("::")[:2]) for r in template.get("Resources", {}).values())


def instance_groups(template: dict) -> list[dict]:
    """``InstanceGroups`` of every ``AWS::SageMaker::Cluster`` in ``template``."""
    return [
        group
        for resource in template.get("Resources", {}).values()
        if resource["Type"] == "AWS::SageMaker::Cluster"
        for group in resource["Properties"].get("InstanceGroups", [])
    ]


def instance_group_lines(config: DeploymentConfig, groups: list[dict]) -> list[str]:
    """The instance-group table of the summary (``groups``: ``InstanceGroups`` of the templates), with notes.

    Columns: name, instance type (a list: ``a > b``, first preferred), GPU, arch, count, threads/core,
    MIG profile (``-``: whole GPUs) and serving engine, each as wide as its widest cell; under it, why
    Karpenter-managed groups show count 0.
    """
    by_name = {group.name: group for group in config.gpu_groups}
    by_name.update({spot_group_name(group): group for group in spot_groups(config)})
    rows = [["name", "instance type", "GPU", "arch", "count", "threads/core", "MIG", "serving engine"]]
    for group in groups:
        spec = by_name[group["InstanceGroupName"]]
        types = group.get("InstanceType") or " > ".join(group["InstanceRequirements"]["InstanceTypes"])
        if "Spot" in group.get("CapacityRequirements", {}):
            types += " (Spot)"
        rows.append([group["InstanceGroupName"], types, spec.gpu.name, spec.arch, str(group["InstanceCount"]),
                     str(group.get("ThreadsPerCore", "-")), spec.mig_profile or "-", spec.serving_engine])  # fmt: skip
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    right = {4, 5}  # count, threads/core
    cells = [[c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))]
             for row in rows]  # fmt: skip
    lines = ["  " + " ".join(row).rstrip() for row in cells]
    if config.cluster.node_autoscaling and any(group["InstanceCount"] == 0 for group in groups):
        lines.append(
            "  count 0: cluster.node_autoscaling is on, so HyperPod's Karpenter owns these groups; they start at 0 "
            "nodes (HyperPod's rule) and Karpenter adds nodes as serving and bulk pods need them"
        )
    return lines


def print_summary(config: DeploymentConfig, templates: dict[str, Path], extra: list[Path]) -> None:
    """One-screen summary: templates, resources per stack, HyperPod instance groups."""
    print("Templates:")
    for name, path in templates.items():
        print(f"  {name:<32} {path}")
    print("\nResources per stack (by service):")
    groups: list[dict] = []
    for name, path in templates.items():
        template = json.loads(path.read_text(encoding="utf-8"))
        families = resource_families(template)
        listing = ", ".join(f"{family.removeprefix('AWS::')} {count}" for family, count in sorted(families.items()))
        print(f"  {name} ({sum(families.values())}): {listing}")
        groups.extend(instance_groups(template))
    print(f"\nHyperPod instance groups ({len(groups)}):")
    print("\n".join(instance_group_lines(config, groups)))
    if extra:
        print(f"\nOther outputs ({len(extra)}):")
    for path in extra:
        print(f"  wrote {path}")


OIDC_PROVIDER_TYPE = "Custom::AWSCDKOpenIdConnectProvider"
"""The resource aws-cdk-lib's deprecated ``aws_eks_v2.OpenIdConnectProvider`` synthesizes."""


def synthesis_notes(templates: dict[str, Path]) -> list[str]:
    """What the synthesis printed that is not the config's doing: the OIDC provider's deprecation warning."""
    types = {
        resource["Type"]
        for path in templates.values()
        for resource in json.loads(path.read_text(encoding="utf-8")).get("Resources", {}).values()
    }
    if OIDC_PROVIDER_TYPE not in types:
        return []
    return [
        "the '[WARNING] aws-cdk-lib.aws_eks_v2.OpenIdConnectProvider is deprecated' printed above comes from "
        "aws-cdk-lib (the cluster's IAM OIDC provider for IRSA), not from your config; nothing to do. It stays on "
        "that construct on purpose: its replacement, OidcProviderNative (cdk.json "
        "@aws-cdk/aws-eks:useNativeOidcProvider), would replace the provider of a deployed cluster, which fails "
        "with EntityAlreadyExists (docs/cdk-flags.md)"
    ]


def print_warnings(warnings: list[str]) -> None:
    """``Warnings (n):`` and one line each (:func:`settings.advisories.config_warnings`); nothing when none."""
    if warnings:
        print(f"\nWarnings ({len(warnings)}):")
    for warning in warnings:
        print(f"  warning: {warning}")


def cluster_request_findings(templates: dict[str, Path]) -> list[Finding]:
    """Every HyperPod cluster of ``templates`` as a ``CreateCluster`` request (``stacks.cluster_request``)."""
    return [
        Finding("create-cluster", "botocore", name, problem, "error")
        for name, path in templates.items()
        for problem in template_problems(json.loads(path.read_text(encoding="utf-8")))
    ]


def _replace_dir(source: Path, target: Path) -> None:
    """Move ``source`` to ``target``, replacing what was there (stale templates of removed stacks go)."""
    if target.exists():
        shutil.rmtree(target)
    source.rename(target)


def _print_gates(
    findings: list[Finding],
    synth_error: str | None,
    templates: int,
    manifests: int,
    checkov: CheckovResult | None,
    ok: bool,
) -> None:
    """Every finding, then one verdict line per gate (``checkov``: its result, ``None`` when it did not run)."""
    for finding in findings:
        print(finding)
    if synth_error and not findings:
        print(f"synthesis failed: {synth_error}")
    print(
        "CreateCluster request check (botocore model): "
        + ("FAIL" if any(f.gate == "create-cluster" for f in findings) else "PASS")
    )
    scanned = f"{templates} templates" + (f" + {manifests} manifests (checkov)" if checkov else "")
    if checkov is not None:
        print(
            f"checkov: {checkov.passed} passed, {len(checkov.findings)} failed, {len(checkov.skipped)} skipped per resource"
        )
    print(
        f"Gates: cfn-lint + cdk-nag AwsSolutions + checkov over {scanned}: "
        f"{'PASS' if ok else f'FAIL ({len(findings)} findings)'}"
    )


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--config", type=Path, default=None, help="deployment config YAML (default: config/default.yaml)"
    )
    parser.add_argument("--outdir", type=Path, default=REPO_ROOT / "cdk.out", help="cloud assembly directory")
    return parser


def _print_report(config: DeploymentConfig, config_name: str, templates: dict[str, Path], extra: list[Path]) -> None:
    """Print what was synthesized: the config, the stacks and manifests, the synthesis notes, config warnings."""
    print(f"Config: {config_name} (project {config.project_name}, region {config.region})\n")
    print_summary(config, templates, extra)
    notes = synthesis_notes(templates)
    if notes:
        print(f"\nNotes ({len(notes)}):")
    for note in notes:
        print(f"  note: {note}")
    print_warnings(config_warnings(config))
    print()


def main(argv: list[str] | None = None) -> int:
    """Validate, synthesize into a staging directory, gate, then swap it into ``--outdir``; returns the exit status."""
    args = _parser().parse_args(argv)
    config_name = str(args.config) if args.config is not None else f"{DEFAULT_CONFIG_PATH} (embedded default)"

    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    # Synthesize next to the output directory and swap only when the gates pass: a failed run never
    # deletes the last good cloud assembly (the one `cdk deploy` would use).
    outdir = args.outdir.resolve()
    outdir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{outdir.name}.", dir=outdir.parent))
    failed_dir = outdir.with_name(outdir.name + FAILED_SUFFIX)

    synth_error: str | None = None
    try:
        synthesize(config, staging, args.config)
    except ValueError as err:
        shutil.rmtree(staging)
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Exception as err:  # noqa: BLE001 - jsii surfaces CDK errors as RuntimeError/JSIIError
        # cdk-nag findings make CDK's validation fail synthesis after the assembly is written
        synth_error = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if not (staging / "manifest.json").exists():
        shutil.rmtree(staging)
        print(f"error: synthesis of {config_name} failed: {synth_error}", file=sys.stderr)
        print(f"{outdir} was left as it was.", file=sys.stderr)
        return 1
    staged_templates = stack_templates(cx_api.CloudAssembly(str(staging)))
    findings: list[Finding] = read_nag_findings(staging) + run_cfn_lint(list(staged_templates.values()))
    findings += cluster_request_findings(staged_templates)
    ok = not findings and synth_error is None

    extra = [p for hook in EXTRA_OUTPUTS for p in hook(config, REPO_ROOT)] if ok else []
    manifests = [path for path in extra if path.name.endswith(".k8s.yaml")]
    checkov = run_checkov([*staged_templates.values(), *manifests]) if ok else None
    if checkov is not None:
        findings += checkov.findings
        ok = not findings
    final_dir = outdir if ok else failed_dir
    _replace_dir(staging, final_dir)
    templates = {name: final_dir / path.relative_to(staging) for name, path in staged_templates.items()}
    _print_report(config, config_name, templates, extra)
    _print_gates(findings, synth_error, len(templates), len(manifests), checkov, ok)
    if ok:
        if failed_dir.exists():
            shutil.rmtree(failed_dir)
    else:
        print(f"The failing assembly is in {failed_dir}; {outdir} (the last passing one, if any) was left as it was.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
