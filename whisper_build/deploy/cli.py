"""``python -m whisper_build.deploy {deploy,destroy,env,pods,endpoint,diff,publish-ctranslate2} --config FILE``.

``make deploy CONFIG=…`` / ``make destroy CONFIG=…`` run this. Steps (:mod:`.deploy_plan`,
:mod:`.destroy_plan`) run in order from the repository root with progress and elapsed time per step
(:mod:`.runner`); a failing step stops the run with its name, and re-running the command resumes
(each step states what a re-run does: skips, applies only differences, or waits on work still
running). ``--dry-run`` prints every command without credentials or AWS calls. ``--only kubectl``
(``make kubeconfig``) runs one step. ``env`` prints the config's names as shell exports
(``make env``) for the commands in the docs. Arguments: :mod:`.args`.
Docs: docs/deploy.md, "Deploy".
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from settings import ConfigError, DeploymentConfig, load_config, names
from whisper_build.deploy import aws, cluster_progress, credentials, pods, prereqs
from whisper_build.deploy.args import build_parser
from whisper_build.deploy.aws_session import AwsSession
from whisper_build.deploy.closing import after_destroy_lines
from whisper_build.deploy.credentials import credential_source
from whisper_build.deploy.ctranslate2_plan import ctranslate2_steps, ctranslate2_targets
from whisper_build.deploy.deploy_plan import deploy_steps
from whisper_build.deploy.destroy_plan import destroy_steps
from whisper_build.deploy.endpoint_wait import ENDPOINT_WAIT_SECONDS, endpoint
from whisper_build.deploy.kube import kubectl_output
from whisper_build.deploy.runner import Runner, elapsed, run_in_repo
from whisper_build.deploy.steps import Step, diff_command
from whisper_build.paths import REPO_ROOT

Out = Callable[[str], None]
Kubectl = Callable[[Sequence[str]], str]
RunCommand = Callable[[Sequence[str]], None]


def relative_config_path(path: Path, repo_root: Path) -> str:
    """``path`` relative to ``repo_root`` when inside it (CDK runs from there), else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(repo_root))
    except ValueError:
        return str(resolved)


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


def account_mismatch(config: DeploymentConfig, account: str) -> str | None:
    """The refusal when the config pins ``account`` and the credentials are for another; else ``None``."""
    if config.account is None or config.account == account:
        return None
    return (
        f"the config pins account {config.account} (account:) but your credentials ({credential_source()}) are for "
        f"account {account}. Use a profile of account {config.account}: `aws configure list-profiles`, then e.g. "
        f"`AWS_PROFILE=<profile> make deploy CONFIG=…` (`aws sso login --profile <profile>` first for SSO)"
    )


