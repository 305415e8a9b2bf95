"""Shared names of the gateway's API keys (docs/contracts.md §8).

Where the secret's ARN is published, the key the stack generates, and how often the gateway re-reads it.
"""

from __future__ import annotations

GENERATED_KEY_NAME = "primary"
"""Name of the key the stack generates inside the secret's JSON object."""
REFRESH_SECONDS = 60
"""Default period at which the gateway re-reads the secret (``WHISPER_GATEWAY_API_KEYS_REFRESH_SECONDS``)."""

SECRET_ARN_OUTPUT = "ApiKeysSecretArn"
"""Output of the workloads stack holding the secret's ARN. CloudFormation names the secret (no fixed
name: a deleted secret's name stays taken for its recovery window), so people and tools find it here."""
