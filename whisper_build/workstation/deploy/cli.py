"""``python -m whisper_build.workstation.deploy {deploy,destroy,env} --config FILE [--dry-run] [--only STEP]``.

``make deploy CONFIG=…`` / ``make destroy CONFIG=…`` run this. Steps (:mod:`.plan`) run in order
from the repository root with progress and elapsed time per step; a failing step stops the run with
its name, and re-running the command resumes (each step states what a re-run does: skips, applies
only differences, or waits on work still running). ``--dry-run`` prints every command without
credentials or AWS calls. ``--only kubectl`` (``make kubeconfig``) runs one step. ``env`` prints
the config's names as shell exports (``make env``) for the commands in the docs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from settings import ConfigError, DeploymentConfig, load_config, names
from whisper_build.workstation import api_keys
from whisper_build.workstation.deploy import aws, capacity, kube, pods, prereqs, retained, teardown
from whisper_build.workstation.deploy.kube import kubectl_output
from whisper_build.workstation.deploy.plan import (
    INFERENCE_ENDPOINT_CONFIGS,
    Command,
    Step,
    WaitAll,
    ctranslate2_steps,
    ctranslate2_targets,
    deploy_steps,
    destroy_steps,
    diff_command,
    operator_endpoints,
    relative_config_path,
)
from whisper_build.workstation.deploy.retained import ACCESS_LOG_WHY

REPO_ROOT = Path(__file__).resolve().parents[3]
LOCAL_PORT = 8443
"""Local end of ``kubectl port-forward`` in the closing message (8443 with TLS, else 8080)."""
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
        kubectl: runs a kubectl argv and returns its stdout (pod diagnosis); raises on failure.
    """

    def __init__(
        self,
        config: DeploymentConfig,
        account: str,
        caller_arn: str,
        client: Callable[..., Any],
        resource: Callable[..., Any],
        log: Callable[[str], None],
        kubectl: Callable[[Sequence[str]], str] | None = None,
    ) -> None:
        self.config = config
        self.account = account
        self.caller_arn = caller_arn
        self._client = client
        self._resource = resource
        self.log = log
        self.kubectl = kubectl or kubectl_output

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

    def check_capacity(self) -> None:
        """Step ``capacity``: raise :class:`aws.DeployError` listing every missing offering or quota.

        Quotas are compared with this config's needs alone (account-wide quotas: :mod:`.capacity`).

        Raises:
            aws.DeployError: an instance type is not offered or a quota is too small.
        """
        problems = capacity.capacity_problems(self.client("ec2"), self.client("service-quotas"), self.config)
        if problems:
            raise aws.DeployError(
                f"this account cannot run the config in {self.config.region} yet:\n  - " + "\n  - ".join(problems)
            )
        self.log(
            "    instance types offered and quotas sufficient for this config alone (the SageMaker 'for cluster "
            "usage' quotas are account-wide: instances other HyperPod clusters of the account use are not "
            "subtracted)"
        )

    def object_exists(self, bucket: str, key: str) -> bool:
        """Whether ``s3://bucket/key`` exists (``HeadObject``; 404 or a missing bucket → ``False``)."""
        try:
            self.client("s3").head_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if err.response["Error"]["Code"] in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
                return False
            raise
        return True

    def storage_failure_report(self) -> list[str]:
        """Why step ``storage`` failed (the stack's status and failed events) and the ways out.

        A failed import of the retained buckets/repositories (``--import-existing-resources``, not
        verified against AWS) is the case this is for; docs/deploy.md, "If the storage import fails".
        """
        config, region = self.config, self.config.region
        stack = names.stack_name(config, "Storage")
        cloudformation = self.client("cloudformation")
        status = teardown.stack_status(cloudformation, stack)
        lines = [f"{stack}: {status or 'does not exist'}"]
        lines += [f"  {event}" for event in aws.failed_events(cloudformation, stack)]
        kept = [item for item in self.retained() if item.kind in ("s3-bucket", "ecr-repository")]
        kept = [item for item in kept if item.why != ACCESS_LOG_WHY]
        if status is not None and status.endswith(("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED")):
            lines.append(
                f"first clean the failed stack (its buckets and repositories are retained, nothing is lost): "
                f"aws cloudformation delete-stack --stack-name {stack} --region {region} && "
                f"aws cloudformation wait stack-delete-complete --stack-name {stack} --region {region}"
            )
        if kept:
            lines.append("then one of (docs/deploy.md, 'If the storage import fails'; what each loses is said there):")
            lines.append("  a) keep everything: fix the cause the events name and run make deploy again")
            lines.append(
                "  b) delete only the retained buckets and repositories below (loses the engines, the CTranslate2 "
                "conversion, images and chart; the next deploy rebuilds them), then make deploy:"
            )
            lines += [f"       {command}" for item in kept for command in aws.delete_commands(item, region)]
            lines.append(
                "  c) deploy under a new project_name in the config: nothing is deleted, everything is built again "
                "under new names; the old resources bill for storage until make destroy PURGE=1 with the old config"
            )
        return lines

    def pod_report(self) -> list[str]:
        """Why the serving pods are not ready (:mod:`.pods`), one line per pod."""
        return pods.report(self.config, self.account, self.kubectl)

    def _stacks(self) -> list[str]:
        return [names.stack_name(self.config, stack) for stack in names.STACKS]

    def cluster_active(self) -> bool:
        """Whether the EKS cluster exists and is ``ACTIVE`` (destroy's endpoint step needs kubectl access).

        Raises:
            botocore.exceptions.ClientError: ``DescribeCluster`` failed other than with
                ``ResourceNotFoundException`` (e.g. expired credentials; the runner turns it into a
                :class:`aws.DeployError`).
        """
        try:
            return self.client("eks").describe_cluster(name=names.cluster_name(self.config))["cluster"]["status"] == (
                "ACTIVE"
            )
        except ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFoundException":
                return False
            raise

    def wait_load_balancers_gone(self) -> None:
        """Wait for the controller's load balancers to go; raise naming any left after 10 min.

        Raises:
            aws.DeployError: load balancers still there after 10 min, each with its delete command.
        """
        left = teardown.wait_for_no_load_balancers(
            self.client("resourcegroupstaggingapi"), self.client("elbv2"), self.client("ec2"),
            names.cluster_name(self.config), self.config.region, lambda line: self.log(f"    {line}"),
        )  # fmt: skip
        if left:
            raise aws.DeployError(
                "the AWS Load Balancer Controller did not delete these within 10 min (they would block the VPC's "
                "deletion): " + "; ".join(f"{item.id}: {item.delete}" for item in left)
            )

    def stacks_gone(self) -> bool:
        """Whether no stack of the config exists."""
        cloudformation = self.client("cloudformation")
        return all(teardown.stack_status(cloudformation, stack) is None for stack in self._stacks())

    def wait_stack_deletes(self) -> None:
        """Wait for deletions an earlier run started (``DELETE_IN_PROGRESS``).

        Raises:
            aws.DeployError: a deletion still runs after an hour (:func:`teardown.wait_for_deletes`).
        """
        states = teardown.wait_for_deletes(self.client("cloudformation"), self._stacks(),
                                           lambda line: self.log(f"    {line}"))  # fmt: skip
        left = {stack: status for stack, status in states.items() if status}
        self.log("    stacks: " + (", ".join(f"{k} {v}" for k, v in left.items()) or "none left"))

    def stack_failure_report(self) -> list[str]:
        """Each remaining stack's status and the resources that blocked its deletion, with what to do."""
        cloudformation = self.client("cloudformation")
        lines = []
        for stack in self._stacks():
            status = teardown.stack_status(cloudformation, stack)
            if status is None:
                continue
            lines.append(f"{stack}: {status}")
            lines += [f"  blocked by {blocked}" for blocked in teardown.delete_failures(cloudformation, stack)]
        if any("AWS::EC2::" in line for line in lines):
            lines.append(
                "a VPC, subnet or security group that will not delete is usually held by a load balancer or network "
                "interface outside CloudFormation: the billing step's commands list them (docs/deploy.md, Tear down)"
            )
            lines += [
                "  " + item.delete
                for item in teardown.controller_load_balancers(
                    self.client("resourcegroupstaggingapi"),
                    self.client("elbv2"),
                    self.client("ec2"),
                    names.cluster_name(self.config),
                    self.config.region,
                )
            ]
        return lines

    def check_stacks_gone(self) -> None:
        """Raise naming every stack still there after ``cdk destroy`` (and what blocked it)."""
        cloudformation = self.client("cloudformation")
        left = [stack for stack in self._stacks() if teardown.stack_status(cloudformation, stack) is not None]
        if left:
            raise aws.DeployError(f"stacks left after cdk destroy: {', '.join(left)} (why: the lines above)")

    def check_billing(self) -> None:
        """Step ``billing``: raise listing whatever still bills by the hour, with the command that deletes it."""
        config = self.config
        found = teardown.billing_leftovers(
            self.client, (names.PROJECT_TAG, config.project_name), names.cluster_name(config),
            names.hyperpod_cluster_name(config), config.region, operator_endpoints(config),
        )  # fmt: skip
        if found:
            raise aws.DeployError(
                "these outlived the stacks and bill (or block the VPC):\n  "
                + "\n  ".join(f"{item.kind} {item.id} ({item.detail}): {item.delete}" for item in found)
            )
        self.log(f"    nothing of {config.project_name} bills by the hour in {config.region}")

    def retained(self) -> list[aws.Retained]:
        """Everything of this config that outlives ``cdk destroy`` (docs/deploy.md, Teardown).

        Buckets and ECR repositories (retained on purpose), any KMS key or secret still tagged with
        the project (none with the current stacks; keys from replacements or older versions), and
        the log groups AWS services create outside CloudFormation.
        """
        return retained.find(self.config, self.account, self.client)

    def report_retained(self, purge: bool) -> None:
        """Print what was retained, why, and how to delete it; delete it when ``purge``."""
        found = self.retained()
        if not found:
            self.log("    nothing retained")
            return
        for item in found:
            self.log(f"    {item.kind} {item.name}: {item.why}")
        for line in retained.cycle_summary(found):
            self.log(f"    {line}")
        if purge:
            aws.delete_retained(self.client, self._resource("s3", region_name=self.config.region), found)
            self.log(
                f"    deleted {len(found)} retained resources (KMS keys after a {aws.KEY_PENDING_WINDOW_DAYS}-day waiting period)"
            )
            return
        self.log("    kept on purpose or left by AWS services; `make deploy` with this config reuses the buckets")
        self.log("    and repositories and collides with none of them. To delete them:")
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
        clock: monotonic seconds (injected by tests; :class:`WaitAll` deadlines).
    """

    def __init__(
        self,
        steps: Sequence[Step],
        session: AwsSession | None,
        out: Callable[[str], None],
        run_command: Callable[[Sequence[str]], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.steps = steps
        self.session = session
        self.out = out
        self.run_command = run_command
        self.clock = clock

    def wait_all(self, action: WaitAll) -> None:
        """Run ``action``'s commands in turn, each with ``--timeout=`` what is left of the one deadline.

        Raises:
            aws.DeployError: the deadline passed before the last command could start.
        """
        deadline = self.clock() + action.deadline_s
        for argv in action.argvs:
            left = int(deadline - self.clock())
            if left <= 0:
                raise aws.DeployError(
                    f"not ready within {action.deadline_s // 60} min all together; not waited for: {shlex.join(argv)}"
                )
            self.run_command((*argv, f"--timeout={left}s"))

    def _skips(self, step: Step) -> bool:
        """Whether ``step``'s skip check says it is done (checks such as ``cluster_active`` call AWS).

        Raises:
            aws.DeployError: the check's AWS call failed (expired credentials, throttling, no network).
        """
        assert step.skip is not None
        try:
            return step.skip[1](self.session)
        except (BotoCoreError, ClientError) as err:
            raise aws.DeployError(
                f"step '{step.name}': could not check whether {step.skip[0]}: {err}. Credentials expired? Run "
                "`aws sso login` (or renew them) and run the same command again; every step is safe to re-run "
                "(destroy included)"
            ) from err

    def run(self) -> float:
        """Run (or, without a session, print) every step; returns the total seconds.

        Raises:
            aws.DeployError: a step failed; the message names it and how to resume.
        """
        started = time.monotonic()
        for index, step in enumerate(self.steps, 1):
            self.out(f"[{index}/{len(self.steps)}] {step.name}: {step.title}")
            self.out(f"    takes {step.duration}" + (f"; cost: {step.cost}" if step.cost else ""))
            if step.rerun:
                self.out(f"    re-run: {step.rerun}")
            if step.skip is not None:
                self.out(f"    skipped when {step.skip[0]}")
            for action in step.actions:
                self.out(f"    $ {action}")
            if self.session is None:
                continue
            step_started = time.monotonic()
            if step.skip is not None and self._skips(step):
                self.out("    skipped: already done")
                continue
            try:
                for action in step.actions:
                    if isinstance(action, Command):
                        self.run_command(action.argv)
                    elif isinstance(action, WaitAll):
                        self.wait_all(action)
                    else:
                        action.run(self.session)
            except (subprocess.CalledProcessError, aws.DeployError, BotoCoreError, ClientError) as err:
                if step.diagnose is not None:
                    try:
                        explanation = step.diagnose(self.session)
                    except (BotoCoreError, ClientError) as diagnose_err:
                        explanation = [f"(could not diagnose: {diagnose_err})"]
                    for line in explanation:
                        self.out(f"    why: {line}")
                raise aws.DeployError(
                    f"step '{step.name}' failed after {_elapsed(time.monotonic() - step_started)}: {err}. "
                    "Fix the cause (expired credentials: `aws sso login` or renew them) and run the same command "
                    "again; each step's 're-run' line says what repeating it does (docs/deploy.md, Resuming)."
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


def endpoint_address(config: DeploymentConfig, account: str, kubectl: Callable[[Sequence[str]], str]) -> str | None:
    """The load balancer's DNS name once the AWS Load Balancer Controller has provisioned it, else ``None``.

    Reads the Service (Ingress for ``endpoint.kind: alb``) in the cluster of ``account`` (:mod:`.kube`).
    """
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    output = kubectl(kube.kubectl_argv(config, account, "get", kind, names.ENDPOINT_SERVICE_NAME, "-o", "json"))
    ingress = json.loads(output).get("status", {}).get("loadBalancer", {}).get("ingress") or []
    return ingress[0].get("hostname") if ingress else None


def _certificate_name(config: DeploymentConfig) -> str:
    """Shell expression for the DNS name clients use with TLS: ``endpoint.domain_name`` or the certificate's own."""
    if config.endpoint.domain_name:
        return config.endpoint.domain_name
    return (
        f"$(aws acm describe-certificate --certificate-arn {config.endpoint.certificate_arn} "
        f"--region {config.region} --query Certificate.DomainName --output text)"
    )  # the certificate's primary name


