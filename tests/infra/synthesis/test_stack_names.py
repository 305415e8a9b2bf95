"""The synthesized assembly holds exactly the stacks ``settings.names.stacks`` names, for every shipped config.

``make deploy`` waits on and ``make destroy`` deletes and checks ``names.stacks(config)``; a stack the
app creates outside that list would be neither. Reuses the per-process synthesis cache
(``tests/support/cdk_assembly.py``), which the other stack tests fill with the same configs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cdk_assembly import REPO_ROOT, synthesized

from settings import names

pytestmark = pytest.mark.slow

SHIPPED = [REPO_ROOT / "config" / "default.yaml", *sorted((REPO_ROOT / "config" / "examples").glob("*.yaml"))]


@pytest.mark.parametrize("config_path", SHIPPED, ids=lambda path: path.stem)
def test_the_assembly_holds_the_stacks_settings_names_lists(config_path: Path) -> None:
    result = synthesized(config_path)
    assert result.stacks is not None, result.error
    config = result.config
    expected = {names.stack_name(config, stack) for stack in names.stacks(config)}
    top = {stack_id for stack_id in result.templates if "/" not in stack_id}
    staged = {stack_id.rsplit("/", 1)[-1] for stack_id in result.templates if "/" in stack_id}
    if config.pipeline.enabled:
        # the pipeline deploys the same stacks inside its stage
        assert (top, staged) == ({names.stack_name(config, "Pipeline")}, expected)
    else:
        assert (top, staged) == (expected, set())
    assert tuple(stack.node.id for stack in result.stacks.built()) == tuple(
        names.stack_name(config, stack) for stack in names.stacks(config)
    )
