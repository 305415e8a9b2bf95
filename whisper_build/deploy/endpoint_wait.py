"""The end of ``make deploy`` and all of ``make endpoint``: wait for the load balancer's address.

Then print how to reach it (:mod:`.closing`).

The AWS Load Balancer Controller provisions the load balancer for the ``whisper`` Service (Ingress
for ``endpoint.kind: alb``) and writes its DNS name into the object's ``status.loadBalancer``;
this polls that with ``kubectl`` in the cluster's context (:mod:`.kube`).
Docs: docs/deploy.md, "After the deploy: reaching the endpoint".
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from settings import DeploymentConfig, names
from whisper_build.deploy import aws, kube
from whisper_build.deploy.closing import endpoint_timeout_help, how_to_reach, operator_endpoint_message

ENDPOINT_POLL_SECONDS = 15.0
ENDPOINT_WAIT_SECONDS = 900.0


def endpoint_address(config: DeploymentConfig, account: str, kubectl: Callable[[Sequence[str]], str]) -> str | None:
    """The load balancer's DNS name once the AWS Load Balancer Controller has provisioned it, else ``None``.

    Reads the Service (Ingress for ``endpoint.kind: alb``) in the cluster of ``account`` (:mod:`.kube`).
    """
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    output = kubectl(kube.kubectl_argv(config, account, "get", kind, names.ENDPOINT_SERVICE_NAME, "-o", "json"))
    ingress = json.loads(output).get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return ingress[0].get("hostname") if ingress else None


def endpoint(
    config: DeploymentConfig,
    config_file: str,
    account: str,
    out: Callable[[str], None],
    kubectl: Callable[[Sequence[str]], str],
    dry_run: bool,
    wait_s: float,
) -> int:
    """Wait for the load balancer's address and print how to reach it; 1 with what to check when it times out.

    ``serving.target: inference_operator`` has no Service of ours to wait for: the SageMaker
    endpoints the operator registers are named, with how to check and call them, and nothing is waited for.
    """
    if config.serving.target == "inference_operator":
        out(operator_endpoint_message(config, account))
        return 0
    if dry_run:
        out(f"then: wait up to {wait_s / 60:.0f} min for the load balancer's address and print how to reach it:")
        out("$ " + shlex.join(kube.kubectl_argv(config, account, "get", _endpoint_kind(config),
                                                names.ENDPOINT_SERVICE_NAME, "-o", "json")))  # fmt: skip
        out(how_to_reach(config, account, None, dry_run=True))
        return 0
    try:
        hostname = wait_for_endpoint(config, account, out, kubectl, wait_s)
    except aws.DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if hostname is None:
        print(f"error: {endpoint_timeout_help(config, config_file, account, wait_s)}", file=sys.stderr)
        return 1
    out(how_to_reach(config, account, hostname))
    return 0


def _endpoint_kind(config: DeploymentConfig) -> str:
    return "service" if config.endpoint.kind == "nlb" else "ingress"


def wait_for_endpoint(
    config: DeploymentConfig,
    account: str,
    out: Callable[[str], None],
    kubectl: Callable[[Sequence[str]], str],
    wait_s: float,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Poll the Service/Ingress until the load balancer has a DNS name (up to ``wait_s``); ``None`` on timeout.

    A kubectl that fails or times out is asked again (the object may not exist yet, the API may be slow).

    Raises:
        aws.DeployError: kubectl cannot be run at all (not installed), or still fails at the deadline
            (its reason and what to do).
    """
    deadline = time.monotonic() + wait_s
    while True:
        failure: str | None = None
        try:
            hostname = endpoint_address(config, account, kubectl)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            hostname, failure = None, kube.describe_error(err)
        except OSError as err:
            raise aws.DeployError(kube.describe_error(err)) from err
        except json.JSONDecodeError as err:
            hostname, failure = None, f"kubectl printed no JSON ({err})"
        if hostname:
            return hostname
        if time.monotonic() >= deadline:
            if failure is not None:
                raise aws.DeployError(f"could not read the load balancer's address: {failure}")
            return None
        out("    waiting for the load balancer's address …" + (f" ({failure})" if failure else ""))
        sleep(ENDPOINT_POLL_SECONDS)