def dns_record_lines(config: DeploymentConfig) -> list[str]:
    """How to point the certificate's DNS name at the load balancer (TLS only): a CNAME ``$NAME`` → ``$LB``.

    TLS clients check that the certificate covers the name they connect to, and the load balancer's
    own ``*.elb.amazonaws.com`` name is not on the certificate. Expects ``NAME`` and ``LB`` exported.
    """
    change = (
        '{"Changes":[{"Action":"UPSERT","ResourceRecordSet":{"Name":"\'"$NAME"\'","Type":"CNAME","TTL":300,'
        '"ResourceRecords":[{"Value":"\'"$LB"\'"}]}}]}'
    )
    return [
        "TLS: clients must connect with the certificate's DNS name. Create a DNS record for it (once per deploy;",
        "the load balancer's name changes when it is re-created):",
        "  a CNAME record  $NAME -> $LB  in the DNS zone of $NAME (Route 53: a CNAME, or an alias A record to the",
        "  load balancer), e.g. with Route 53, ZONE_ID being the hosted zone's id (aws route53 list-hosted-zones):",
        f"  aws route53 change-resource-record-sets --hosted-zone-id \"$ZONE_ID\" --change-batch '{change}'",
    ]


def how_to_reach(config: DeploymentConfig, account: str, hostname: str | None, dry_run: bool = False) -> str:
    """The closing message: load balancer, DNS record (TLS), port-forward (internal), API key, first requests.

    Requests use curl and the official openai client (``.venv/bin/python``: ``make install`` put
    ``openai`` there) with TLS verification on. ``dry_run``: worded as what the deploy would print.
    Its ``kubectl`` commands name the cluster's context (:func:`.kube.context_name` of ``account``),
    as the tool's own calls do, never the current one.
    """
    context = kube.context_name(config, account)
    endpoint, region = config.endpoint, config.region
    namespace, service = config.serving.namespace, names.ENDPOINT_SERVICE_NAME
    kind = "service" if endpoint.kind == "nlb" else "ingress"
    port = names.ENDPOINT_TLS_PORT if endpoint.tls else names.ENDPOINT_SERVICE_PORT
    lookup = (
        f"$(kubectl --context {context} -n {namespace} get {kind} {service} "
        "-o jsonpath='{.status.loadBalancer.ingress[0].hostname}')"
    )
    lines = [
        "",
        "(dry run) once every step has run and the pods are ready, it prints:" if dry_run else "Whisper is serving.",
        f"Load balancer ({endpoint.scheme} {endpoint.kind.upper()}, port {port}): "
        + (hostname or "still provisioning; LB below reads its name once it exists"),
        f"  export LB={hostname or lookup}",
    ]
    curl_opts = ""
    if endpoint.tls:
        lines.insert(4, f"  export NAME={_certificate_name(config)}")
        lines += dns_record_lines(config)
    if endpoint.scheme == "internal":
        local = LOCAL_PORT if endpoint.tls else 8080
        lines += [
            "It is reachable from inside the VPC only. From this machine, forward a local port (leave it running):",
            f"  kubectl --context {context} -n {namespace} port-forward service/{service} {local}:{port} &",
        ]
        if endpoint.tls:
            base = f"https://$NAME:{local}"
            curl_opts = f"--resolve $NAME:{local}:127.0.0.1 "
            lines.append(
                "  # TLS verification stays on: curl --resolve sends $NAME's requests to the forward; other clients "
                "(openai): add the line '127.0.0.1 $NAME' to /etc/hosts while you test"
            )
        else:
            base = "http://127.0.0.1:8080"
    else:
        base = "https://$NAME"  # internet-facing requires a certificate (settings validation)
    lines.append(f"  export BASE={base}")
    auth = endpoint.auth == "api_key"
    if auth:
        lines += [
            "  # the API key (make api-key CONFIG=… prints how to rotate it):",
            f"  {api_keys.secret_arn_command(config)}",
            f"  {api_keys.fetch_key_command(config)}",
        ]
    key_header = ' -H "Authorization: Bearer $KEY"' if auth else ""
    body = (
        'python3 -c \'import base64,json,sys; print(json.dumps({"audio_data": '
        'base64.b64encode(open(sys.argv[1], "rb").read()).decode(), "whisper_prompt": ""}))\' recording.wav'
    )
    lines += [
        "  # recording.wav: a recording of your own, or synthetic speech from make bench-audio "
        "(then: cp bench-audio/utterance_0.wav recording.wav)",
        f'  curl -s {curl_opts}"$BASE/ping"',
        f"  {body} \\",
        f"    | curl -s {curl_opts}\"$BASE/invocations\"{key_header} -H 'Content-Type: application/json' -d @-",
        '  # → {"code": 0, "message": "Success", "transcribe_text": "<what recording.wav says>"}',
        "  # OpenAI client (the official openai package, in .venv after make install):",
        "  .venv/bin/python -c \"import os; from openai import OpenAI; c = OpenAI(base_url=os.environ['BASE'] + '/v1', "
        "api_key=os.environ.get('KEY', 'unused')); "
        "print(c.audio.transcriptions.create(model='whisper', file=open('recording.wav', 'rb')).text)\"",
    ]
    if endpoint.scheme == "internal" and not endpoint.tls:
        lines.append("  # or: WHISPER_API_KEY=$KEY WHISPER_GATEWAY_PORT=8080 make transcribe FILE=recording.wav")
    if endpoint.scheme == "internal":
        lines.append(
            "  # through the load balancer itself, from inside the VPC (a HyperPod node over SSM, or CloudShell in "
            "the VPC): docs/deploy.md, After the deploy"
        )
    lines.append(
        f"Grafana, metrics and alerts: docs/observability.md. Tear down: make destroy CONFIG=<this config> "
        f"(region {region})."
    )
    return "\n".join(lines)


