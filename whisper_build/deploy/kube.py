"""How the deploy tool runs kubectl: always against this config's cluster, with errors that say what to do.

``aws eks update-kubeconfig --name <cluster> --region <region>`` (step ``kubectl``) names the
kubeconfig context after the cluster's ARN, ``arn:<partition>:eks:<region>:<account>:cluster/<name>``
("--alias: Alias for the cluster context name. Defaults to match cluster ARN", AWS CLI command
reference, ``aws eks update-kubeconfig``), and makes it the *current* context. With two configs
deployed, the current context is whichever was written last, so every kubectl call of ``make
deploy``/``destroy``/``pods``/``endpoint`` passes ``--context`` with this config's ARN instead.
Docs: docs/deploy.md, "Access: what `make deploy` grants".
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence

from settings import names, regions
from settings.schema import DeploymentConfig

KUBECTL_TIMEOUT_SECONDS = 60


def context_name(config: DeploymentConfig, account: str) -> str:
    """The kubeconfig context of the config's EKS cluster: its ARN, as ``aws eks update-kubeconfig`` names it.

    The partition (``aws``, ``aws-cn``, ``aws-us-gov``) comes from the region, by botocore's endpoint
    data (:func:`settings.regions.partition_of`: read once, without a profile or credentials, so it
    works in a dry run).
    """
    return (
        f"arn:{regions.partition_of(config.region)}:eks:{config.region}:{account}:cluster/{names.cluster_name(config)}"
    )


def kubectl_argv(config: DeploymentConfig, account: str, *args: str) -> tuple[str, ...]:
    """``kubectl --context <this config's cluster> -n <serving namespace> <args>``."""
    return ("kubectl", "--context", context_name(config, account), "-n", config.serving.namespace, *args)


def kubectl_output(argv: Sequence[str]) -> str:
    """Stdout of a kubectl command.

    Raises:
        subprocess.CalledProcessError: it exited non-zero (``stderr`` holds kubectl's reason).
        subprocess.TimeoutExpired: no answer within :data:`KUBECTL_TIMEOUT_SECONDS`.
        OSError: kubectl cannot be run (not installed).
    """
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=True, timeout=KUBECTL_TIMEOUT_SECONDS
    ).stdout


KUBECTL_ERRORS = (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError)
"""What :func:`kubectl_output` (or an injected stand-in) raises when kubectl gives no answer."""


def describe_error(err: BaseException) -> str:
    """One sentence on why a kubectl call failed and what to do, for one of :data:`KUBECTL_ERRORS`."""
    if isinstance(err, subprocess.TimeoutExpired):
        return (
            f"kubectl did not answer within {err.timeout:g} s: the cluster's API endpoint is unreachable from here or "
            "the credentials behind the kubeconfig expired (`aws sso login`, then run the same command again)"
        )
    if isinstance(err, subprocess.CalledProcessError):
        stderr = (err.stderr or "").strip().splitlines()
        reason = stderr[-1] if stderr else f"exit status {err.returncode}"
        return (
            f"kubectl failed: {reason}. No context of this cluster? run `make kubeconfig CONFIG=<this config>`; "
            "expired credentials? `aws sso login`"
        )
    return f"cannot run kubectl ({err}): install kubectl (docs/deploy.md, Prerequisites)"
