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

from settings import labels, names, storage
from settings.schema import WHISPER_MODELS, DeploymentConfig
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


@dataclass(frozen=True)
class WaitAll:
    """Commands that wait under ONE deadline: each gets ``--timeout=<seconds left of the deadline>s``.

    ``kubectl rollout status`` takes a timeout per call; running one per GPU group with a fixed
    timeout each would let the waits add up (two groups, 30 min each: an hour). The runner
    (:class:`whisper_build.workstation.deploy.cli.Runner`) appends what is left of ``deadline_s`` to
    each argv in turn and fails once nothing is left.
    """

    argvs: tuple[tuple[str, ...], ...]
    deadline_s: int

    def __str__(self) -> str:
        return " && ".join(shlex.join(argv) for argv in self.argvs) + (
            f"  # one deadline for all: {self.deadline_s // 60} min together (each gets --timeout=<seconds left>)"
        )


Action = Command | AwsCall | WaitAll


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
"""EKS control plane, Kubernetes version in standard support. Source: AWS Containers blog, "Amazon
EKS extended support for Kubernetes versions pricing" (2024),
https://aws.amazon.com/blogs/containers/amazon-eks-extended-support-for-kubernetes-versions-pricing/"""
EKS_EXTENDED_USD_PER_CLUSTER_HOUR = 0.60
"""EKS control plane, Kubernetes version in extended support (same source)."""
EKS_STANDARD_SUPPORT_ENDS = {"1.32": "2026-03-23", "1.33": "2026-07-29", "1.34": "2026-12-02", "1.35": "2027-03-27"}
"""End of EKS standard support per Kubernetes minor version (extended support follows for 12 months).
Source: endoflife.date/amazon-eks (read 2026-11-30), a compilation of the EKS Kubernetes release
calendar (https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html, not read
first-hand); consistent with the EKS user guide's "standard support in Amazon EKS for the first 14
months after it's released" (1.33: released in EKS 2025-05-28)."""
NAT_USD_PER_GATEWAY_HOUR = 0.045
"""NAT gateway, us-east-1, plus 0.045 USD per GB processed. Source: the AWS VPC pricing page
(https://aws.amazon.com/vpc/pricing/) as quoted by third-party summaries in 2026; not read first-hand."""
PUBLIC_IPV4_USD_PER_ADDRESS_HOUR = 0.005
"""Every AWS-provided public IPv4 address (a NAT gateway's Elastic IP, an internet-facing load
balancer's address per AZ) since 2024-02-01. Source: AWS's announcement ("Identify and optimize
public IPv4 address usage on AWS", AWS Networking & Content Delivery blog, 2023) as quoted by
third-party summaries (doit.com, 2024); not read first-hand."""
INTERFACE_ENDPOINT_USD_PER_GB = 0.01
"""Interface VPC endpoint data processed, first PB a month in a region. Source: AWS PrivateLink
pricing, https://aws.amazon.com/privatelink/pricing/ (read from a mirror of that page); the same
page bills "each hour that your VPC endpoint remains provisioned in each Availability Zone" at a
per-hour price not captured here."""
CLOUDWATCH_LOGS_USD_PER_GB_INGESTED = 0.50
"""CloudWatch Logs standard ingestion, us-east-1 (vended logs such as VPC flow logs are tiered from
this price down). Source: third-party summaries of https://aws.amazon.com/cloudwatch/pricing/
(cloudstaq.io 2020, 2025 EKS guides); not read first-hand."""
EKS_CONTROL_PLANE_LOG_TYPES = 5
"""api, audit, authenticator, controllerManager, scheduler (stacks/cluster_stack.py ``cluster_logging``)."""
PRICES_AS_OF = "2026-11-30"
SERVING_WAIT_S = 15 * 60
"""Step ``serving``: every GPU group's Deployment must be ready within this, all groups together."""
REQUIRE_APPROVAL_NEVER = ("--require-approval", "never")
REQUIRE_APPROVAL_ANY_CHANGE = ("--require-approval", "any-change")
"""``APPROVE=1``: CDK's ``any-change``, "Prompt for approval for any type of change to the stack"
(aws-cdk-lib ``cloud_assembly_schema.RequireApproval``,
https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.cloud_assembly_schema.RequireApproval.html)."""


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


