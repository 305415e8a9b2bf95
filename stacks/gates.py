"""Quality gates over a synthesized cloud assembly: cfn-lint and cdk-nag (AwsSolutions).

Both gates cover every stack in the assembly, including stacks inside nested ``Stage`` assemblies
(CDK Pipelines), so a stack added later is gated without touching this module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import cx_api

REPO_ROOT = Path(__file__).resolve().parent.parent
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
        FileNotFoundError: cfn-lint is not installed (``pip install -r requirements-dev.txt``).
    """
    beside = Path(sys.executable).with_name("cfn-lint")
    if beside.exists():
        return str(beside)
    found = shutil.which("cfn-lint")
    if found is None:
        raise FileNotFoundError(
            "cfn-lint not found; install the dev requirements (pip install -r requirements-dev.txt)"
        )
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
