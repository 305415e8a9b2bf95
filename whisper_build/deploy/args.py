"""Arguments of ``python -m whisper_build.deploy`` (the ``make`` targets pass them: docs/deploy.md)."""

from __future__ import annotations

import argparse
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the deploy CLI."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.deploy",
        description="Deploy (or destroy) a whisper-hyperpod config end to end: capacity checks, CDK bootstrap, "
        "storage, HyperPod chart, stacks, kubectl access, serving image, engines, rollout, ready pods, then how to "
        "reach the endpoint.",
    )
    parser.add_argument(
        "action",
        choices=("deploy", "destroy", "env", "pods", "endpoint", "diff", "publish-ctranslate2"),
        help="env: print the config's names as shell exports; pods: why the serving pods are (not) ready; "
        "endpoint: wait for the load balancer's address and print how to reach it (the end of deploy); "
        "diff: cdk diff of every stack against what is deployed; publish-ctranslate2: convert the model to "
        "CTranslate2 and upload it for the groups with serving_engine: ctranslate2",
    )
    parser.add_argument("--config", type=Path, required=True, help="deployment config YAML (make: CONFIG=)")
    parser.add_argument("--dry-run", action="store_true", help="print every step and command; run nothing")
    parser.add_argument(
        "--purge",
        action="store_true",
        help="destroy: also delete what is retained: buckets, ECR repositories, KMS keys, secrets, log groups "
        "(irreversible)",
    )
    parser.add_argument(
        "--only", metavar="STEP", help="run one step, e.g. kubectl (make kubeconfig) or capacity (make capacity)"
    )
    parser.add_argument(
        "--approve",
        action="store_true",
        help="deploy: cdk deploy asks before every change (--require-approval any-change) instead of never",
    )
    return parser
