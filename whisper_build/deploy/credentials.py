"""Who the credentials are, or one line saying what to run: never a botocore traceback.

Every command that talks to AWS (``make deploy``, ``destroy``, ``capacity``, ``kubeconfig``, ``pods``,
``endpoint``) first reads the caller's identity (``sts:GetCallerIdentity``) through
:func:`caller_identity`. botocore raises a different exception for each way credentials can be
missing (a profile not in the AWS config, no credentials at all, an expired SSO session, rejected
keys); :func:`credential_problem` turns each into one sentence that names the source
(``AWS_PROFILE=<name>`` or the default chain) and the command that fixes it (``aws sso login``,
``aws configure list-profiles``). Offline commands (``make synth``, ``make env``, dry runs) never
get here.
Docs: docs/deploy.md, "Prerequisites (once per account)".
"""

from __future__ import annotations

import os
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
    ProfileNotFound,
    SSOError,
    TokenRetrievalError,
)

from whisper_build.deploy import aws

EXPIRED_CODES = frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired"})
REJECTED_CODES = frozenset({"InvalidClientTokenId", "UnrecognizedClientException", "SignatureDoesNotMatch"})
"""``ClientError`` codes of STS for expired and for unknown or mistyped credentials."""


class CredentialsProblem(Exception):
    """The caller's identity cannot be read; ``str()`` is the one line to print after ``error: ``."""


def credential_source() -> str:
    """Where boto3 and the AWS CLI take credentials from: ``AWS_PROFILE=<name>`` or the default chain."""
    profile = os.environ.get("AWS_PROFILE")
    return f"AWS_PROFILE={profile}" if profile else "the default credential chain (no AWS_PROFILE)"


def credential_problem(err: Exception) -> str:
    """The sentence for a botocore credential failure: what is wrong and what to run."""
    source = credential_source()
    profile = os.environ.get("AWS_PROFILE")
    if isinstance(err, ProfileNotFound):
        return (
            f"AWS_PROFILE={profile} names no profile of your AWS config: `aws configure list-profiles` lists them; "
            f"set AWS_PROFILE to one of those, or create it (`aws configure sso --profile {profile}` for IAM Identity "
            "Center, `aws configure --profile …` for access keys)"
        )
    if isinstance(err, SSOError | TokenRetrievalError):
        login = f"aws sso login --profile {profile}" if profile else "aws sso login"
        return f"the IAM Identity Center (SSO) session of {source} has expired or was never started: `{login}`, then run the same command again"
    if isinstance(err, NoCredentialsError | PartialCredentialsError):
        return (
            f"no AWS credentials found ({source}): `aws configure list-profiles`, then `export AWS_PROFILE=<profile>` "
            "(and `aws sso login` for an SSO profile), or `aws configure` to store access keys"
        )
    if isinstance(err, ClientError):
        code = err.response.get("Error", {}).get("Code", "")
        if code in EXPIRED_CODES:
            return f"the credentials of {source} have expired ({code}): `aws sso login` (SSO) or renew them, then run the same command again"
        if code in REJECTED_CODES:
            return f"AWS rejected the credentials of {source} ({code}): check them with `aws sts get-caller-identity`; `aws configure list-profiles` lists the profiles"
        return f"cannot read your AWS identity with {source}: {code or err}; check `aws sts get-caller-identity`"
    return f"cannot read your AWS identity with {source}: {err}; check `aws sts get-caller-identity`"


def is_credential_error(err: Exception) -> bool:
    """True for the failures :func:`credential_problem` has a specific sentence for (not any AWS error)."""
    if isinstance(err, ClientError):
        return err.response.get("Error", {}).get("Code", "") in EXPIRED_CODES | REJECTED_CODES
    return isinstance(
        err, ProfileNotFound | SSOError | TokenRetrievalError | NoCredentialsError | PartialCredentialsError
    )


def caller_identity(boto3_module: Any, region: str) -> tuple[str, str]:
    """``(account id, caller ARN)`` of the credentials in use.

    Raises:
        CredentialsProblem: any botocore failure while creating the STS client or calling it (the
            message from :func:`credential_problem`).
    """
    try:
        return aws.caller_identity(boto3_module.client("sts", region_name=region))
    except (BotoCoreError, ClientError) as err:
        raise CredentialsProblem(credential_problem(err)) from err
