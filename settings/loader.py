"""Read a deployment config YAML file into a validated :class:`~settings.schema.DeploymentConfig`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from settings.errors import ConfigError
from settings.schema import DeploymentConfig

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config" / "default.yaml"
"""The embedded default: the real two-group (g5 + g6e) scenario users start from."""


def _field_path(location: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in location) or "(top level)"


def parse_config(data: Any, source: str = "<config>") -> DeploymentConfig:
    """Validate already-parsed YAML data.

    Args:
        data: The mapping read from YAML.
        source: Where it came from, used in error messages.

    Raises:
        ConfigError: one line per problem, each ``<field path>: <reason>``.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"invalid deployment config {source}: the top level must be a mapping of settings")
    try:
        return DeploymentConfig.model_validate(data)
    except ValidationError as err:
        lines = []
        for problem in err.errors():
            message = problem["msg"].removeprefix("Value error, ")
            if problem["type"] == "missing":
                message = "required field is missing"
            elif problem["type"] == "extra_forbidden":
                message = "unknown field (check the spelling against config/default.yaml)"
            path = _field_path(problem["loc"])
            if not problem["loc"] and ": " in message:
                # cross-field rules name their own field: "gpu_groups.0.max_replicas: <reason>"
                path, message = message.split(": ", 1)
            lines.append(f"  {path}: {message}")
        raise ConfigError(f"invalid deployment config {source}:\n" + "\n".join(lines)) from None


def load_config(path: str | Path | None = None) -> DeploymentConfig:
    """Load and validate a deployment config.

    Args:
        path: YAML file; ``None`` means the embedded default ``config/default.yaml``.

    Raises:
        ConfigError: the file is missing, is not valid YAML, or fails validation.
    """
    config_path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        text = config_path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read deployment config {config_path}: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"deployment config {config_path} is not valid YAML: {err}") from None
    return parse_config(data, str(config_path))