def env_exports(config: DeploymentConfig, config_file: str) -> str:
    """``make env CONFIG=…``: the config's names as POSIX shell exports for the commands in the docs.

    Use: ``eval "$(make -s env CONFIG=config/my.yaml)"``.
    """
    values = {
        "CONFIG": config_file,
        "PROJECT": config.project_name,
        "REGION": config.region,
        "NAMESPACE": config.serving.namespace,
        "CLUSTER": names.cluster_name(config),
        "HYPERPOD_CLUSTER": names.hyperpod_cluster_name(config),
        "STACK_PREFIX": names.stack_prefix(config.project_name),
        "SERVING_REPOSITORY": names.serving_repository_name(config),
        "IMAGE_PROJECT": names.image_project_name(config),
        "ROLLOUT_PROJECT": names.rollout_project_name(config),
        "ENGINE_PROJECTS": " ".join(names.engine_project_name(config, t) for t in config.engine_targets),
        "IMAGE_TAG": config.serving.image_tag,
        "AWS_REGION": config.region,
    }
    if config.endpoint.certificate_arn:
        values["CERTIFICATE_ARN"] = config.endpoint.certificate_arn
    if config.endpoint.domain_name:
        values["NAME"] = config.endpoint.domain_name
    return "\n".join(f"export {key}={shlex.quote(value)}" for key, value in values.items())


