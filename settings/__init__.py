"""Typed deployment settings: YAML (``config/default.yaml``) → :class:`DeploymentConfig` → stacks and charts.

Config flows one way. Stacks, charts, the engine build and the observability code receive a
:class:`DeploymentConfig` (or parts of it) as explicit arguments and never read YAML or the
environment themselves.
Docs: docs/contracts.md, "1. Deployment config".
"""

from settings.errors import ConfigError
from settings.gpu_catalog import GpuSpec, InstanceSpec
from settings.loader import DEFAULT_CONFIG_PATH, load_config, parse_config
from settings.schema import DeploymentConfig, GpuGroup

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "ConfigError",
    "DeploymentConfig",
    "GpuGroup",
    "GpuSpec",
    "InstanceSpec",
    "load_config",
    "parse_config",
]
