"""docs/deploy.md's gpu_groups table is the one generated from the schema (``python -m settings.field_docs``)."""

from __future__ import annotations

from settings.field_docs import markdown_table
from settings.schema import GpuGroup
from whisper_build.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs" / "deploy.md"


def test_docs_table_lists_every_gpu_group_field_as_the_schema_defines_it() -> None:
    table = markdown_table(GpuGroup)
    assert all(f"| `{name}` |" in table for name in GpuGroup.model_fields)
    assert table in DOCS.read_text(encoding="utf-8"), (
        "docs/deploy.md gpu_groups table is stale: paste `python -m settings.field_docs` output"
    )