def eks_cost_item(version: str, as_of: str = PRICES_AS_OF) -> tuple[str, str]:
    """The EKS control plane's ``(item, price)``: extended-support price once ``version`` left standard support.

    Args:
        version: ``cluster.kubernetes_version``, e.g. ``"1.33"``.
        as_of: ISO date the prices hold for (:data:`PRICES_AS_OF`).
    """
    ends = EKS_STANDARD_SUPPORT_ENDS.get(version)
    if ends is None:
        return (f"EKS control plane: Kubernetes {version}, support dates not sourced",
                f"{EKS_USD_PER_CLUSTER_HOUR:.2f} USD an hour, {EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} in extended "
                f"support: aws eks describe-cluster-versions --cluster-versions {version} "
                "--query 'clusterVersions[].endOfStandardSupportDate'")  # fmt: skip
    if ends <= as_of:
        return (f"EKS control plane: Kubernetes {version}, in extended support since {ends}",
                f"{EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} USD an hour (standard support: {EKS_USD_PER_CLUSTER_HOUR:.2f})")  # fmt: skip
    return (f"EKS control plane: Kubernetes {version}, standard support until {ends}",
            f"{EKS_USD_PER_CLUSTER_HOUR:.2f} USD an hour, {EKS_EXTENDED_USD_PER_CLUSTER_HOUR:.2f} from {ends}")  # fmt: skip


def running_cost_items(config: DeploymentConfig) -> list[tuple[str, str]]:
    """What bills from step ``stacks`` until ``make destroy``: ``(item, price)`` pairs.

    One per row of docs/deploy.md's Cost table (``tests/test_deploy_fallbacks.py`` checks the two agree).

    Prices are the sourced ones of this module; an unsourced one says so and how to look it up.
    """
    fleet = ", ".join(f"{g.instance_count} × {g.instance_type}" for g in config.gpu_groups if g.instance_count)
    ebs_gb = sum(g.ebs_volume_gb * g.instance_count for g in config.gpu_groups)
    azs, nat = config.network.max_azs, config.network.nat_gateways
    public_ips = nat + (azs if config.endpoint.scheme == "internet-facing" else 0)
    items = [
        (f"GPU instances (HyperPod): {fleet}", "per instance-hour, not sourced: aws pricing get-products "
         "--service-code AmazonSageMaker … (docs/deploy.md, Cost)"),
        (f"HyperPod instance EBS volumes: {ebs_gb} GB in all (ebs_volume_gb × instances)",
         "per GB-month, not sourced: https://aws.amazon.com/sagemaker-ai/pricing/ (HyperPod)"),
        eks_cost_item(config.cluster.kubernetes_version),
        (f"system nodes: {config.cluster.system_node_count} × {config.cluster.system_node_instance_type}",
         "EC2 on-demand per instance-hour, not sourced: aws pricing get-products --service-code AmazonEC2 …"),
        (f"NAT gateway: {config.network.nat_gateways}",
         f"{NAT_USD_PER_GATEWAY_HOUR} USD an hour each + {NAT_USD_PER_GATEWAY_HOUR} USD per GB"),
        (f"public IPv4 addresses: {public_ips}", f"{PUBLIC_IPV4_USD_PER_ADDRESS_HOUR} USD an hour each"),
        (f"Secrets Manager interface VPC endpoint: 1 in each of {azs} AZs",
         f"per AZ-hour, not sourced, + {INTERFACE_ENDPOINT_USD_PER_GB} USD per GB"),
        (f"load balancer: 1 {config.endpoint.kind.upper()}", "hourly + capacity units, not sourced"),
        (f"CloudWatch Logs: VPC flow logs and {EKS_CONTROL_PLANE_LOG_TYPES} EKS control-plane log types",
         f"{CLOUDWATCH_LOGS_USD_PER_GB_INGESTED:.2f} USD per GB ingested (less for flow logs) + storage per GB-month"),
    ]  # fmt: skip
    if config.observability.enabled:
        items.append(("Amazon Managed Prometheus", "samples ingested/stored/queried + scraper hours, not sourced"))
        if config.observability.grafana:
            items.append(("Amazon Managed Grafana", "9 USD per active editor/admin user a month"))
    items.append(("KMS keys: 3", "1 USD per key a month"))
    if config.endpoint.auth == "api_key":
        items.append(("Secrets Manager secret", "0.40 USD a month"))
    return items


