"""``python -m whisper_build.workstation.deploy {deploy,destroy} --config FILE [--dry-run]``.

``make deploy CONFIG=…`` / ``make destroy CONFIG=…`` run this. Steps (:mod:`.plan`) run in order
from the repository root with progress and elapsed time per step; a failing step stops the run with
its name, and re-running the command resumes cheaply (every step is idempotent or skips itself).
``--dry-run`` prints every command without credentials or AWS calls.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from settings import ConfigError, DeploymentConfig, load_config, names
from whisper_build.workstation import api_keys
from whisper_build.workstation.deploy import aws
from whisper_build.workstation.deploy.plan import (
    Command,
    Step,
    deploy_steps,
    destroy_steps,
    relative_config_path,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
TOOLS = ("npx", "aws", "kubectl", "helm", "git")
"""Programs the deploy runs (helm and git only for the chart publish, checked up front anyway)."""
MIN_NODE_MAJOR = 22
ENDPOINT_POLL_SECONDS = 15.0
ENDPOINT_WAIT_SECONDS = 900.0


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class AwsSession:
    """The boto3 side of the journey: clients for the config's region and the caller's identity.

    Args:
        config: The deployment config (region, names).
        account: The caller's account id.
        caller_arn: The caller's ARN (``sts:GetCallerIdentity``).
        client: ``boto3.client``-like factory ``client(service_name, region_name=...)``.
        resource: ``boto3.resource``-like factory (S3 bucket deletion).
        log: progress line printer.
    """

    def __init__(
        self,
        config: DeploymentConfig,
        account: str,
        caller_arn: str,
        client: Callable[..., Any],
        resource: Callable[..., Any],
        log: Callable[[str], None],
    ) -> None:
        self.config = config
        self.account = account
        self.caller_arn = caller_arn
        self._client = client
        self._resource = resource
        self.log = log

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` in the config's region."""
        return self._client(service, region_name=self.config.region)

    def image_exists(self, repository: str, tag: str) -> bool:
        """Whether ``repository:tag`` is in ECR."""
        return aws.image_exists(self.client("ecr"), repository, tag)

    def run_builds(self, projects: Sequence[str]) -> None:
        """Start the CodeBuild projects and wait for all (progress lines as phases change)."""
        aws.run_builds(self.client("codebuild"), projects, lambda line: self.log(f"    {line}"))

    def grant_kubectl(self, cluster: str, namespace: str) -> None:
        """Wait for the cluster, then give the caller's IAM principal admin rights in ``namespace``."""
        eks = self.client("eks")
        aws.wait_cluster_active(eks, cluster)
        principal = aws.access_entry_principal(self.caller_arn, self.client("iam"))
        created = aws.ensure_access_entry(eks, cluster, principal, namespace)
        self.log(f"    access entry for {principal}: {'created' if created else 'already there'}")

    def retained(self) -> list[aws.Retained]:
        """Buckets and repositories of this config that still exist."""
        project, region, account = self.config.project_name, self.config.region, self.account
        buckets = {
            names.bucket_name(project, names.MODEL_BUCKET_PURPOSE, account, region): "model engines and the "
            "CTranslate2 fallback (hours of GPU builds; a redeploy imports the bucket and reuses them)",
            names.bucket_name(project, names.LIFECYCLE_BUCKET_PURPOSE, account, region): "HyperPod lifecycle "
            "scripts (small; retained with the same policy as the models)",
        }
        for name in aws.tagged_buckets(self.client("resourcegroupstaggingapi"), names.PROJECT_TAG, project):
            buckets.setdefault(name, "server access logs of the buckets (audit trail)")
        repositories = {
            names.serving_repository_name(self.config): "serving images (a redeploy imports it and skips the build)",
            names.chart_repository_name(self.config): "the published HyperPod dependency chart",
        }
        return aws.find_retained(self.client("s3"), self.client("ecr"), buckets, repositories)

    def report_retained(self, purge: bool) -> None:
        """Print what was retained, why, and how to delete it; delete it when ``purge``."""
        found = self.retained()
        if not found:
            self.log("    nothing retained")
            return
        for item in found:
            self.log(f"    {item.kind} {item.name}: {item.why}")
        if purge:
            aws.delete_retained(self._resource("s3", region_name=self.config.region), self.client("ecr"), found)
            self.log(f"    deleted {len(found)} retained resources")
            return
        self.log("    kept on purpose; `make deploy` with this config imports and reuses them. To delete them:")
        self.log("      make destroy CONFIG=<this config> PURGE=1     (irreversible), or by hand:")
        for item in found:
            for command in aws.delete_commands(item, self.config.region):
                self.log(f"      {command}")


