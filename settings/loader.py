"""Read a deployment config YAML file into a validated :class:`~settings.schema.DeploymentConfig`.

Docs: docs/contracts.md, "1. Deployment config".
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from settings.errors import ConfigError
from settings.schema import PATTERN_RULES, DeploymentConfig
from settings.yaml_errors import section_message, syntax_message
from settings.yaml_source import CoercedScalar, quoting_hint, read_yaml
from whisper_build.paths import REPO_ROOT

DEFAULT_CONFIG_PATH = REPO_ROOT / "config" / "default.yaml"
"""The embedded default: the real two-group (g5 + g6e) scenario users start from."""


def _field_path(location: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def _model_at(location: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that holds the last element of ``location`` (a ``ValidationError`` loc)."""
    model: type[BaseModel] = DeploymentConfig
    for part in location[:-1]:
        if isinstance(part, int):
            continue  # list index: stay on the list's item model
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *typing.get_args(annotation)]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model in ``annotation`` (``NetworkSettings``, ``list[GpuGroup]``, ``X | None``), else ``None``."""
    candidates = [annotation, *typing.get_args(annotation)]
    candidates += [inner for c in candidates for inner in typing.get_args(c)]
    return next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)


def _sections_of(name: str) -> list[str]:
    """The top-level sections that have a field ``name`` (``vpc_cidr`` → ``["network"]``)."""
    return [
        section
        for section, field in DeploymentConfig.model_fields.items()
        if (model := _nested_model(field.annotation)) is not None and name in model.model_fields
    ]


def _unknown_field_message(location: tuple[Any, ...]) -> str:
    """``unknown field; did you mean instance_type?`` with the fields of the enclosing section."""
    model = _model_at(location)
    name = str(location[-1]) if location else ""
    if model is None:
        return "unknown field (check the spelling against config/default.yaml)"
    sections = _sections_of(name) if model is DeploymentConfig else []
    if sections:
        under = " or ".join(f"`{section}:`" for section in sections)
        return f"unknown field at the top level; it belongs under {under}: indent it like the keys there"
    fields = sorted(model.model_fields)
    close = difflib.get_close_matches(name, fields, n=3, cutoff=0.6)
    if close:
        return f"unknown field; did you mean {' or '.join(close)}?"
    return f"unknown field; the fields here are: {', '.join(fields)}"


def _pattern_message(value: Any, pattern: str) -> str:
    rule = PATTERN_RULES.get(pattern)
    if rule is None:  # a new pattern without its sentence (tests/infra/config/test_settings.py catches this)
        return f"'{value}' does not have the expected form (regular expression {pattern})"
    return f"'{value}' must be {rule}"


def _quoting_message(location: tuple[Any, ...], value: Any, coerced: dict[tuple[str | int, ...], CoercedScalar]) -> str:
    """A "must be a string" message with what to quote (YAML turns unquoted ``1.30`` into 1.3)."""
    scalar = coerced.get(tuple(location))
    if scalar is None:
        return f"must be a string, not {value!r}; quote the value in YAML"
    return f"must be a string; {quoting_hint(scalar, location[-1])}"


def _shape_message(location: tuple[Any, ...], value: Any, kind: str) -> str:
    """``model_type`` / ``dict_type`` / ``list_type`` in layout words (:func:`settings.yaml_errors.section_message`)."""
    key = location[-1] if location else "(top level)"
    if kind != "list_type":
        return section_message(key, value)
    model = _model_at(location)
    field = model.model_fields.get(str(key)) if model is not None else None
    entries = field is not None and _nested_model(field.annotation) is not None
    return section_message(key, value, "entries" if entries else "list")


def parse_config(
    data: Any,
    source: str = "<config>",
    coerced: dict[tuple[str | int, ...], CoercedScalar] | None = None,
    lines: dict[tuple[str | int, ...], int] | None = None,
) -> DeploymentConfig:
    """Validate already-parsed YAML data.

    Args:
        data: The mapping read from YAML.
        source: Where it came from, used in error messages.
        coerced: Unquoted scalars YAML read as numbers/booleans, by location
            (:func:`settings.yaml_source.read_yaml`): a "valid string" error there says what to quote.
        lines: 1-based line of each key, by location: layout errors and unknown fields name it.

    Raises:
        ConfigError: one line per problem, each ``<field path>: <reason>``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"invalid deployment config {source}: the top level must be a mapping of settings")
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as err:
        out = []
        for problem in err.errors():
            message = problem["msg"].removeprefix("Value error, ")
            if problem["type"] == "missing":
                message = "required field is missing"
            elif problem["type"] == "extra_forbidden":
                message = _unknown_field_message(problem["loc"])
            elif problem["type"] == "string_pattern_mismatch":
                message = _pattern_message(problem["input"], problem["ctx"]["pattern"])
            elif problem["type"] == "string_type" and problem["loc"] and not isinstance(problem["input"], str):
                message = _quoting_message(problem["loc"], problem["input"], coerced or {})
            elif problem["type"] in {"model_type", "dict_type", "list_type"}:
                message = _shape_message(problem["loc"], problem["input"], problem["type"])
            line = (lines or {}).get(tuple(problem["loc"]))
            if line is not None and problem["type"] in {"model_type", "dict_type", "list_type", "extra_forbidden"}:
                message += f" (line {line})"
            path = _field_path(problem["loc"])
            named, _, reason = message.partition(": ")
            if reason and (not problem["loc"] or named.startswith(f"{path}.")):
                # cross-field rules name their own field: "gpu_groups.0.max_replicas: <reason>"
                path, message = named, reason
            out.append(f"  {path}: {message}")
        raise ConfigError(f"invalid deployment config {source}:\n" + "\n".join(out)) from None


def _missing_file_hint(path: Path) -> str:
    """``; did you mean config/examples/bulk.yaml?`` for a near name beside it, else how to start a config."""
    siblings = sorted(p.name for p in path.parent.glob("*.y*ml")) if path.parent.is_dir() else []
    close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {path.parent / close[0]}?"
    default = DEFAULT_CONFIG_PATH.relative_to(DEFAULT_CONFIG_PATH.parents[1])
    return f"; start from a copy: cp {default} {path} (docs/deploy.md, Prerequisites, 'The config')"


def load_config(path: str | Path | None = None) -> DeploymentConfig:
    """Load and validate a deployment config.

    Args:
        path: YAML file; ``None`` means the embedded default ``config/default.yaml``.

    Raises:
        ConfigError: the file is missing, is not valid YAML, repeats a key in one mapping, or fails validation.
    """
    config_path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = config_path.read_text(encoding="utf-8")
    except OSError as err:
        hint = ""
        if isinstance(err, FileNotFoundError):
            hint = _missing_file_hint(config_path)
        raise ConfigError(f"cannot read deployment config {config_path}: {err.strerror}{hint}") from None
    try:
        document = read_yaml(text, str(config_path))
    except yaml.YAMLError as err:
        raise ConfigError(syntax_message(err, config_path, text)) from None
    return parse_config(document.data, str(config_path), document.coerced, document.lines)
