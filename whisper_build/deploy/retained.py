"""What outlives ``make destroy``, why, and what earlier deploy/destroy cycles left (step ``retained``).

Buckets and ECR repositories are retained on purpose (a redeploy imports them); KMS keys and secrets
still tagged with the project, and the log groups AWS services create outside CloudFormation, are
listed too. :func:`find` builds the list; :mod:`.aws` has the boto3 calls and the delete commands.
Docs: docs/deploy.md, "Tear down: `make destroy CONFIG=…`".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from settings import names
from settings.bulk import BULK_BUCKET_PURPOSE
from settings.prices import SERVICE_PRICES
from settings.schema import DeploymentConfig
from whisper_build.deploy import aws

ACCESS_LOG_WHY = "server access logs of the buckets (audit trail)"
KEYS_PER_CYCLE = 2
"""Customer-managed KMS keys a deploy/destroy cycle leaves: the EKS Secrets key (retained: Security in
docs/deploy.md) and the engine-build artifacts key (CDK's default removal policy for keys). The API
keys secret's key is deleted with its stack. With ``bulk.enabled`` one more (:func:`keys_per_cycle`)."""
KMS_USD_PER_KEY_MONTH = SERVICE_PRICES["kms_key"].usd
KMS_PRICE_SOURCE = "https://aws.amazon.com/kms/pricing/"
"""The KMS key price of the one price list (``settings.prices.SERVICE_PRICES``, with its source)."""


def find(config: DeploymentConfig, account: str, client: Callable[[str], Any]) -> list[aws.Retained]:
    """Everything of ``config`` in ``account`` that outlives ``cdk destroy`` (docs/deploy.md, Teardown).

    Buckets and ECR repositories (retained on purpose), any KMS key or secret still tagged with
    the project (none with the current stacks; keys from replacements or older versions), and
    the log groups AWS services create outside CloudFormation.

    Args:
        config: The deployment config.
        account: Its AWS account id (bucket names carry it).
        client: boto3 client factory by service name, in the config's region.

    Raises:
        botocore.exceptions.ClientError: an AWS call failed other than with "not found".
    """
    region = config.region
    project = config.project_name
    buckets = {
        names.bucket_name(project, names.MODEL_BUCKET_PURPOSE, account, region): "model engines and the "
        "CTranslate2 fallback (hours of GPU builds; a redeploy imports the bucket and reuses them)",
        names.bucket_name(project, names.LIFECYCLE_BUCKET_PURPOSE, account, region): "HyperPod lifecycle "
        "scripts (small; retained with the same policy as the models)",
    }
    if config.bulk.enabled:
        buckets[names.bucket_name(project, BULK_BUCKET_PURPOSE, account, region)] = (
            "bulk job inputs, results and status records (retained with the same policy as the models; "
            "its access-log bucket and KMS key are listed too)"
        )
    tagging = client("resourcegroupstaggingapi")
    for name in aws.tagged_buckets(tagging, names.PROJECT_TAG, project):
        buckets.setdefault(name, ACCESS_LOG_WHY)
    repositories = {
        names.serving_repository_name(config): "serving images (a redeploy imports it and skips the build)",
        names.chart_repository_name(config): "the published HyperPod dependency chart",
    }
    found = aws.find_retained(client("s3"), client("ecr"), buckets, repositories)
    found += aws.active_keys(
        client("kms"),
        aws.tagged_resources(tagging, names.PROJECT_TAG, project, "kms:key"),
        "KMS key tagged with the project, not scheduled for deletion (a monthly key fee)",
    )
    found += aws.active_secrets(
        client("secretsmanager"),
        aws.tagged_resources(tagging, names.PROJECT_TAG, project, "secretsmanager:secret"),
        "secret tagged with the project (e.g. the fixed-name API keys secret of an older version)",
    )
    return found + aws.log_groups(client("logs"), log_group_prefixes(config))


def keys_per_cycle(config: DeploymentConfig) -> int:
    """Customer-managed KMS keys one deploy/destroy cycle of ``config`` leaves.

    :data:`KEYS_PER_CYCLE`, plus the bulk stack's key (``RemovalPolicy.RETAIN``, ``stacks/bulk_stack.py``)
    with ``bulk.enabled``.
    """
    return KEYS_PER_CYCLE + int(config.bulk.enabled)


def log_buckets_per_cycle(config: DeploymentConfig) -> int:
    """Access-log buckets (generated names) one cycle leaves: the storage stack's, plus the bulk stack's."""
    return 1 + int(config.bulk.enabled)


def cycle_summary(found: Sequence[aws.Retained], config: DeploymentConfig) -> list[str]:
    """What earlier deploy/destroy cycles left: counts of retained KMS keys and access-log buckets, and their cost.

    Every cycle without ``PURGE=1`` leaves :func:`keys_per_cycle` customer-managed keys and
    :func:`log_buckets_per_cycle` access-log buckets (generated names: a redeploy creates new ones),
    so they accumulate.
    """
    keys = sum(item.kind == "kms-key" for item in found)
    log_buckets = sum(item.kind == "s3-bucket" and item.why == ACCESS_LOG_WHY for item in found)
    if not keys and not log_buckets:
        return []
    key_count, log_count = keys_per_cycle(config), log_buckets_per_cycle(config)
    cycles = max(-(-keys // key_count), -(-log_buckets // log_count))
    return [
        f"accumulated: {keys} KMS key(s) = {keys * KMS_USD_PER_KEY_MONTH:.0f} USD a month "
        f"({KMS_USD_PER_KEY_MONTH:.0f} USD per key-month, {KMS_PRICE_SOURCE}) and {log_buckets} access-log "
        f"bucket(s), from about {cycles} deploy/destroy cycle(s); {max(0, cycles - 1)} of them before the latest. "
        f"Each cycle without PURGE=1 adds {key_count} keys and {log_count} log bucket(s)"
    ]


def log_group_prefixes(config: DeploymentConfig) -> dict[str, str]:
    """Log groups AWS services create for this config outside CloudFormation (name prefix → who created it).

    EKS control-plane logs (``/aws/eks/<cluster>/cluster``, EKS user guide "Control plane logs"),
    CodeBuild (``/aws/codebuild/<project>``, its default), Lambda (``/aws/lambda/<function>``; the
    custom-resource handlers' names start with their stack's name) and HyperPod
    (``/aws/sagemaker/Clusters/<name>/<id>``, HyperPod user guide). None of them collides with a
    redeploy (the services reuse or create them); they bill for stored logs until deleted.
    """
    codebuild = [names.image_project_name(config), names.rollout_project_name(config)]
    codebuild += [names.engine_project_name(config, target) for target in config.engine_targets]
    prefixes = {f"/aws/eks/{names.cluster_name(config)}/cluster": "EKS control-plane logs (created by EKS)"}
    prefixes.update({f"/aws/codebuild/{p}": "CodeBuild build logs (created by CodeBuild)" for p in codebuild})
    prefixes.update(
        {
            f"/aws/lambda/{names.stack_name(config, stack)}-": "logs of a CDK custom-resource Lambda (created by Lambda)"
            for stack in names.stacks(config)
        }
    )
    prefixes[f"/aws/sagemaker/Clusters/{names.hyperpod_cluster_name(config)}/"] = (
        "HyperPod node logs (created by HyperPod)"
    )
    return prefixes
