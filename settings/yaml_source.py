"""Read a config's YAML text keeping what ``yaml.safe_load`` throws away.

PyYAML's ``safe_load`` keeps the last of two equal keys in one mapping without a word, so a second
``cluster:`` block silently replaces the first (a narrowed ``public_access_cidrs`` back to the
default). It also turns unquoted ``1.30`` into the float ``1.3`` and ``123456789012`` into an int,
after which the config error can only say "valid string". :func:`read_yaml` composes the node tree
first, refuses every duplicate key with both line numbers, and remembers the source text of each
scalar YAML resolved to a number or a boolean, so the error can say what to quote.
Docs: docs/contracts.md, "1. Deployment config".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from settings.errors import ConfigError

Path = tuple[str | int, ...]
"""Location of a value: mapping keys and list indexes from the top, like a pydantic error's ``loc``."""

_NON_STRING_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float", "tag:yaml.org,2002:bool"}
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class CoercedScalar:
    """An unquoted scalar YAML read as a number or boolean: its ``text`` as written and 1-based ``line``."""

    text: str
    line: int


@dataclass(frozen=True)
class YamlDocument:
    """The parsed data; by location, the scalars YAML coerced away from strings and each key's 1-based line."""

    data: Any
    coerced: dict[Path, CoercedScalar] = field(default_factory=dict)
    lines: dict[Path, int] = field(default_factory=dict)


def dotted(path: Path) -> str:
    """``("gpu_groups", 0, "name")`` → ``gpu_groups.0.name``; the empty path is ``(top level)``."""
    return ".".join(str(part) for part in path) or "(top level)"


def _walk(
    node: yaml.Node, path: Path, duplicates: list[str], coerced: dict[Path, CoercedScalar], lines: dict[Path, int]
) -> None:
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode):
        if node.tag in _NON_STRING_TAGS and node.style is None:
            coerced[path] = CoercedScalar(node.value, node.start_mark.line + 1)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*path, index), duplicates, coerced, lines)
    elif isinstance(node, yaml.MappingNode):
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key, line = key_node.value, key_node.start_mark.line + 1
            if key in first_line:
                duplicates.append(
                    f"{dotted((*path, key))}: duplicate key at line {line}, first at line {first_line[key]}; "
                    "YAML would silently keep only the last one: merge the two into one"
                )
            else:
                first_line[key] = line
            lines.setdefault((*path, key), line)
            _walk(value_node, (*path, key), duplicates, coerced, lines)


def read_yaml(text: str, source: str) -> YamlDocument:
    """Parse ``text`` (one YAML document) with the safe loader.

    Args:
        text: The YAML text.
        source: The file name, for messages.

    Returns:
        The data (what ``yaml.safe_load`` returns), the coerced scalars and the key lines by location.

    Raises:
        ConfigError: a key appears twice in one mapping, at any depth: one line per duplicate with
            its dotted path and both line numbers.
        yaml.YAMLError: the text is not valid YAML (the caller formats the position).
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(None)
        duplicates: list[str] = []
        coerced: dict[Path, CoercedScalar] = {}
        lines: dict[Path, int] = {}
        _walk(node, (), duplicates, coerced, lines)
        if duplicates:
            raise ConfigError(f"invalid deployment config {source}:\n" + "\n".join(f"  {line}" for line in duplicates))
        return YamlDocument(loader.construct_document(node), coerced, lines)
    finally:
        loader.dispose()


def quoting_hint(scalar: CoercedScalar, key: str | int) -> str:
    """``YAML read the unquoted 1.30 (line 36) as a number; quote it: kubernetes_version: "1.30"``."""
    kind = "a boolean" if scalar.text.lower() in {"yes", "no", "on", "off", "true", "false", "y", "n"} else "a number"
    return f'YAML read the unquoted {scalar.text} (line {scalar.line}) as {kind}; quote it: {key}: "{scalar.text}"'
