"""The steps of ``make deploy`` and ``make destroy``, derived from one config file.

Every step names its commands with the config carried through: CDK gets ``-c config=<file>``, the
chart publish script gets the file, and every AWS name (stacks, cluster, CodeBuild projects, ECR
repositories, buckets) comes from :mod:`settings.names` applied to the same config. A step is a
title, duration and cost notes, the commands it runs (printed by ``--dry-run``) and an optional
``skip`` check that makes re-running it cheap. The runner is :mod:`whisper_build.workstation.deploy.cli`.

Durations are estimates (sources in docs/deploy.md, "Durations"), not measurements: no deployment
was run from this repository. Prices are US dollars, on-demand, us-east-1, with their sources below.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from settings import labels, names
from settings.schema import DeploymentConfig
from whisper_build.workstation.deploy import capacity, kube, teardown


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
        rerun: what running it again does, after success or after a failure (docs/deploy.md, Resuming).
        skip: ``(description, check)``: the step is skipped when ``check(session)`` is true (re-runs).
        diagnose: on failure, ``diagnose(session)`` returns lines explaining it (printed before the error).
    """

    name: str
    title: str
    duration: str
    cost: str
    actions: tuple[Action, ...]
    rerun: str = ""
    skip: tuple[str, Callable[[Any], bool]] | None = None
    diagnose: Callable[[Any], list[str]] | None = None


def cdk(*args: str, config_file: str) -> Command:
    """``npx cdk <args> -c config=<config_file>``."""
    return Command(("npx", "cdk", *args, "-c", f"config={config_file}"))


EKS_USD_PER_CLUSTER_HOUR = 0.10
"""EKS control plane, Kubernetes version in standard support (extended support: 0.60). Source: AWS
Containers blog, "Amazon EKS extended support for Kubernetes versions pricing" (2024),
https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/"""
NAT_USD_PER_GATEWAY_HOUR = 0.045
"""NAT gateway, us-east-1, plus 0.045 USD per GB processed. Source: the AWS VPC pricing page
(https://aws.amazon.com/vpc/pricing/) as quoted by third-party summaries in 2026; not read first-hand."""
PRICES_AS_OF = "2026-11-30"


def gpu_price_lookup(instance_type: str) -> str:
    """AWS Price List command listing the us-east-1 SageMaker price products of ``instance_type``.

    The HyperPod prices of ``ml.*`` instances could not be sourced for this repository; AWS's price
    list has them (one product per use: training, hosting, HyperPod cluster, …; each with its
    ``usagetype`` and ``pricePerUnit.USD`` per hour). Not run here (no AWS credentials).
    """
    return (
        "aws pricing get-products --region us-east-1 --service-code AmazonSageMaker --filters "
        f"Type=TERM_MATCH,Field=instanceName,Value={instance_type} "
        "Type=TERM_MATCH,Field=regionCode,Value=us-east-1 --output json"
    )


def _gpu_cost_note(config: DeploymentConfig) -> str:
    fleet = ", ".join(f"{g.instance_count} × {g.instance_type}" for g in config.gpu_groups if g.instance_count)
    expensive = [g.instance_type for g in config.gpu_groups if g.instance.gpus >= 8 and g.instance_count]
    note = (
        f"from here on, per hour until `make destroy`: GPU instances {fleet} (SageMaker HyperPod on-demand "
        "price per instance-hour; not sourced here, docs/deploy.md Cost shows how to look it up), "
        f"EKS control plane {EKS_USD_PER_CLUSTER_HOUR:.2f} USD, "
        f"{config.cluster.system_node_count} × {config.cluster.system_node_instance_type} system nodes (EC2 on-demand), "
        f"{config.network.nat_gateways} NAT gateway(s) × {NAT_USD_PER_GATEWAY_HOUR} USD (+ per GB)"
    )
    if expensive:
        note += (
            f". WARNING: {', '.join(sorted(set(expensive)))} is an 8-GPU instance billed at tens of US dollars per "
            "hour each: a forgotten cluster costs hundreds of dollars a day"
        )
    return note