class Runner:
    """Runs steps in order with a header, the commands, and the elapsed time of each step.

    Args:
        steps: The plan.
        session: AWS side; ``None`` in a dry run.
        out: line printer.
        run_command: runs one argv from the repository root, raising on failure (injected by tests).
    """

    def __init__(
        self,
        steps: Sequence[Step],
        session: AwsSession | None,
        out: Callable[[str], None],
        run_command: Callable[[Sequence[str]], None],
    ) -> None:
        self.steps = steps
        self.session = session
        self.out = out
        self.run_command = run_command

    def run(self) -> float:
        """Run (or, without a session, print) every step; returns the total seconds.

        Raises:
            aws.DeployError: a step failed; the message names it and how to resume.
        """
        started = time.monotonic()
        for index, step in enumerate(self.steps, 1):
            self.out(f"[{index}/{len(self.steps)}] {step.name}: {step.title}")
            self.out(f"    takes {step.duration}" + (f"; cost: {step.cost}" if step.cost else ""))
            if step.skip is not None:
                self.out(f"    skipped when {step.skip[0]}")
            for action in step.actions:
                self.out(f"    $ {action}")
            if self.session is None:
                continue
            step_started = time.monotonic()
            if step.skip is not None and step.skip[1](self.session):
                self.out("    skipped: already done")
                continue
            try:
                for action in step.actions:
                    if isinstance(action, Command):
                        self.run_command(action.argv)
                    else:
                        action.run(self.session)
            except (subprocess.CalledProcessError, aws.DeployError, aws.ClientError) as err:
                raise aws.DeployError(
                    f"step '{step.name}' failed after {_elapsed(time.monotonic() - step_started)}: {err}. "
                    "Fix the cause and run the same command again: finished steps are skipped or cheap."
                ) from err
            self.out(
                f"    done in {_elapsed(time.monotonic() - step_started)} (total {_elapsed(time.monotonic() - started)})"
            )
        return time.monotonic() - started


def run_in_repo(argv: Sequence[str]) -> None:
    """Run ``argv`` from the repository root with inherited output.

    Raises:
        subprocess.CalledProcessError: it exited non-zero.
    """
    subprocess.run(list(argv), cwd=REPO_ROOT, check=True)


def endpoint_address(config: DeploymentConfig, kubectl: Callable[[Sequence[str]], str]) -> str | None:
    """The load balancer's DNS name once the AWS Load Balancer Controller has provisioned it, else ``None``."""
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    output = kubectl(
        ["kubectl", "-n", config.serving.namespace, "get", kind, names.ENDPOINT_SERVICE_NAME, "-o", "json"]
    )
    ingress = json.loads(output).get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return ingress[0].get("hostname") if ingress else None


def how_to_reach(config: DeploymentConfig, hostname: str | None) -> str:
    """The closing message: the endpoint, a port-forward for an internal one, and a first request."""
    namespace, service = config.serving.namespace, names.ENDPOINT_SERVICE_NAME
    port = names.ENDPOINT_TLS_PORT if config.endpoint.tls else names.ENDPOINT_SERVICE_PORT
    scheme = "https" if config.endpoint.tls else "http"
    lines = ["", "Whisper is serving."]
    where = hostname or "(load balancer still provisioning: kubectl -n {namespace} get {kind} {service})"
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    lines.append(
        f"Endpoint ({config.endpoint.scheme} {config.endpoint.kind.upper()}): {scheme}://{where.format(namespace=namespace, kind=kind, service=service)}"
    )
    if config.endpoint.scheme == "internal":
        lines += [
            "It is reachable from inside the VPC only. From this machine, forward a local port:",
            f"  kubectl -n {namespace} port-forward service/{service} 8080:{port}",
            "then, in another shell:",
        ]
        base = "http://127.0.0.1:8080"
    else:
        base = f"{scheme}://{hostname or '<endpoint>'}"
    auth = config.endpoint.auth == "api_key"
    key_header = ' -H "Authorization: Bearer $KEY"' if auth else ""
    if auth:
        lines.append(
            f"  # the API key (make api-key CONFIG=… prints how to rotate it): {api_keys.fetch_key_command(config)}"
        )
    lines += [
        f"  curl -s {base}/ping",
        "  base64 -w0 recording.wav | jq -Rc '{audio_data: ., whisper_prompt: \"\"}' \\",
        f"    | curl -s {base}/invocations{key_header} -H 'Content-Type: application/json' -d @-",
        "  # OpenAI client (pip install openai):",
        f"  python -c \"import os; from openai import OpenAI; c = OpenAI(base_url='{base}/v1', api_key=os.environ.get('KEY', 'unused')); "
        "print(c.audio.transcriptions.create(model='whisper', file=open('recording.wav', 'rb')).text)\"",
        "  # or: WHISPER_API_KEY=$KEY WHISPER_GATEWAY_PORT=8080 make transcribe FILE=recording.wav",
        "Grafana, metrics and alerts: docs/observability.md. Tear down: make destroy CONFIG=<this config>.",
    ]
    return "\n".join(lines)


