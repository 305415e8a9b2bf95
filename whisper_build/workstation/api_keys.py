"""``make api-key``: print how to fetch and rotate the gateway's API key of a deployed config.

Prints AWS CLI commands (it calls no AWS API itself): where the secret is, how to read the active
key, how to call the endpoint with it, and the zero-downtime rotation (add a key, move clients after
the gateway's refresh period, remove the old key). The secret's format is in docs/deploy.md
(Security) and :mod:`whisper_build.serving.gateway.auth`.

Exit status: 0 printed, 2 invalid config.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from settings import ConfigError, DeploymentConfig, load_config, names
from settings.endpoint_auth import GENERATED_KEY_NAME, REFRESH_SECONDS, SECRET_ARN_OUTPUT

KEY_LENGTH = 48


def secret_arn_command(config: DeploymentConfig) -> str:
    """Shell command exporting ``SECRET``: the API keys secret's ARN, read from the workloads stack's output.

    CloudFormation names the secret (:mod:`stacks.api_keys`), so its ARN changes with every deploy
    after a ``make destroy``; the stack output is the stable way to find it.
    """
    stack = names.stack_name(config, "Workloads")
    query = f"Stacks[0].Outputs[?OutputKey=='{SECRET_ARN_OUTPUT}'].OutputValue"
    return (
        f"export SECRET=$(aws --region {config.region} cloudformation describe-stacks --stack-name {stack} "
        f'--query "{query}" --output text)'
    )


def fetch_key_command(config: DeploymentConfig) -> str:
    """Shell command exporting ``KEY`` (the generated ``primary`` key) from the secret named by ``$SECRET``.

    Run :func:`secret_arn_command` first.
    """
    read = (
        f'aws --region {config.region} secretsmanager get-secret-value --secret-id "$SECRET" '
        "--query SecretString --output text"
    )
    pick = "python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])'"
    return f"export KEY=$({read} | {pick} {GENERATED_KEY_NAME})"


def instructions(config: DeploymentConfig) -> str:
    """The instructions for ``config`` as text (commands quoted for a POSIX shell)."""
    if config.endpoint.auth != "api_key":
        return (
            f"endpoint.auth is '{config.endpoint.auth}': the gateway of {config.project_name} checks no API key.\n"
            "Set endpoint.auth: api_key (the default) and deploy to require keys."
        )
    region = config.region
    secret = '"$SECRET"'
    aws = f"aws --region {region}"
    scheme = "https" if config.endpoint.tls else "http"
    both = f'"{{\\"{GENERATED_KEY_NAME}\\": \\"$KEY\\", \\"next\\": \\"$NEW\\"}}"'
    only_new = f'"{{\\"{GENERATED_KEY_NAME}\\": \\"$NEW\\"}}"'
    return "\n".join(
        [
            f"Gateway API keys of {config.project_name} ({region}): a Secrets Manager secret named by CloudFormation",
            "(customer-managed KMS key; every string value of its JSON object is an active key; deleted by",
            "make destroy, so a redeploy issues new keys). Its ARN, from the workloads stack's output:",
            f"  {secret_arn_command(config)}",
            "",
            "Fetch the active key:",
            f"  {fetch_key_command(config)}",
            "",
            "Use it (OpenAI clients: api_key=$KEY; or header X-Api-Key):",
            f'  curl -H "Authorization: Bearer $KEY" -F file=@audio.wav {scheme}://<endpoint>/v1/audio/transcriptions',
            "",
            f"Rotate without downtime (pods re-read the secret every {REFRESH_SECONDS} s):",
            f"  NEW=$({aws} secretsmanager get-random-password --exclude-punctuation "
            f"--password-length {KEY_LENGTH} --query RandomPassword --output text)",
            "  # 1. both keys active",
            f"  {aws} secretsmanager put-secret-value --secret-id {secret} --secret-string {both}",
            f"  # 2. wait > {REFRESH_SECONDS} s, move every client to $NEW",
            "  # 3. only the new key active",
            f"  {aws} secretsmanager put-secret-value --secret-id {secret} --secret-string {only_new}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.api_keys", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--config", type=Path, default=None, help="deployment config YAML (default: embedded)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(instructions(config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