def kubectl_step(config: DeploymentConfig) -> Step:
    """Your ``kubectl`` access: an EKS access entry for the caller, then ``aws eks update-kubeconfig``.

    Also ``make kubeconfig CONFIG=…`` on its own: it waits for the cluster to exist, so it can run in
    a second shell while step ``stacks`` is still creating the HyperPod instances.
    """
    cluster, namespace, region = names.cluster_name(config), config.serving.namespace, config.region
    return Step(
        "kubectl",
        f"kubectl access for you: waits for EKS cluster {cluster}, gives your IAM role an access entry with "
        f"AmazonEKSAdminPolicy on namespace {namespace}, and a kubeconfig context",
        "under 1 min once the cluster is ACTIVE",
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
        "idempotent: an existing access entry is kept, the policy association and kubeconfig entry are rewritten",
    )


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
    engine_projects = [names.engine_project_name(config, target) for target in config.engine_targets]
    rollout = names.rollout_project_name(config)
    image_project = names.image_project_name(config)
    builds_rerun = (
        "a build still running from an interrupted run is waited on, not started twice; a failed build is started again"
    )
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
                        + "  # unless running; then BatchGetBuilds every 30 s until all finish",
                        lambda session: session.run_builds(engine_projects),
                    ),
                ),
                f"every project checks whether its engine is current and exits in about 2 min if so; {builds_rerun}",
            ),
        ]
        if engine_projects
        else []
    )
    return [
        Step(
            "capacity",
            "before anything is created: the instance types are offered in the region, and the account's "
            "quotas allow the HyperPod instances and the CodeBuild builds",
            "under 1 min",
            "",
            (AwsCall(capacity.capacity_commands(config), lambda session: session.check_capacity()),),
            "read-only; fails listing every missing offering or quota, its name and the increase request command",
        ),
        Step(
            "bootstrap",
            f"CDK bootstrap of aws://{account}/{region} (asset bucket, deploy roles)",
            "1–3 min",
            "",
            (cdk("bootstrap", f"aws://{account}/{region}", config_file=config_file),),
            "idempotent: an up-to-date CDKToolkit stack is left as it is",
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
            "CloudFormation applies only differences; a failed first create rolls back, and the retained buckets "
            "and repositories it had created are imported on the next run",
        ),
        Step(
            "hyperpod-chart",
            f"HyperPod dependency chart {chart_version} → {config.cluster.hyperpod_chart.oci_repository or chart_repo}",
            "2–5 min",
            "",
            (Command(("scripts/publish_hyperpod_chart.sh", config_file)),),
            "skipped once the chart version is in ECR; otherwise packaged and pushed again",
            chart_skip,
        ),
        Step(
            "stacks",
            "every stack: network, EKS + HyperPod cluster, observability, workloads, engine builds "
            "(CloudFormation waits for each)",
            "60–120 min (EKS about 15 min, HyperPod instances 20–60 min)",
            _gpu_cost_note(config),
            (cdk("deploy", "--all", "--require-approval", "never", config_file=config_file),),
            "stacks already created are updated in place (minutes when nothing changed). A stack whose FIRST "
            "create fails is rolled back: CloudFormation deletes what it created (the EKS cluster, the HyperPod "
            "instances), and the next run deletes the ROLLBACK_COMPLETE stack and creates it again from the start",
        ),
        kubectl_step(config),
        Step(
            "serving-image",
            f"serving image {image_repo}:{image_tag} (CodeBuild {image_project}; skips an existing tag)",
            "20–40 min the first time",
            "CodeBuild compute minutes while it builds",
            (
                AwsCall(
                    f"aws codebuild start-build --project-name {image_project} --region {region}  "
                    "# unless a build is running; then BatchGetBuilds every 30 s until it finishes",
                    lambda session: session.run_builds([image_project]),
                ),
            ),
            f"skipped once the tag is in ECR; {builds_rerun}",
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
            f"restarts the pods again (a rolling restart; harmless); {builds_rerun}",
        ),
        Step(
            "serving",
            "wait until every GPU group's pods are ready",
            "1–10 min",
            "",
            tuple(
                Command(
                    kube.kubectl_argv(
                        config,
                        account,
                        "rollout",
                        "status",
                        f"deployment/{names.workload_name(group)}",
                        "--timeout=30m",
                    )
                )
                for group in config.gpu_groups
            ),  # fmt: skip
            "read-only: waits again",
            diagnose=lambda session: session.pod_report(),
        ),
    ]


def endpoint_objects(config: DeploymentConfig) -> tuple[str, ...]:
    """What destroy's endpoint step deletes (``kubectl delete`` arguments) so their load balancers go first.

    ``deployments``: ``service/whisper`` (and ``ingress/whisper`` for ``endpoint.kind: alb``). The
    ``inference_operator`` target has no Service of ours: its ``InferenceEndpointConfig`` objects
    (CRD ``inferenceendpointconfigs.inference.sagemaker.aws.amazon.com``, labelled with
    ``k8s_charts.naming.app_labels``), whose deletion the operator answers by removing what it made
    for them (pods, load balancer, the SageMaker endpoint; the billing step checks the endpoint).
    """
    if config.serving.target == "inference_operator":
        return (INFERENCE_ENDPOINT_CONFIGS, "-l", f"{labels.APP_NAME_LABEL}={labels.APP_NAME}")
    service = names.ENDPOINT_SERVICE_NAME
    return (f"service/{service}", *((f"ingress/{service}",) if config.endpoint.kind == "alb" else ()))


INFERENCE_ENDPOINT_CONFIGS = "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com"
"""The HyperPod inference operator's CRD as ``<plural>.<group>`` (its schema is vendored in ``tests/data/crds/``)."""


