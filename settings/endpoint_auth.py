"""Shared names of the gateway's API keys (docs/contracts.md §8).

The secret the stack creates, the key it generates, and how often the gateway re-reads it.
"""

from __future__ import annotations

GENERATED_KEY_NAME = "primary"
"""Name of the key the stack generates inside the secret's JSON object."""
REFRESH_SECONDS = 60
"""Default period at which the gateway re-reads the secret (``WHISPER_GATEWAY_API_KEYS_REFRESH_SECONDS``)."""


def api_keys_secret_name(project_name: str) -> str:
    """Secrets Manager name of the API keys secret, e.g. ``whisper-hyperpod/gateway-api-keys``."""
    return f"{project_name}/gateway-api-keys"
