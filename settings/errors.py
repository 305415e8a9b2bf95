"""Errors raised while reading the deployment config. Docs: docs/contracts.md, "1. Deployment config"."""


class ConfigError(ValueError):
    """The deployment config is invalid.

    The message names the config file, then one line per problem: the dotted field path
    (``gpu_groups.1.instance_type``) and the reason, with the accepted values where there is
    a short list of them.
    """
