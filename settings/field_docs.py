"""Markdown tables of config fields, generated from the pydantic schema (docs stay in step with it).

``python -m settings.field_docs`` prints the ``gpu_groups`` table that docs/deploy.md embeds;
``tests/infra/config/test_field_docs.py`` fails when the two differ.
"""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{value}`" for value in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "null"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        if isinstance(item, Ge):
            parts.append(f"≥ {item.ge}")
        elif isinstance(item, Le):
            parts.append(f"≤ {item.le}")
        elif isinstance(item, MinLen):
            parts.append(f"length ≥ {item.min_length}")
        elif isinstance(item, MaxLen):
            parts.append(f"length ≤ {item.max_length}")
    return f" ({', '.join(parts)})" if parts else ""


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    if field.default is None:
        return "none"
    if field.default is PydanticUndefined:
        return "derived"  # a default_factory: filled from other fields
    return f"`{field.default}`"


def markdown_table(model: type[BaseModel]) -> str:
    """``| field | type | default | meaning |`` rows for every field of ``model``, in declaration order.

    Meaning is the field's ``description``; type includes numeric and length bounds.
    """
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        description = (field.description or "").replace("|", "\\|")
        rows.append(
            f"| `{name}` | {_type_name(field.annotation)}{_bounds(field)} | {_default(field)} | {description} |"
        )
    return "\n".join(rows)


def main() -> int:
    """Print the ``gpu_groups`` field table."""
    from settings.schema import GpuGroup  # noqa: PLC0415 (keep import-time light for the helpers)

    print(markdown_table(GpuGroup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