def _check_tools() -> list[str]:
    problems = [f"{tool} not found on PATH" for tool in TOOLS if shutil.which(tool) is None]
    node = shutil.which("node")
    if node is None:
        problems.append("node not found on PATH (Node.js >= 22)")
    else:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, check=False).stdout.strip()
        major = int(version.lstrip("v").split(".")[0]) if version.lstrip("v")[:1].isdigit() else 0
        if major < MIN_NODE_MAJOR:
            problems.append(f"Node.js {version or '?'} is too old: the CDK CLI needs >= {MIN_NODE_MAJOR}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the deploy CLI."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.deploy",
        description="Deploy (or destroy) a whisper-hyperpod config end to end: CDK bootstrap, storage, HyperPod "
        "chart, stacks, serving image, engines, rollout, kubectl access, ready pods, then how to reach the endpoint.",
    )
    parser.add_argument("action", choices=("deploy", "destroy"))
    parser.add_argument("--config", type=Path, required=True, help="deployment config YAML (make: CONFIG=)")
    parser.add_argument("--dry-run", action="store_true", help="print every step and command; run nothing")
    parser.add_argument(
        "--purge",
        action="store_true",
        help="destroy: also delete the retained buckets and ECR repositories (irreversible)",
    )
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: Callable[[str], None] = print,
    run_command: Callable[[Sequence[str]], None] = run_in_repo,
    boto3_module: Any = None,
) -> int:
    """Entry point; returns the exit status (0 done, 1 a step failed, 2 bad config or missing prerequisite)."""
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if config.pipeline.enabled:
        print(
            f"error: {args.config} has a pipeline source (pipeline.connection_arn): CDK Pipelines deploys it. "
            f"Deploy the pipeline once with `npx cdk deploy --all -c config={args.config}` (docs/deploy.md); "
            "make deploy drives workstation deployments (configs without a pipeline).",
            file=sys.stderr,
        )
        return 2
    config_file = relative_config_path(args.config, REPO_ROOT)
    out(f"{args.action} {config_file}: project {config.project_name}, region {config.region}"
        + (" (dry run: nothing is run)" if args.dry_run else ""))  # fmt: skip

    session: AwsSession | None = None
    account = config.account or "<account>"
    if not args.dry_run:
        problems = _check_tools()
        if problems:
            print(
                "error: missing prerequisites (docs/deploy.md, Prerequisites):\n  " + "\n  ".join(problems),
                file=sys.stderr,
            )
            return 2
        if boto3_module is None:
            import boto3 as boto3_module  # noqa: PLC0415 (not needed for --dry-run)
        account, caller = aws.caller_identity(boto3_module.client("sts", region_name=config.region))
        if config.account and config.account != account:
            print(
                f"error: the config is for account {config.account} but your credentials are for {account}",
                file=sys.stderr,
            )
            return 2
        out(f"as {caller} in account {account}")
        session = AwsSession(config, account, caller, boto3_module.client, boto3_module.resource, out)

    steps = (
        deploy_steps(config, config_file, account)
        if args.action == "deploy"
        else destroy_steps(config, config_file, args.purge)
    )
    try:
        total = Runner(steps, session, out, run_command).run()
    except aws.DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.dry_run:
        if args.action == "deploy":
            out("then: wait for the load balancer's address and print how to reach the endpoint with a first request")
        return 0
    out(f"{args.action} finished in {_elapsed(total)}")
    if args.action == "deploy":
        out(how_to_reach(config, _wait_for_endpoint(config, out)))
    return 0


def _wait_for_endpoint(config: DeploymentConfig, out: Callable[[str], None]) -> str | None:
    """Poll the Service/Ingress until the load balancer has a DNS name (up to 15 min)."""

    def kubectl(argv: Sequence[str]) -> str:
        return subprocess.run(list(argv), capture_output=True, text=True, check=True).stdout

    deadline = time.monotonic() + ENDPOINT_WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            hostname = endpoint_address(config, kubectl)
        except (subprocess.CalledProcessError, json.JSONDecodeError):
            hostname = None
        if hostname:
            return hostname
        out("    waiting for the load balancer's address …")
        time.sleep(ENDPOINT_POLL_SECONDS)
    return None
