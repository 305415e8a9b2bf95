"""The steps of ``make destroy``, one builder per step.

The endpoint's load balancer first, every stack, what AWS kept, and a check that nothing bills.

Names come from :mod:`settings.names` applied to the config, as in :mod:`.deploy_plan`; the AWS
calls beyond ``cdk destroy`` are :mod:`.teardown`'s.
Docs: docs/deploy.md, "Tear down: `make destroy CONFIG=…`".
"""

from __future__ import annotations

from settings import labels, names
from settings.schema import DeploymentConfig
from whisper_build.deploy import kube, teardown
from whisper_build.deploy.deploy_plan import kubectl_step
from whisper_build.deploy.steps import AwsCall, Command, Step, cdk


def endpoint_objects(config: DeploymentConfig) -> tuple[str, ...]:
    """What destroy's endpoint step deletes (``kubectl delete`` arguments) so their load balancers go first.

    ``deployments``: ``service/whisper`` (and ``ingress/whisper`` for ``endpoint.kind: alb``). The
    ``inference_operator`` target has no Service of ours: its ``InferenceEndpointConfig`` objects
    (CRD ``inferenceendpointconfigs.inference.sagemaker.aws.amazon.com``, labelled with
    ``k8s_charts.naming.app_labels``), whose deletion the operator answers by removing what it made
    for them (pods, load balancer, the SageMaker endpoint; the billing step checks the endpoint).
    """
    if config.serving.target == "inference_operator":
        return (names.INFERENCE_ENDPOINT_CONFIGS, "-l", f"{labels.APP_NAME_LABEL}={labels.APP_NAME}")
    service = names.ENDPOINT_SERVICE_NAME
    return (f"service/{service}", *((f"ingress/{service}",) if config.endpoint.kind == "alb" else ()))


def endpoint_step(config: DeploymentConfig, account: str) -> Step:
    """Step ``endpoint``: delete the Service (or the operator's objects) so their load balancers go first.

    Skipped once the EKS cluster is gone or no longer ``ACTIVE``. Its kubectl call goes to the
    cluster of ``account`` (``<account>`` in a dry run; :mod:`.kube`).
    """
    cluster, region = names.cluster_name(config), config.region
    deleted = endpoint_objects(config)
    return Step(
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
    )


def stacks_delete_step(config: DeploymentConfig, config_file: str) -> Step:
    """Step ``stacks``: wait for deletions already running, ``cdk destroy --all``, then check none is left."""
    region = config.region
    stacks = [names.stack_name(config, stack) for stack in names.stacks(config)]
    return Step(
        "stacks",
        f"delete every stack ({names.stack_contents(config)})",
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
    )


def retained_step(config: DeploymentConfig, purge: bool) -> Step:
    """Step ``retained``: list what outlives the stacks (and delete it with ``purge``)."""
    return Step(
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
    )


def billing_step(config: DeploymentConfig) -> Step:
    """Step ``billing``: check that nothing of the deployment bills by the hour any more."""
    cluster, region = names.cluster_name(config), config.region
    return Step(
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
                        names.operator_endpoint_names(config),
                    )
                ),  # fmt: skip
                lambda session: session.check_billing(),
            ),
        ),
        "read-only; fails listing each leftover and the command that deletes it",
    )


def destroy_steps(config: DeploymentConfig, config_file: str, purge: bool, account: str) -> list[Step]:
    """``make destroy``: the load balancer first, every stack, what AWS kept, and a check that nothing bills.

    Safe to re-run at any point (e.g. after SSO credentials expired mid-delete): the endpoint step is
    skipped once the EKS cluster is gone, the stacks step skips stacks already deleted, waits for ones
    still ``DELETE_IN_PROGRESS`` and names the resources that blocked a ``DELETE_FAILED`` one. Its
    kubectl call goes to the cluster of ``account`` (``<account>`` in a dry run; :mod:`.kube`).
    """
    return [
        endpoint_step(config, account),
        stacks_delete_step(config, config_file),
        retained_step(config, purge),
        billing_step(config),
    ]
