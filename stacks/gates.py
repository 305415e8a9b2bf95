"""Quality gates over a synthesized cloud assembly: cfn-lint, cdk-nag (AwsSolutions) and checkov.

Both gates cover every stack in the assembly, including stacks inside nested ``Stage`` assemblies
(CDK Pipelines), so a stack added later is gated without touching this module.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import cx_api

from whisper_build.paths import REPO_ROOT

CFN_LINT_CONFIG = REPO_ROOT / ".cfnlintrc"
"""cfn-lint settings; the only place a rule may be ignored, each with its reason."""
NAG_REPORT = "policy-validation-report.json"
"""File CDK's policy validation (cdk-nag 3) writes into the assembly directory when the context
flag ``@aws-cdk/core:validationReportJson`` is true (set in ``cdk.json``)."""


@dataclass(frozen=True)
class Finding:
    """One gate finding.

    Attributes:
        gate: ``cfn-lint`` or ``cdk-nag``.
        rule: Rule id, e.g. ``W3005`` or ``AwsSolutions-IAM5[Resource::*]``.
        location: ``<template file>:<line>`` (cfn-lint) or the construct path (cdk-nag).
        message: What is wrong.
        level: ``error``/``warning``/``informational`` (cfn-lint) or the cdk-nag severity.
    """

    gate: str
    rule: str
    location: str
    message: str
    level: str

    def __str__(self) -> str:
        return f"[{self.gate}] {self.level} {self.rule} at {self.location}: {self.message}"


def stack_templates(assembly: cx_api.CloudAssembly) -> dict[str, Path]:
    """Every stack of ``assembly`` (nested stage assemblies included): display name → template path."""
    return {stack.hierarchical_id: Path(stack.template_full_path) for stack in assembly.stacks_recursively}


def cfn_lint_executable() -> str:
    """Path of ``cfn-lint`` next to the running interpreter (the venv), else from ``PATH``.

    Raises:
        FileNotFoundError: cfn-lint is not installed (the infrastructure set: ``make synth`` installs it).
    """
    beside = Path(sys.executable).with_name("cfn-lint")
    if beside.exists():
        return str(beside)
    found = shutil.which("cfn-lint")
    if found is None:
        raise FileNotFoundError("cfn-lint not found: make synth installs it (the infrastructure set, in .venv)")
    return found


def run_cfn_lint(templates: list[Path], config_file: Path = CFN_LINT_CONFIG) -> list[Finding]:
    """Lint ``templates`` with cfn-lint (all rules, errors and warnings and informational).

    Returns:
        Findings not ignored by ``config_file``; empty means the gate passes.

    Raises:
        RuntimeError: cfn-lint itself failed (bad config, crash), with its output.
    """
    if not templates:
        return []
    command = [cfn_lint_executable(), "--format", "json", "--config-file", str(config_file), *map(str, templates)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    # cfn-lint exit codes are a bit mask of error(2)/warning(4)/informational(8); 1 = tool failure.
    if result.returncode & 1 or not result.stdout.strip():
        if result.returncode == 0:
            return []
        raise RuntimeError(f"cfn-lint failed (exit {result.returncode}): {result.stderr.strip() or result.stdout}")
    return [
        Finding(
            gate="cfn-lint",
            rule=item["Rule"]["Id"],
            location=f"{Path(item['Filename']).name}:{item['Location']['Start']['LineNumber']}",
            message=item["Message"],
            level=item["Level"].lower(),
        )
        for item in json.loads(result.stdout)
    ]


def read_nag_findings(assembly_dir: Path) -> list[Finding]:
    """Unacknowledged cdk-nag findings from the assembly's policy-validation report.

    Raises:
        FileNotFoundError: no report (synthesis did not run the validation plugins, e.g. the
            ``@aws-cdk/core:validationReportJson`` flag is missing from the context).
    """
    report_path = Path(assembly_dir) / NAG_REPORT
    report = json.loads(report_path.read_text(encoding="utf-8"))
    findings = []
    for plugin in report.get("pluginReports", []):
        for violation in plugin.get("violations", []):
            for resource in violation.get("violatingResources", []):
                findings.append(
                    Finding(
                        gate="cdk-nag",
                        rule=violation["ruleName"],
                        location=resource["constructPath"],
                        message=violation.get("description", ""),
                        level=violation.get("severity", "error"),
                    )
                )
    return findings


CHECKOV_VENV = REPO_ROOT / ".venv-checkov"
"""checkov's own virtual environment (``make checkov``): its pinned dependencies (boto3, packaging…)
clash with the install sets of ``.venv`` (requirements/checkov.txt), so it cannot share it."""
CHECKOV_FRAMEWORKS = ("cloudformation", "kubernetes")


@dataclass(frozen=True)
class CheckovResult:
    """What checkov reported over the files it was given.

    Attributes:
        findings: Failed checks (the gate passes when empty).
        passed: Number of passed checks.
        skipped: Skipped checks as ``(check id, resource, reason)``, from :data:`stacks.checkov_skips.GLOBAL_SKIPS`
            are not listed (checkov does not report them), per-resource skips are.
    """

    findings: list[Finding]
    passed: int
    skipped: list[tuple[str, str, str]]


def checkov_executable() -> str:
    """``.venv-checkov/bin/checkov``, else ``checkov`` from ``PATH``.

    Raises:
        FileNotFoundError: checkov is not installed (``make checkov``).
    """
    beside = CHECKOV_VENV / "bin" / "checkov"
    if beside.exists():
        return str(beside)
    found = shutil.which("checkov")
    if found is None:
        raise FileNotFoundError(f"checkov not found; run `make checkov` (installs it into {CHECKOV_VENV.name}/)")
    return found


def run_checkov(files: list[Path], global_skips: dict[str, str] | None = None) -> CheckovResult:
    """Scan CloudFormation templates and Kubernetes manifests with checkov (offline).

    Args:
        files: ``*.template.json`` and ``*.k8s.yaml`` files.
        global_skips: Check id → reason, skipped everywhere (default :data:`stacks.checkov_skips.GLOBAL_SKIPS`).

    Returns:
        Failed checks as findings, the passed count and the per-resource skips with their reasons.

    Raises:
        RuntimeError: checkov itself failed (crash, unreadable output), with its output.
    """
    from stacks.checkov_skips import GLOBAL_SKIPS

    skips = GLOBAL_SKIPS if global_skips is None else global_skips
    if not files:
        return CheckovResult([], 0, [])
    command = [checkov_executable(), "--framework", *CHECKOV_FRAMEWORKS, "--output", "json", "--compact"]
    command += ["--skip-download"]  # offline: no policy/guideline download from the vendor's API
    if skips:
        command += ["--skip-check", ",".join(sorted(skips))]
    for file in files:
        command += ["--file", str(file)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    try:
        reports = json.loads(result.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"checkov failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}") from None
    findings: list[Finding] = []
    passed = 0
    skipped: list[tuple[str, str, str]] = []
    for report in reports if isinstance(reports, list) else [reports]:
        results = report.get("results", {})
        passed += len(results.get("passed_checks", []))
        for check in results.get("failed_checks", []):
            findings.append(
                Finding(
                    gate="checkov",
                    rule=check["check_id"],
                    location=f"{Path(check['file_path']).name}:{check['resource']}",
                    message=check["check_name"],
                    level=(check.get("severity") or "error").lower(),
                )
            )
        for check in results.get("skipped_checks", []):
            reason = (check.get("check_result") or {}).get("suppress_comment", "")
            skipped.append((check["check_id"], f"{Path(check['file_path']).name}:{check['resource']}", reason))
    return CheckovResult(findings, passed, skipped)


@dataclass(frozen=True)
class Acknowledgement:
    """One explained exception to a gate.

    Attributes:
        gate: ``cfn-lint``, ``cdk-nag`` or ``checkov``.
        rule: Rule / check id (cdk-nag ids include the finding, e.g. ``AwsSolutions-IAM5[Resource::*]``).
        where: Construct path, ``<template>:<resource>``, or ``everywhere``.
        reason: The reason written next to it.
    """

    gate: str
    rule: str
    where: str
    reason: str


def nag_acknowledgements(assembly_dir: Path) -> list[Acknowledgement]:
    """cdk-nag (``AwsSolutions-*``) acknowledgements recorded in the assembly's ``*.metadata.json``.

    CDK records an acknowledgement on the construct it was made on (``aws:cdk:acknowledged-rules``
    metadata); each is listed once, on the highest construct path that carries it.
    """
    found: list[Acknowledgement] = []
    for file in sorted(Path(assembly_dir).glob("*.metadata.json")):
        metadata = json.loads(file.read_text(encoding="utf-8"))
        for path in sorted(metadata, key=lambda p: (p.count("/"), p)):
            for entry in metadata[path]:
                if entry.get("type") != "aws:cdk:acknowledged-rules":
                    continue
                for rule, reason in entry["data"].items():
                    rule_id = rule.split("::", 1)[-1]  # "Annotation::AwsSolutions-S1"
                    if not rule_id.startswith("AwsSolutions-"):
                        continue  # aws-cdk-lib's own template-validation acknowledgements
                    inherited = any(
                        a.rule == rule_id and a.reason == reason and path.startswith(a.where + "/") for a in found
                    )
                    if not inherited:
                        found.append(Acknowledgement("cdk-nag", rule_id, path, reason))
    return found


def cfn_lint_ignores(config_file: Path = CFN_LINT_CONFIG) -> list[str]:
    """Rule ids ignored in ``.cfnlintrc`` (their reasons are the comments above them there)."""
    import yaml

    return list(yaml.safe_load(config_file.read_text(encoding="utf-8")).get("ignore_checks", []))
