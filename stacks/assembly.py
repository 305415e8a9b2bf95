"""In-process synthesis of the whole app (used by ``scripts/synth.py``, the benchmark and the tests).

Produces the same cloud assembly as ``npx cdk synth``: same context (``cdk.json``), same stacks, same
cdk-nag plugin, but without spawning the CDK CLI.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import cx_api

from settings.schema import DeploymentConfig
from stacks.nag import enable_nag
from stacks.pipeline_stack import add_app
from stacks.whisper_app import WhisperStacks
from whisper_build.paths import REPO_ROOT

CDK_JSON = REPO_ROOT / "cdk.json"


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` block of ``cdk.json`` (feature flags), which the CDK CLI would pass to the app."""
    return dict(json.loads(CDK_JSON.read_text(encoding="utf-8")).get("context", {}))


def synthesize(
    config: DeploymentConfig, outdir: str | Path, config_path: str | Path | None = None
) -> tuple[cx_api.CloudAssembly, WhisperStacks]:
    """Build every stack for ``config`` and write the cloud assembly to ``outdir``.

    Returns:
        The cloud assembly (templates under ``outdir/<stack>.template.json``; cdk-nag findings in
        ``outdir/policy-validation-report.json``) and the stacks.

    Raises:
        ValueError: a setting the stacks cannot honour.
        RuntimeError: synthesis failed (e.g. a policy-validation plugin reported a violation that
            CDK treats as fatal); the message comes from CDK.
    """
    app = cdk.App(outdir=str(outdir), context=cdk_json_context())
    stacks = add_app(app, config, config_path=config_path)
    enable_nag(app)
    return app.synth(), stacks
