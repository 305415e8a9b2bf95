"""Synthesize the CDK app once per config per test session (synthesis takes tens of seconds on 2 cores).

``synthesized(config_path)`` is cached for the whole pytest process, so every test module that asks
for the same config shares one cloud assembly, written to a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from whisper_build.paths import REPO_ROOT

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import cx_api  # noqa: E402
from aws_cdk.assertions import Template  # noqa: E402

from settings import DeploymentConfig, load_config  # noqa: E402
from stacks.assembly import synthesize  # noqa: E402
from stacks.gates import stack_templates  # noqa: E402
from stacks.whisper_app import WhisperStacks  # noqa: E402

PIPELINE_CONFIG = REPO_ROOT / "config" / "examples" / "pipeline.yaml"
"""Three groups + a pipeline source: the app synthesizes the pipeline stack with the stacks inside a
stage (gated in tests/infra/synthesis/test_pipeline_stack.py; stage stack ids differ from the plain ones)."""
CONFIGS = {
    "default": REPO_ROOT / "config" / "default.yaml",
    "three-groups": REPO_ROOT / "config" / "examples" / "three-groups.yaml",
    "mig": REPO_ROOT / "config" / "examples" / "mig.yaml",
    "inference-operator": REPO_ROOT / "config" / "examples" / "inference-operator.yaml",
    "fine-tuned-torch": REPO_ROOT / "config" / "examples" / "fine-tuned-torch.yaml",
    "bulk": REPO_ROOT / "config" / "examples" / "bulk.yaml",
    "capacity": REPO_ROOT / "config" / "examples" / "capacity.yaml",
}


@dataclass(frozen=True)
class Synthesized:
    """One synthesized config: its assembly directory, templates by stack id, and any synthesis error
    (cdk-nag violations make synthesis raise; the report is still written)."""

    config: DeploymentConfig
    outdir: Path
    templates: dict[str, Path]
    stacks: WhisperStacks | None
    error: str | None

    def template_json(self, stack_id: str) -> dict[str, Any]:
        return json.loads(self.templates[stack_id].read_text(encoding="utf-8"))

    def template(self, stack_id: str) -> Template:
        return Template.from_json(self.template_json(stack_id))

    def all_templates(self) -> dict[str, dict[str, Any]]:
        return {name: json.loads(path.read_text(encoding="utf-8")) for name, path in self.templates.items()}


@functools.cache
def synthesized(config_path: Path) -> Synthesized:
    """Synthesize ``config_path`` into a fresh temporary directory (cached per process)."""
    config = load_config(config_path)
    outdir = Path(tempfile.mkdtemp(prefix="whisper-cdk-"))
    atexit.register(shutil.rmtree, outdir, True)
    stacks: WhisperStacks | None = None
    error = None
    try:
        _, stacks = synthesize(config, outdir, config_path)
    except RuntimeError as err:
        error = str(err)
    templates = stack_templates(cx_api.CloudAssembly(str(outdir)))
    return Synthesized(config=config, outdir=outdir, templates=templates, stacks=stacks, error=error)