def build_parser() -> argparse.ArgumentParser:
    """Arguments of the deploy CLI."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.workstation.deploy",
        description="Deploy (or destroy) a whisper-hyperpod config end to end: capacity checks, CDK bootstrap, "
        "storage, HyperPod chart, stacks, kubectl access, serving image, engines, rollout, ready pods, then how to "
        "reach the endpoint.",
    )
    parser.add_argument(
        "action",
        choices=("deploy", "destroy", "env", "pods", "endpoint", "diff", "publish-ctranslate2"),
        help="env: print the config's names as shell exports; pods: why the serving pods are (not) ready; "
        "endpoint: wait for the load balancer's address and print how to reach it (the end of deploy); "
        "diff: cdk diff of every stack against what is deployed; publish-ctranslate2: convert the model to "
        "CTranslate2 and upload it for the groups with serving_engine: ctranslate2",
    )
    parser.add_argument("--config", type=Path, required=True, help="deployment config YAML (make: CONFIG=)")
    parser.add_argument("--dry-run", action="store_true", help="print every step and command; run nothing")
    parser.add_argument(
        "--purge",
        action="store_true",
        help="destroy: also delete what is retained: buckets, ECR repositories, KMS keys, secrets, log groups "
        "(irreversible)",
    )
    parser.add_argument(
        "--only", metavar="STEP", help="run one step, e.g. kubectl (make kubeconfig) or capacity (make capacity)"
    )
    parser.add_argument(
        "--approve",
        action="store_true",
        help="deploy: cdk deploy asks before every change (--require-approval any-change) instead of never",
    )
    return parser


def credential_source() -> str:
    """Where boto3 and the AWS CLI take credentials from: ``AWS_PROFILE=<name>`` or the default chain."""
    profile = os.environ.get("AWS_PROFILE")
    return f"AWS_PROFILE={profile}" if profile else "the default credential chain (no AWS_PROFILE)"


def account_mismatch(config: DeploymentConfig, account: str) -> str | None:
    """The refusal when the config pins ``account`` and the credentials are for another; else ``None``."""
    if config.account is None or config.account == account:
        return None
    return (
        f"the config pins account {config.account} (account:) but your credentials ({credential_source()}) are for "
        f"account {account}. Use a profile of account {config.account}: `aws configure list-profiles`, then e.g. "
        f"`AWS_PROFILE=<profile> make deploy CONFIG=…` (`aws sso login --profile <profile>` first for SSO)"
    )


def endpoint_timeout_help(config: DeploymentConfig, config_file: str, account: str, wait_s: float) -> str:
    """What to run when the load balancer has no address after ``wait_s`` seconds: why, then how to resume.

    The ``kubectl`` commands name the cluster's context of ``account`` (:func:`.kube.context_name`).
    """
    namespace, service = config.serving.namespace, names.ENDPOINT_SERVICE_NAME
    context = kube.context_name(config, account)
    kind = "service" if config.endpoint.kind == "nlb" else "ingress"
    waited = f"{wait_s / 60:.0f} min" if wait_s >= 60 else f"{wait_s:.0f} s"
    return "\n".join([
        f"the load balancer has no address after {waited}. Why (the Events at the end):",
        f"  kubectl --context {context} -n {namespace} describe {kind} {service}    # the AWS Load Balancer Controller's events: subnets, "
        "quota, permission or certificate errors",
        f"  make pods CONFIG={config_file}    # the pods behind it (the address does not wait for them)",
        f"  kubectl --context {context} -n kube-system logs deployment/aws-load-balancer-controller --tail=50    # needs the cluster-admin "
        "access entry (docs/deploy.md, Access)",
        f"then resume: make endpoint CONFIG={config_file} (waits again and prints how to reach it), or make deploy "
        f"CONFIG={config_file} (every step is skipped or a no-op; the rollout restarts the pods once more)",
    ])  # fmt: skip


def main(
    argv: Sequence[str] | None = None,
    *,
    out: Callable[[str], None] = print,
    run_command: Callable[[Sequence[str]], None] = run_in_repo,
    boto3_module: Any = None,
    kubectl: Callable[[Sequence[str]], str] = kubectl_output,
    endpoint_wait_s: float = ENDPOINT_WAIT_SECONDS,
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
    if args.action == "env":
        out(env_exports(config, config_file))
        return 0
    if args.action in ("pods", "endpoint"):
        account = _kubectl_account(config, args.dry_run, boto3_module)
        if account is None:
            return 2
        if args.action == "endpoint":
            return _endpoint(config, config_file, account, out, kubectl, args.dry_run, endpoint_wait_s)
        return _pods(config, account, out, kubectl, args.dry_run)
    if args.action == "diff":
        return _diff(config_file, out, run_command, args.dry_run)
    if args.action == "publish-ctranslate2" and not ctranslate2_targets(config):
        print(
            f"error: no GPU group of {args.config} has serving_engine: ctranslate2: set it on the groups whose "
            "TensorRT-LLM engine cannot be built first (docs/deploy.md, 'If the engine build fails')",
            file=sys.stderr,
        )
        return 2
    steps = _plan(args, config, config_file, config.account or "<account>")
    if args.only is not None and args.only not in [step.name for step in steps]:
        print(f"error: --only {args.only}: no such step; steps: {', '.join(s.name for s in steps)}", file=sys.stderr)
        return 2
    out(f"{args.action} {config_file}: project {config.project_name}, region {config.region}"
        + (" (dry run: nothing is run)" if args.dry_run else ""))  # fmt: skip

    session: AwsSession | None = None
    account = config.account or "<account>"
    grafana = args.action == "deploy" and config.observability.enabled and config.observability.grafana
    if grafana and args.only is None:
        out(
            "prerequisite: observability.grafana is on, so IAM Identity Center (with AWS Organizations) must be "
            "enabled before step stacks; without it set observability.grafana: false (docs/deploy.md, Prerequisites)"
        )
    if args.dry_run:
        out(f"would check the tools first: {_tools(args, config)} (docs/deploy.md, Prerequisites)")
        out(
            f"would print: {args.action} INTO account <aws sts get-caller-identity>, region {config.region}, as "
            f"<your ARN> ({credential_source()})"
            + (f", and refuse unless the account is {config.account} (account:)" if config.account else "")
        )
    if not args.dry_run:
        if args.only == "kubectl":  # make kubeconfig: the AWS CLI and kubectl only
            problems = prereqs.check_aws_cli() + prereqs.check_kubectl(config.cluster.kubernetes_version)
        elif args.only == "capacity":  # make capacity: boto3 only
            problems = []
        elif args.action == "publish-ctranslate2":
            problems = prereqs.check_aws_cli()
        elif args.action == "deploy":
            problems = prereqs.check_all(config.cluster.kubernetes_version)
        else:
            problems = (
                prereqs.check_node()
                + prereqs.check_aws_cli()
                + prereqs.check_kubectl(config.cluster.kubernetes_version)
            )
        if problems:
            print(
                "error: missing prerequisites (docs/deploy.md, Prerequisites):\n  " + "\n  ".join(problems),
                file=sys.stderr,
            )
            return 2
        if boto3_module is None:
            import boto3 as boto3_module  # noqa: PLC0415 (not needed for --dry-run)
        account, caller = aws.caller_identity(boto3_module.client("sts", region_name=config.region))
        out(f"{args.action} INTO account {account}, region {config.region}, as {caller} ({credential_source()})")
        refusal = account_mismatch(config, account)
        if refusal:
            print(f"error: {refusal}", file=sys.stderr)
            return 2
        session = AwsSession(config, account, caller, boto3_module.client, boto3_module.resource, out, kubectl)

    steps = _plan(args, config, config_file, account)
    if args.only is not None:
        steps = [step for step in steps if step.name == args.only]
    try:
        total = Runner(steps, session, out, run_command).run()
    except aws.DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.action == "destroy" and args.only is None:
        for line in after_destroy_lines(config, account):
            out(line)
    if args.dry_run:
        if args.action == "deploy" and args.only is None:
            return _endpoint(config, config_file, account, out, kubectl, True, endpoint_wait_s)
        return 0
    out(f"{args.action} finished in {_elapsed(total)}")
    if args.action == "deploy" and args.only is None:
        return _endpoint(config, config_file, account, out, kubectl, False, endpoint_wait_s)
    return 0


def _plan(args: argparse.Namespace, config: DeploymentConfig, config_file: str, account: str) -> list[Step]:
    """The steps of ``args.action`` (deploy, destroy or publish-ctranslate2)."""
    if args.action == "deploy":
        return deploy_steps(config, config_file, account, approve=args.approve)
    if args.action == "destroy":
        return destroy_steps(config, config_file, args.purge, account)
    try:
        version: str | None = importlib.metadata.version("ctranslate2")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return ctranslate2_steps(config, account, version)


def _tools(args: argparse.Namespace, config: DeploymentConfig) -> str:
    """What the real run checks before its first step (the dry run prints it instead)."""
    if args.only == "capacity":
        return "none (boto3 only)"
    if args.action == "publish-ctranslate2":
        return "AWS CLI v2, python3"
    if args.only == "kubectl":
        return prereqs.describe(config.cluster.kubernetes_version, chart=False).split(", ", 1)[1]
    return prereqs.describe(config.cluster.kubernetes_version, chart=args.action == "deploy")


def _diff(config_file: str, out: Callable[[str], None], run_command: Callable[[Sequence[str]], None],
          dry_run: bool) -> int:  # fmt: skip
    """``make diff``: ``cdk diff`` of every stack (review before ``make deploy``); 1 when it fails."""
    command = diff_command(config_file)
    out(f"$ {command}")
    if dry_run:
        return 0
    problems = prereqs.check_node()
    if problems:
        print("error: missing prerequisites:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    try:
        run_command(command.argv)
    except subprocess.CalledProcessError as err:
        print(f"error: cdk diff failed ({err})", file=sys.stderr)
        return 1
    return 0


def after_destroy_lines(config: DeploymentConfig, account: str) -> list[str]:
    """What ``make destroy`` leaves on purpose outside AWS billing: the kubeconfig entry and the CDK bootstrap."""
    arn = kube.context_name(config, account)
    return [
        "Left on purpose (docs/deploy.md, Tear down):",
        f"  your kubeconfig still has the deleted cluster (context, cluster and user named {arn}); remove them:",
        f"    kubectl config delete-context {arn} && kubectl config delete-cluster {arn} && "
        f"kubectl config delete-user {arn}",
        f"  the CDKToolkit stack (CDK bootstrap of aws://{account}/{config.region}) is shared by every CDK app of "
        "the account and region, so it stays; its staging bucket holds cents of assets. To remove it when no CDK "
        f"app there needs it: empty its cdk-*-assets-{account}-{config.region} bucket, then "
        f"aws cloudformation delete-stack --stack-name CDKToolkit --region {config.region}",
    ]


def _kubectl_account(config: DeploymentConfig, dry_run: bool, boto3_module: Any) -> str | None:
    """The account whose cluster ``make pods`` / ``make endpoint`` read (its kubeconfig context, :mod:`.kube`).

    ``account:`` of the config, else the credentials' (``sts:GetCallerIdentity``); ``<account>`` in a
    dry run. Checks kubectl and the AWS CLI (the kubeconfig's credential plugin) first. ``None``, with
    the reason printed, when a prerequisite is missing or the credentials cannot be read.
    """
    if dry_run:
        return config.account or "<account>"
    problems = prereqs.check_aws_cli() + prereqs.check_kubectl(config.cluster.kubernetes_version)
    if problems:
        print("error: missing prerequisites (docs/deploy.md, Prerequisites):\n  " + "\n  ".join(problems),
              file=sys.stderr)  # fmt: skip
        return None
    if config.account is not None:
        return config.account
    if boto3_module is None:
        import boto3 as boto3_module  # noqa: PLC0415 (not needed for --dry-run)
    try:
        return aws.caller_identity(boto3_module.client("sts", region_name=config.region))[0]
    except (BotoCoreError, ClientError) as err:
        print(f"error: cannot read your AWS account ({credential_source()}): {err}. Expired credentials? "
              "`aws sso login`, then run the same command again", file=sys.stderr)  # fmt: skip
        return None


def _pods(
    config: DeploymentConfig, account: str, out: Callable[[str], None], kubectl: Callable[[Sequence[str]], str],
    dry_run: bool,
) -> int:  # fmt: skip
    """``make pods``: one line per serving pod; 1 when one has a real failure or the pods cannot be read."""
    if dry_run:
        out("$ " + shlex.join(pods.pods_command(config, account)))
        return 0
    try:
        lines = pods.read_pods(config, account, kubectl)
    except pods.PodsUnreadable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in lines:
        out(line)
    return 1 if any(": failed: " in line for line in lines) else 0


def _endpoint(
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
        hostname = _wait_for_endpoint(config, account, out, kubectl, wait_s)
    except aws.DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if hostname is None:
        print(f"error: {endpoint_timeout_help(config, config_file, account, wait_s)}", file=sys.stderr)
        return 1
    out(how_to_reach(config, account, hostname))
    return 0


def operator_endpoint_message(config: DeploymentConfig, account: str) -> str:
    """How to reach ``serving.target: inference_operator``: its SageMaker endpoints, their status, a first call."""
    region = config.region
    lines = [
        "",
        "serving.target inference_operator: the HyperPod inference operator registers these SageMaker endpoints "
        "(make endpoint does not wait for them: waiting on the operator is not built or verified here):",
    ]
    for name in operator_endpoints(config):
        lines += [
            f"  aws sagemaker describe-endpoint --endpoint-name {name} --region {region} --query EndpointStatus"
            "    # InService once ready",
            f"  .venv/bin/python -m whisper_build.workstation.cli recording.wav --sagemaker-endpoint {name} "
            f"--region {region}",
        ]
    describe = shlex.join(kube.kubectl_argv(config, account, "describe", INFERENCE_ENDPOINT_CONFIGS))
    lines.append(f"The operator's objects and their status: {describe} (docs/serving-targets.md, Invoking)")
    return "\n".join(lines)


def _endpoint_kind(config: DeploymentConfig) -> str:
    return "service" if config.endpoint.kind == "nlb" else "ingress"


def _wait_for_endpoint(
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
