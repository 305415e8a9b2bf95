"""The programs ``make deploy`` runs, checked before step 1 (docs/deploy.md, Prerequisites).

Each check runs the program's own version command from ``PATH`` and returns one sentence per
problem saying what to install. Minimum versions and their sources:

* Node.js ≥ 22 (:data:`MIN_NODE_MAJOR`): the jsii runtime under aws-cdk-lib supports "^22.0.0" and
  "^24.0.0" and on Node.js 20 prints "Node 20 is end-of-life and not supported anymore by this
  software since 2026-10-30" (the pinned jsii, on Node.js 20).
* AWS CLI v2: ``aws eks update-kubeconfig`` writes ``client.authentication.k8s.io/v1beta1``
  exec entries, which the AWS CLI v1 does not (EKS user guide, "Connect kubectl to an EKS cluster").
* helm ≥ 3.8: first release with OCI registry support on by default (Helm docs, "Use OCI-based
  registries"), which ``helm push`` to ECR needs.
* kubectl within one minor version of ``cluster.kubernetes_version`` (Kubernetes version-skew policy).
* git: the chart publish clones ``aws/sagemaker-hyperpod-cli``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Sequence

MIN_NODE_MAJOR = 22
MIN_HELM = (3, 8)
AWS_CLI_MAJOR = 2


def _version_output(argv: Sequence[str]) -> str | None:
    """Stdout + stderr of ``argv`` or ``None`` when it cannot be run."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return None
    return (done.stdout + done.stderr).strip()


def _numbers(text: str, pattern: str) -> tuple[int, ...] | None:
    match = re.search(pattern, text)
    return tuple(int(part) for part in match.groups()) if match else None


def check_node() -> list[str]:
    """Node.js ≥ 22 and ``npx`` (the CDK CLI runs through ``npx cdk``)."""
    problems = []
    if shutil.which("node") is None:
        problems.append(f"node not found on PATH: install Node.js >= {MIN_NODE_MAJOR} (https://nodejs.org)")
    else:
        version = _version_output(["node", "--version"]) or ""
        major = _numbers(version, r"v?(\d+)\.")
        if major is None or major[0] < MIN_NODE_MAJOR:
            problems.append(
                f"Node.js {version or '(unknown version)'} is too old: the AWS CDK CLI needs Node.js >= "
                f"{MIN_NODE_MAJOR}; install Node.js {MIN_NODE_MAJOR} or later"
            )
    if shutil.which("npx") is None:
        problems.append("npx not found on PATH: it comes with Node.js (npm); reinstall Node.js")
    return problems


def check_aws_cli() -> list[str]:
    """AWS CLI version 2."""
    if shutil.which("aws") is None:
        return ["aws not found on PATH: install the AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/)"]
    version = _version_output(["aws", "--version"]) or ""
    numbers = _numbers(version, r"aws-cli/(\d+)\.")
    if numbers is None or numbers[0] != AWS_CLI_MAJOR:
        return [f"AWS CLI '{version or 'unknown version'}' is not version 2: install the AWS CLI v2"]
    return []


def check_helm() -> list[str]:
    """Helm ≥ 3.8."""
    if shutil.which("helm") is None:
        return ["helm not found on PATH: install helm >= 3.8 (https://helm.sh/docs/intro/install/)"]
    version = _version_output(["helm", "version", "--short"]) or ""
    numbers = _numbers(version, r"v(\d+)\.(\d+)")
    if numbers is None or numbers < MIN_HELM:
        return [f"helm {version or '(unknown version)'} is too old: the chart publish needs helm >= 3.8 (OCI push)"]
    return []


def check_kubectl(kubernetes_version: str) -> list[str]:
    """Kubectl within one minor version of the cluster's Kubernetes version (e.g. ``"1.33"``)."""
    if shutil.which("kubectl") is None:
        return [f"kubectl not found on PATH: install kubectl {kubernetes_version} (±1 minor version)"]
    output = _version_output(["kubectl", "version", "--client", "-o", "json"]) or "{}"
    try:
        client = json.loads(output)["clientVersion"]
        have = (int(client["major"]), int(re.sub(r"\D", "", client["minor"])))
    except (ValueError, KeyError, TypeError):
        return [f"kubectl version unreadable ({output[:80]!r}): install kubectl {kubernetes_version}"]
    major, minor = (int(part) for part in kubernetes_version.split("."))
    if have[0] != major or abs(have[1] - minor) > 1:
        return [
            f"kubectl {have[0]}.{have[1]} is more than one minor version from the cluster's {kubernetes_version} "
            f"(cluster.kubernetes_version): install kubectl {kubernetes_version}"
        ]
    return []


def check_git() -> list[str]:
    """Git (the HyperPod chart publish clones the upstream repository)."""
    return [] if shutil.which("git") else ["git not found on PATH: install git (the HyperPod chart publish uses it)"]


def check_all(kubernetes_version: str) -> list[str]:
    """Every problem with the programs ``make deploy`` runs; empty when all are fine."""
    return [
        *check_node(),
        *check_aws_cli(),
        *check_kubectl(kubernetes_version),
        *check_helm(),
        *check_git(),
    ]


def describe(kubernetes_version: str, *, chart: bool = True) -> str:
    """What the checks above require, as one line (``--dry-run`` prints it instead of checking).

    Args:
        kubernetes_version: ``cluster.kubernetes_version``, e.g. ``"1.33"``.
        chart: include helm and git (the HyperPod chart publish of ``make deploy``).
    """
    major, minor = (int(part) for part in kubernetes_version.split("."))
    tools = [
        f"Node.js >= {MIN_NODE_MAJOR} with npx",
        f"AWS CLI v{AWS_CLI_MAJOR}",
        f"kubectl {major}.{minor - 1}-{major}.{minor + 1}",
    ]
    if chart:
        tools += [f"helm >= {MIN_HELM[0]}.{MIN_HELM[1]}", "git"]
    return ", ".join(tools)