def destroy_steps(config: DeploymentConfig, config_file: str, purge: bool, account: str) -> list[Step]:
    """``make destroy``: the load balancer first, every stack, what AWS kept, and a check that nothing bills.

    Safe to re-run at any point (e.g. after SSO credentials expired mid-delete): the endpoint step is
    skipped once the EKS cluster is gone, the stacks step skips stacks already deleted, waits for ones
    still ``DELETE_IN_PROGRESS`` and names the resources that blocked a ``DELETE_FAILED`` one. Its
    kubectl call goes to the cluster of ``account`` (``<account>`` in a dry run; :mod:`.kube`).
    """
    cluster, region = names.cluster_name(config), config.region
    deleted = endpoint_objects(config)
    stacks = [names.stack_name(config, stack) for stack in names.STACKS]
    return [
        Step(
            "endpoint",
            f"delete the endpoint ({' '.join(deleted)}) first, so the AWS Load Balancer Controller, still running, "
            "deletes its load balancer, target groups and security groups before the VPC goes",
            "1–5 min",
            "",
            (
                *kubectl_step(config).actions,
                Command(
                    kube.kubectl_argv(
                        config, account, "delete", *deleted, "--ignore-not-found", "--wait=true", "--timeout=10m"
                    )
                ),
                AwsCall(
                    f"aws resourcegroupstaggingapi get-resources --tag-filters Key={teardown.LBC_CLUSTER_TAG},"
                    f"Values={cluster} --resource-type-filters elasticloadbalancing:loadbalancer --region {region}"
                    "  # every 15 s until empty (10 min at most)",
                    lambda session: session.wait_load_balancers_gone(),
                ),
            ),
            "skipped once the EKS cluster is gone or no longer ACTIVE; otherwise deletes again (--ignore-not-found)",
            (f"EKS cluster {cluster} does not exist or is not ACTIVE", lambda session: not session.cluster_active()),
        ),
        Step(
            "stacks",
            "delete every stack (HyperPod cluster, EKS, VPC, observability, build projects)",
            "30–60 min",
            "billing of GPU instances, EKS, NAT gateways stops when this finishes",
            (
                AwsCall(
                    f"aws cloudformation describe-stacks --stack-name <each of {', '.join(stacks)}> --region {region}"
                    "  # wait while any is DELETE_IN_PROGRESS",
                    lambda session: session.wait_stack_deletes(),
                ),
                cdk("destroy", "--all", "--force", config_file=config_file),
                AwsCall(
                    "aws cloudformation list-stack-resources --stack-name <stack> --region "
                    f"{region}  # a stack left: its DELETE_FAILED resources and why",
                    lambda session: session.check_stacks_gone(),
                ),
            ),
            "stacks already deleted are skipped, deletions still running are waited for, a DELETE_FAILED stack "
            "is deleted again (its blocking resources are printed)",
            (f"none of {', '.join(stacks)} exists", lambda session: session.stacks_gone()),
            diagnose=lambda session: session.stack_failure_report(),
        ),
        Step(
            "retained",
            "list what outlives the stacks (RemovalPolicy.RETAIN, and log groups AWS services created)"
            + (" and DELETE it" if purge else "")
            + "; counts what earlier deploy/destroy cycles left",
            "under 1 min" + (" (longer for a big model bucket)" if purge else ""),
            "retained buckets, repositories and log groups bill for storage, each KMS key 1 USD a month, until deleted",
            (
                AwsCall(
                    f"aws s3api head-bucket / aws ecr describe-repositories / aws resourcegroupstaggingapi get-resources "
                    f"--tag-filters Key={names.PROJECT_TAG},Values={config.project_name} (buckets, KMS keys, secrets) "
                    f"/ aws logs describe-log-groups (EKS, CodeBuild, Lambda, HyperPod) --region {config.region}"
                    + ("  # then delete them" if purge else ""),
                    lambda session: session.report_retained(purge),
                ),
            ),
            "read-only without PURGE; with PURGE deletes whatever is still there",
        ),
        Step(
            "billing",
            "check that nothing of the deployment bills by the hour any more: HyperPod and EKS clusters, NAT "
            "gateways, Elastic IPs, load balancers, unattached EBS volumes and network interfaces",
            "under 1 min",
            "",
            (
                AwsCall(
                    " && ".join(
                        teardown.billing_check_commands(
                            config.project_name, cluster, names.hyperpod_cluster_name(config), region
                        )
                    ),  # fmt: skip
                    lambda session: session.check_billing(),
                ),
            ),
            "read-only; fails listing each leftover and the command that deletes it",
        ),
    ]


def relative_config_path(path: Path, repo_root: Path) -> str:
    """``path`` relative to ``repo_root`` when inside it (CDK runs from there), else absolute."""
    resolved = path.resolve()
    try:
        return str(resolved.relative_to(repo_root))
    except ValueError:
        return str(resolved)