def _load(args: argparse.Namespace) -> DeploymentConfig | None:
    """The config of ``--config``; ``None``, with the reason printed, when invalid or CDK Pipelines deploys it."""
    try:
        config = load_config(args.config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return None
    if config.pipeline.enabled:
        print(
            f"error: {args.config} has a pipeline source (pipeline.connection_arn): CDK Pipelines deploys it. "
            f"Deploy the pipeline once with `npx cdk deploy --all -c config={args.config}` (docs/deploy.md); "
            "make deploy drives workstation deployments (configs without a pipeline).",
            file=sys.stderr,
        )
        return None
    return config


def main(
    argv: Sequence[str] | None = None,
    *,
    out: Out = print,
    run_command: RunCommand = run_in_repo,
    boto3_module: Any = None,
    kubectl: Kubectl = kubectl_output,
    endpoint_wait_s: float = ENDPOINT_WAIT_SECONDS,
) -> int:
    """Entry point; returns the exit status (0 done, 1 a step failed, 2 bad config or missing prerequisite).

    Args:
        argv: The arguments (:func:`.args.build_parser`); ``None``: ``sys.argv``.
        out: Line printer of progress and results (errors go to stderr).
        run_command: Runs one argv from the repository root, raising on failure.
        boto3_module: ``boto3`` or a stand-in with its ``client`` / ``resource`` factories; imported
            when ``None`` and needed (never in a dry run).
        kubectl: Runs a kubectl argv and returns its stdout.
        endpoint_wait_s: How long to wait for the load balancer's address, seconds.
    """
    args = build_parser().parse_args(argv)
    config = _load(args)
    if config is None:
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
            return endpoint(config, config_file, account, out, kubectl, args.dry_run, endpoint_wait_s)
        return _pods(config, account, out, kubectl, args.dry_run, boto3_module)
    if args.action == "diff":
        return _diff(config_file, out, run_command, args.dry_run)
    if args.action == "publish-ctranslate2" and not ctranslate2_targets(config):
        print(
            f"error: no GPU group of {args.config} has serving_engine: ctranslate2: set it on the groups whose "
            "TensorRT-LLM engine cannot be built first (docs/deploy.md, 'If the engine build fails')",
            file=sys.stderr,
        )
        return 2
    return _run_steps(args, config, config_file, out, run_command, boto3_module, kubectl, endpoint_wait_s)


def _print_notes(args: argparse.Namespace, config: DeploymentConfig, out: Out) -> None:
    """The Grafana prerequisite (a whole deploy with Grafana on) and, in a dry run, what the real run checks first."""
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


def _prerequisite_problems(args: argparse.Namespace, config: DeploymentConfig) -> list[str]:
    """The local tools the steps about to run need, each missing or too old one with what to install."""
    version = config.cluster.kubernetes_version
    if args.only == "kubectl":  # make kubeconfig: the AWS CLI and kubectl only
        return prereqs.check_aws_cli() + prereqs.check_kubectl(version)
    if args.only == "capacity":  # make capacity: boto3 only
        return []
    if args.action == "publish-ctranslate2":
        return prereqs.check_aws_cli()
    if args.action == "deploy":
        return prereqs.check_all(version)
    return prereqs.check_node() + prereqs.check_aws_cli() + prereqs.check_kubectl(version)


def _open_session(
    args: argparse.Namespace, config: DeploymentConfig, out: Out, boto3_module: Any, kubectl: Kubectl
) -> AwsSession | None:
    """Check the tools, read the caller's identity and refuse a mismatched account; ``None`` (reason printed) on refusal."""
    problems = _prerequisite_problems(args, config)
    if problems:
        print(
            "error: missing prerequisites (docs/deploy.md, Prerequisites):\n  " + "\n  ".join(problems),
            file=sys.stderr,
        )
        return None
    if boto3_module is None:
        import boto3 as boto3_module  # noqa: PLC0415 (not needed for --dry-run)
    try:
        account, caller = credentials.caller_identity(boto3_module, config.region)
    except credentials.CredentialsProblem as problem:
        print(f"error: {problem}", file=sys.stderr)
        return None
    out(f"{args.action} INTO account {account}, region {config.region}, as {caller} ({credential_source()})")
    refusal = account_mismatch(config, account)
    if refusal:
        print(f"error: {refusal}", file=sys.stderr)
        return None
    return AwsSession(config, account, caller, boto3_module.client, boto3_module.resource, out, kubectl)


def _run_steps(
    args: argparse.Namespace, config: DeploymentConfig, config_file: str, out: Out, run_command: RunCommand,
    boto3_module: Any, kubectl: Kubectl, endpoint_wait_s: float,
) -> int:  # fmt: skip
    """Deploy, destroy or publish-ctranslate2: print (dry run) or run the plan, then the closing lines."""
    steps = _plan(args, config, config_file, config.account or "<account>")
    if args.only is not None and args.only not in [step.name for step in steps]:
        print(f"error: --only {args.only}: no such step; steps: {', '.join(s.name for s in steps)}", file=sys.stderr)
        return 2
    out(f"{args.action} {config_file}: project {config.project_name}, region {config.region}"
        + (" (dry run: nothing is run)" if args.dry_run else ""))  # fmt: skip
    session: AwsSession | None = None
    account = config.account or "<account>"
    _print_notes(args, config, out)
    if not args.dry_run:
        session = _open_session(args, config, out, boto3_module, kubectl)
        if session is None:
            return 2
        account = session.account
    steps = _plan(args, config, config_file, account)
    if args.only is not None:
        steps = [step for step in steps if step.name == args.only]
    elif args.dry_run and args.action == "deploy":
        steps = _without_mig_steps(steps, config, out)
    try:
        total = Runner(steps, session, out, run_command).run()
    except aws.DeployError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.action == "destroy" and args.only is None:
        for line in after_destroy_lines(config, account):
            out(line)
    if not args.dry_run:
        out(f"{args.action} finished in {elapsed(total)}")
    if args.action == "deploy" and args.only is None:
        return endpoint(config, config_file, account, out, kubectl, args.dry_run, endpoint_wait_s)
    return 0


MIG_STEPS = ("mig-drain", "mig-resume")


def _without_mig_steps(steps: list[Step], config: DeploymentConfig, out: Out) -> list[Step]:
    """A dry run of a config where no GPU group has ``mig_profile``: the MIG steps left out, said in one line.

    The real run keeps them: they act only when a deployed group still has a MIG layout the config removes.
    """
    if any(group.mig is not None for group in config.gpu_groups):
        return steps
    out(
        f"not listed: {', '.join(MIG_STEPS)} (no GPU group has mig_profile; the real run only checks whether a "
        "deployed group still has a MIG layout this config removes, and then drains it before step stacks)"
    )
    return [step for step in steps if step.name not in MIG_STEPS]


def _plan(args: argparse.Namespace, config: DeploymentConfig, config_file: str, account: str) -> list[Step]:
    """The steps of ``args.action`` (deploy, destroy or publish-ctranslate2)."""
    if args.action == "deploy":
        return deploy_steps(config, config_file, account, approve=args.approve)
    if args.action == "destroy":
        return destroy_steps(config, config_file, args.purge, account)
    return ctranslate2_steps(config, account, image_ctranslate2_version())


SERVING_SET = REPO_ROOT / "requirements" / "serving.txt"
"""The serving install set, whose pins the serving image installs (whisper_build/image/Dockerfile)."""


def image_ctranslate2_version(serving_set: Path = SERVING_SET) -> str | None:
    """The serving image's CTranslate2 version: the ``ctranslate2==`` pin of the serving set; None without one.

    Read from the file, not from this environment: ``make synth``'s infrastructure set has no CTranslate2.
    """
    for line in serving_set.read_text(encoding="utf-8").splitlines():
        if line.startswith("ctranslate2=="):
            return line.removeprefix("ctranslate2==").strip()
    return None


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
        return credentials.caller_identity(boto3_module, config.region)[0]
    except credentials.CredentialsProblem as problem:
        print(f"error: {problem}", file=sys.stderr)
        return None


def _pods(
    config: DeploymentConfig, account: str, out: Callable[[str], None], kubectl: Callable[[Sequence[str]], str],
    dry_run: bool, boto3_module: Any,
) -> int:  # fmt: skip
    """``make pods``: HyperPod's side, then one line per serving pod; 1 on a real failure or unreadable pods.

    HyperPod's side (:mod:`.cluster_progress`): nodes per instance group and type, and its capacity errors.
    """
    cluster = names.hyperpod_cluster_name(config)
    if dry_run:
        out(f"$ aws sagemaker describe-cluster --cluster-name {cluster} --region {config.region}")
        out("$ " + shlex.join(pods.pods_command(config, account)))
        return 0
    if boto3_module is None:
        import boto3 as boto3_module  # noqa: PLC0415 (not needed for --dry-run)
    for line in cluster_progress.safe_progress(boto3_module.client("sagemaker", region_name=config.region), cluster):
        out(f"hyperpod: {line}")
    try:
        states = pods.read_pods(config, account, kubectl)
    except pods.PodsUnreadable as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for line in pods.lines(states, config.serving.namespace):
        out(line)
    return 1 if pods.has_failure(states) else 0