def _gpu_cost_note(config: DeploymentConfig) -> str:
    expensive = [g.instance_type for g in config.gpu_groups if g.instance.gpus >= 8 and g.instance_count]
    note = "from here on, until `make destroy` (docs/deploy.md, Cost): " + "; ".join(
        f"{item} ({price})" for item, price in running_cost_items(config)
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


def tensorrt_targets(config: DeploymentConfig) -> list[str]:
    """Engine targets at least one GPU group serves with ``tensorrt_llm`` (the ones step ``engines`` builds).

    An architecture whose groups all serve ``ctranslate2`` (the fallback while its engine cannot be
    built) or ``torch`` is left out, so a failed TensorRT-LLM build cannot block the way back to a
    first transcript (docs/deploy.md, "If the engine build fails"). Its CodeBuild project stays in
    the engine-build stack for when the group switches back.
    """
    return [
        target
        for target in config.engine_targets
        if any(group.serving_engine == "tensorrt_llm" for group in config.groups_for_target(target))
    ]


def cdk_deploy_approval(approve: bool) -> tuple[str, ...]:
    """``--require-approval never``, or ``any-change`` with ``APPROVE=1`` (CDK then asks before each change)."""
    return REQUIRE_APPROVAL_ANY_CHANGE if approve else REQUIRE_APPROVAL_NEVER


def diff_command(config_file: str) -> Command:
    """``make diff CONFIG=…``: ``cdk diff`` of every stack against what is deployed (needs credentials)."""
    return cdk("diff", "--all", config_file=config_file)


def deploy_steps(config: DeploymentConfig, config_file: str, account: str, approve: bool = False) -> list[Step]:
    """The deploy journey for ``config`` (read from ``config_file``) in ``account``.

    Args:
        config: The validated config.
        config_file: Its path as given to CDK (relative to the repository root where possible).
        account: AWS account id (``<account>`` in a dry run without credentials).
        approve: ``APPROVE=1``: the ``cdk deploy`` commands ask before every change
            (``--require-approval any-change``) instead of never.

    AWS actions and skip checks receive the runner's session
    (:class:`whisper_build.workstation.deploy.cli.AwsSession`) when they run; planning calls nothing.
    """
    region = config.region
    chart_repo = names.chart_repository_name(config)
    chart_version = config.cluster.hyperpod_chart.version
    image_repo = names.serving_repository_name(config)
    image_tag = config.serving.image_tag
    engine_projects = [names.engine_project_name(config, target) for target in tensorrt_targets(config)]
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
    # an architecture served only by ctranslate2/torch groups builds no engine; a fleet of them has no engines step
    engines = (
        [
            Step(
                "engines",
                f"TensorRT-LLM engines of {config.model.name} for {', '.join(tensorrt_targets(config))} in parallel "
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
                    *cdk_deploy_approval(approve),
                    "--import-existing-resources",
                    config_file=config_file,
                ),
            ),  # fmt: skip
            "CloudFormation applies only differences; a failed first create rolls back, and the retained buckets "
            "and repositories it had created are imported on the next run; a failed import: docs/deploy.md, "
            "'If the storage import fails'",
            diagnose=lambda session: session.storage_failure_report(),
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
            (cdk("deploy", "--all", *cdk_deploy_approval(approve), config_file=config_file),),
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
            "CodeBuild compute minutes while it runs",
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
            f"wait until every GPU group's pods are ready, {SERVING_WAIT_S // 60} min at most for all groups together",
            f"1–10 min (gives up after {SERVING_WAIT_S // 60})",
            "",
            (
                WaitAll(
                    tuple(
                        kube.kubectl_argv(
                            config, account, "rollout", "status", f"deployment/{names.workload_name(group)}"
                        )
                        for group in config.gpu_groups
                    ),
                    SERVING_WAIT_S,
                ),
            ),
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


def operator_endpoints(config: DeploymentConfig) -> list[str]:
    """The SageMaker endpoints of ``serving.target: inference_operator`` (none for ``deployments``)."""
    return names.sagemaker_endpoint_names(config) if config.serving.target == "inference_operator" else []


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
            "1–5 min usually; up to about 20 min (kubectl delete --timeout=10m, then up to 10 min for the load balancer)",
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
                            config.project_name,
                            cluster,
                            names.hyperpod_cluster_name(config),
                            region,
                            operator_endpoints(config),
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


CTRANSLATE2_VENV = ".venv-ctranslate2"
"""Where ``make publish-ctranslate2`` installs the converter (PyTorch + transformers: kept out of ``.venv``)."""


def ctranslate2_targets(config: DeploymentConfig) -> list[str]:
    """Engine targets of the groups that serve ``ctranslate2`` (each needs the conversion under its prefix)."""
    return list(
        dict.fromkeys(group.engine_target for group in config.gpu_groups if group.serving_engine == "ctranslate2")
    )


def ctranslate2_steps(config: DeploymentConfig, account: str, ctranslate2_version: str | None) -> list[Step]:
    """``make publish-ctranslate2 CONFIG=…``: convert the model to CTranslate2 (float16) once, upload it per target.

    The converter is CTranslate2's ``ct2-transformers-converter`` with the command line faster-whisper
    documents for its models (the same as the preflight's fix, :func:`whisper_build.podstart.preflight.
    ctranslate2_publish_commands`); it downloads the Hugging Face checkpoint. The output is not tied to
    a GPU architecture, so one conversion is synced to every target of a ``ctranslate2`` group.

    Args:
        config: The config; at least one group serves ``ctranslate2`` (else there is nothing to publish).
        account: AWS account id (the model bucket's name has it).
        ctranslate2_version: The serving image's CTranslate2 version (``requirements.txt`` pin), so the
            model format matches the runtime that loads it; ``None``: the newest.
    """
    bucket = names.bucket_name(config.project_name, names.MODEL_BUCKET_PURPOSE, account, config.region)
    targets = ctranslate2_targets(config)
    hf_id = WHISPER_MODELS[config.model.name][0] if config.model.name in WHISPER_MODELS else config.model.name
    local = f"whisper-{config.model.name}-ct2"
    package = f"ctranslate2=={ctranslate2_version}" if ctranslate2_version else "ctranslate2"
    prefixes = {target: storage.ctranslate2_prefix(config.model.name, target) for target in targets}
    return [
        Step(
            "ctranslate2",
            f"CTranslate2 conversion of {hf_id} (float16) → s3://{bucket}/models/{config.model.name}/"
            f"<{', '.join(targets)}>/ctranslate2/ for the groups serving ctranslate2",
            "10–30 min (a PyTorch install and a 1.6 GB checkpoint download for large-v3-turbo; estimate)",
            "S3 storage (cents)",
            (
                Command(("python3", "-m", "venv", CTRANSLATE2_VENV)),
                Command((f"{CTRANSLATE2_VENV}/bin/pip", "install", "-q", package, "transformers[torch]")),
                Command(
                    (
                        f"{CTRANSLATE2_VENV}/bin/ct2-transformers-converter",
                        "--model",
                        hf_id,
                        "--output_dir",
                        local,
                        "--copy_files",
                        "tokenizer.json",
                        "preprocessor_config.json",
                        "--quantization",
                        "float16",
                        "--force",
                    )
                ),
                *(
                    Command(("aws", "s3", "sync", local, f"s3://{bucket}/{prefix}", "--region", config.region))
                    for prefix in prefixes.values()
                ),
            ),  # fmt: skip
            "skipped when every target has model.bin; otherwise converts again and syncs (only changed files upload)",
            (
                f"s3://{bucket}/models/{config.model.name}/<{', '.join(targets)}>/ctranslate2/model.bin exists",
                lambda session: all(
                    session.object_exists(bucket, prefix + "model.bin") for prefix in prefixes.values()
                ),
            ),
        )
    ]
