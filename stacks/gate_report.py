"""Every explained exception of the three gates, counted and grouped by reason (docs/deploy.md, Security).

``python -m stacks.gate_report [--assembly cdk.out] [--manifests dist/k8s]`` prints the Markdown
table docs/deploy.md carries, from the assembly and manifests ``make synth`` wrote.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from stacks.checkov_skips import GLOBAL_SKIPS
from stacks.gates import Acknowledgement, cfn_lint_ignores, nag_acknowledgements, run_checkov, stack_templates

CFN_LINT_REASONS = {
    "W3005": "aws-cdk-lib renders construct dependencies as DependsOn even where a Ref/GetAtt already orders "
    "the resources (its own Lambdas on their roles); redundant, no effect, not removable (.cfnlintrc)",
}
"""The reasons of ``.cfnlintrc`` (the comments above each ignored rule there), for the report."""


def explained_exceptions(assembly_dir: Path, manifests: list[Path]) -> list[Acknowledgement]:
    """cfn-lint ignores, cdk-nag acknowledgements, checkov skips (global and per resource).

    Raises:
        KeyError: a rule ignored in ``.cfnlintrc`` has no entry in :data:`CFN_LINT_REASONS`.
    """
    from aws_cdk import cx_api

    templates = list(stack_templates(cx_api.CloudAssembly(str(assembly_dir))).values())
    found = [Acknowledgement("cfn-lint", rule, "everywhere", CFN_LINT_REASONS[rule]) for rule in cfn_lint_ignores()]
    found += nag_acknowledgements(assembly_dir)
    found += [Acknowledgement("checkov", check, "everywhere", reason) for check, reason in GLOBAL_SKIPS.items()]
    found += [
        Acknowledgement("checkov", check, where, reason)
        for check, where, reason in run_checkov([*templates, *manifests]).skipped
    ]
    return found


def markdown(found: list[Acknowledgement]) -> str:
    """Counts per gate, then one row per (gate, rule family, reason) with how many resources it covers."""
    per_gate = Counter(a.gate for a in found)
    lines = [
        "Explained exceptions: " + ", ".join(f"{gate} {per_gate[gate]}" for gate in ("cfn-lint", "cdk-nag", "checkov")),
        "",
        "| gate | rule | count | reason |",
        "|---|---|---|---|",
    ]
    rows = Counter((a.gate, a.rule.split("[")[0], a.reason) for a in found)
    for (gate, rule, reason), count in sorted(rows.items()):
        lines.append(f"| {gate} | {rule} | {count} | {reason.replace('|', '/')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the report; exit 0."""
    parser = argparse.ArgumentParser(prog="python -m stacks.gate_report", description=__doc__.splitlines()[0])
    parser.add_argument("--assembly", type=Path, default=Path("cdk.out"))
    parser.add_argument("--manifests", type=Path, default=Path("dist") / "k8s")
    args = parser.parse_args(argv)
    print(markdown(explained_exceptions(args.assembly, sorted(args.manifests.glob("*.k8s.yaml")))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
