"""The steps of ``make deploy`` and ``make destroy``, derived from one config file.

Every step names its commands with the config carried through: CDK gets ``-c config=<file>``, the
chart publish script gets the file, and every AWS name (stacks, cluster, CodeBuild projects, ECR
repositories, buckets) comes from :mod:`settings.names` applied to the same config. A step is a
title, duration and cost notes, the commands it runs (printed by ``--dry-run``) and an optional
``skip`` check that makes re-running it cheap. The runner is :mod:`whisper_build.workstation.deploy.cli`.

Durations and costs are estimates from the AWS documentation of each service, not measurements
(no deployment was run from this repository).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from settings import names
from settings.schema import DeploymentConfig


@dataclass(frozen=True)
class Command:
    """A program to run from the repository root, e.g. ``npx cdk deploy ...``."""

    argv: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class AwsCall:
    """An AWS API action done with boto3; ``text`` is its AWS CLI equivalent (what ``--dry-run`` prints)."""

    text: str
    run: Callable[[Any], Any] = field(compare=False, repr=False)

    def __str__(self) -> str:
        return self.text


Action = Command | AwsCall


@dataclass(frozen=True)
class Step:
    """One step of the journey.

    Attributes:
        name: short id, e.g. ``stacks``.
        title: what it does.
        duration: expected wall time (estimate).
        cost: what starts billing in this step, or "" when nothing notable.
        actions: run in order.
        skip: ``(description, check)``: the step is skipped when ``check(session)`` is true (re-runs).
    """

    name: str
    title: str
    duration: str
    cost: str
    actions: tuple[Action, ...]
    skip: tuple[str, Callable[[Any], bool]] | None = None


def cdk(*args: str, config_file: str) -> Command:
    """``npx cdk <args> -c config=<config_file>``."""
    return Command(("npx", "cdk", *args, "-c", f"config={config_file}"))


def _gpu_cost_note(config: DeploymentConfig) -> str:
    fleet = ", ".join(f"{g.instance_count} × {g.instance_type}" for g in config.gpu_groups if g.instance_count)
    expensive = [g.instance_type for g in config.gpu_groups if g.instance.gpus >= 8 and g.instance_count]
    note = (
        f"GPU instances bill from the moment HyperPod creates them until `make destroy`: {fleet} "
        "(SageMaker HyperPod on-demand prices per instance-hour, see the SageMaker pricing page), "
        f"plus EKS control plane, {config.cluster.system_node_count} × {config.cluster.system_node_instance_type}, "
        f"{config.network.nat_gateways} NAT gateway(s)"
    )
    if expensive:
        note += (
            f". WARNING: {', '.join(sorted(set(expensive)))} is an 8-GPU instance billed at tens of US dollars per "
            "hour each: a forgotten cluster costs hundreds of dollars a day"
        )
    return note


def deploy_steps(config: DeploymentConfig, config_file: str, account: str) -> list[Step]:
    """The deploy journey for ``config`` (read from ``config_file``) in ``account``.

    Args:
        config: The validated config.
        config_file: Its path as given to CDK (relative to the repository root where possible).
        account: AWS account id (``<account>`` in a dry run without credentials).

    AWS actions and skip checks receive the runner's session
    (:class:`whisper_build.workstation.deploy.cli.AwsSession`) when they run; planning calls nothing.
    """
    region = config.region
    chart_repo = names.chart_repository_name(config)
    chart_version = config.cluster.hyperpod_chart.version
    image_repo = names.serving_repository_name(config)
    image_tag = config.serving.image_tag
    cluster = names.cluster_name(config)
    namespace = config.serving.namespace
    engine_projects = [names.engine_project_name(config, target) for target in config.engine_targets]
    rollout = names.rollout_project_name(config)
    image_project = names.image_project_name(config)
    chart_skip = None
    if config.cluster.hyperpod_chart.oci_repository is None:
        chart_skip = (
            f"{chart_repo}:{chart_version} is already in ECR (aws ecr describe-images --repository-name {chart_repo} "
            f"--image-ids imageTag={chart_version} --region {region})",
            lambda session: session.image_exists(chart_repo, chart_version),
        )
    # an architecture served only by torch groups builds no engine; a fleet of them has no engines step
    engines = (
        [
            Step(
                "engines",
                f"TensorRT-LLM engines of {config.model.name} for {', '.join(config.engine_targets)} in parallel "
                "(each project skips an engine that is current; serving pods wait in Init until theirs is published)",
                "20–60 min the first time, about 2 min when current",
                "CodeBuild minutes; the Job runs on the group's own (already billed) GPU nodes "
                "(or a reserved CodeBuild GPU fleet for engine_builder: codebuild_fleet)",
                (
                    AwsCall(
                        " && ".join(
                            f"aws codebuild start-build --project-name {p} --region {region}" for p in engine_projects
                        )
                        + "  # then BatchGetBuilds every 30 s until all finish",
                        lambda session: session.run_builds(engine_projects),
                    ),
                ),
            ),
        ]
        if engine_projects
        else []
    )
    return [
        Step(
            "bootstrap",
            f"CDK bootstrap of aws://{account}/{region} (asset bucket, deploy roles; idempotent)",
            "1–3 min",
            "",
            (cdk("bootstrap", f"aws://{account}/{region}", config_file=config_file),),
        ),
        Step(
            "storage",
            f"{names.stack_name(config, 'Storage')}: model and lifecycle buckets, ECR repositories "
            "(buckets and repositories retained by an earlier `make destroy` are imported, not re-created)",
            "2–4 min",
            "",
            (
                cdk(
                    "deploy",
                    names.stack_name(config, "Storage"),
                    "--exclusively",
                    "--require-approval",
                    "never",
                    "--import-existing-resources",
                    config_file=config_file,
                ),
            ),  # fmt: skip
        ),
        Step(
            "hyperpod-chart",
            f"HyperPod dependency chart {chart_version} → {config.cluster.hyperpod_chart.oci_repository or chart_repo}",
            "2–5 min",
            "",
            (Command(("scripts/publish_hyperpod_chart.sh", config_file)),),
            chart_skip,
        ),
        Step(
            "stacks",
            "every stack: network, EKS + HyperPod cluster, observability, workloads, engine builds "
            "(CloudFormation waits for each)",
            "60–120 min (EKS about 15 min, HyperPod instances 20–60 min)",
            _gpu_cost_note(config),
            (cdk("deploy", "--all", "--require-approval", "never", config_file=config_file),),
        ),
        Step(
            "serving-image",
            f"serving image {image_repo}:{image_tag} (CodeBuild {image_project}; skips an existing tag)",
            "20–40 min the first time",
            "CodeBuild compute minutes while it builds",
            (
                AwsCall(
                    f"aws codebuild start-build --project-name {image_project} --region {region}  "
                    "# then BatchGetBuilds every 30 s until it finishes",
                    lambda session: session.run_builds([image_project]),
                ),
            ),
            (
                f"{image_repo}:{image_tag} is already in ECR",
                lambda session: session.image_exists(image_repo, image_tag),
            ),
        ),
        *engines,
        Step(
            "rollout",
            f"restart the serving Deployments so they load current.json (CodeBuild {rollout})",
            "3–10 min",
            "",
            (
                AwsCall(
                    f"aws codebuild start-build --project-name {rollout} --region {region}  # then wait",
                    lambda session: session.run_builds([rollout]),
                ),
            ),
        ),
        Step(
            "kubectl",
            f"kubectl access for you: an EKS access entry with AmazonEKSAdminPolicy on namespace {namespace}, "
            "and a kubeconfig context",
            "under 1 min",
            "",
            (
                AwsCall(
                    f"aws eks wait cluster-active --name {cluster} --region {region} && "
                    f"aws eks create-access-entry --cluster-name {cluster} --principal-arn <your IAM role> "
                    f"--region {region}  # skipped if it exists; then associate-access-policy --policy-arn "
                    f"arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy "
                    f"--access-scope type=namespace,namespaces={namespace}",
                    lambda session: session.grant_kubectl(cluster, namespace),
                ),
                Command(("aws", "eks", "update-kubeconfig", "--name", cluster, "--region", region)),
            ),
        ),
        Step(
            "serving",
            "wait until every GPU group's pods are ready",
            "1–10 min",
            "",
            tuple(
                Command(
                    (
                        "kubectl",
                        "-n",
                        namespace,
                        "rollout",
                        "status",
                        f"deployment/{names.workload_name(group)}",
                        "--timeout=30m",
                    )
                )
                for group in config.gpu_groups
            ),  # fmt: skip
        ),
    ]


def destroy_steps(config: DeploymentConfig, config_file: str, purge: bool) -> list[Step]:
    """``make destroy``: every stack, then the report of what AWS kept (and, with ``purge``, its deletion)."""
    return [
        Step(
            "destroy",
            "delete every stack (HyperPod cluster, EKS, VPC, observability, build projects)",
            "30–60 min",
            "billing of GPU instances, EKS, NAT gateways stops when this finishes",
            (cdk("destroy", "--all", "--force", config_file=config_file),),
        ),
        Step(
            "retained",
            "list what CloudFormation kept (RemovalPolicy.RETAIN)" + (" and DELETE it" if purge else ""),
            "under 1 min" + (" (longer for a big model bucket)" if purge else ""),
            "retained buckets and repositories bill for storage until deleted",
            (
                AwsCall(
                    f"aws s3api head-bucket / aws ecr describe-repositories / aws resourcegroupstaggingapi get-resources "
                    f"--tag-filters Key={names.PROJECT_TAG},Values={config.project_name}"
                    + ("  # then empty and delete them" if purge else ""),
                    lambda session: session.report_retained(purge),
                ),
            ),
        ),
    ]


def relative_config_path(path: Path, repo_root: Path) -> str:
    """``path`` relative to ``repo_root`` when inside it (CDK runs from there), else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(repo_root))
    except ValueError:
        return str(resolved)
