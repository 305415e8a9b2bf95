"""Step ``capacity`` of ``make deploy``: can this account run the config's instances in its region?

Checked before anything is created, so a missing quota fails in seconds instead of rolling back the
cluster stack an hour later: the regional offering of every EC2 type behind the config, the
SageMaker ``<ml type> for cluster usage`` quotas, and CodeBuild's ``Linux/Large`` concurrency.
Entry points: :func:`capacity_problems` (the checks and their sources, in its docstring),
:func:`capacity_commands` (what the dry run prints). Docs: docs/deploy.md, "Prerequisites", item 3.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from settings.gpu_catalog import ec2_instance_type
from settings.schema import DeploymentConfig

CODEBUILD_IMAGE_COMPUTE = "Linux/Large"
"""Substring of the CodeBuild concurrency quota of the serving-image build (``ComputeType.LARGE``,
``stacks/engine_build_stack.py``)."""


@dataclass(frozen=True)
class QuotaNeed:
    """One quota the config needs.

    ``service_code`` (``sagemaker``), ``name`` (exact, or a substring when ``substring``), the
    ``needed`` value and ``why``.
    """

    service_code: str
    name: str
    needed: int
    why: str
    substring: bool = False


@dataclass(frozen=True)
class Quota:
    """A quota as Service Quotas reports it: ``code`` (``L-…``), ``name``, ``value``."""

    code: str
    name: str
    value: float


def ec2_types(config: DeploymentConfig) -> list[str]:
    """The EC2 instance types behind the config, in config order: system nodes, then each GPU group's."""
    types = [config.cluster.system_node_instance_type]
    types += [ec2_instance_type(t) for group in config.gpu_groups for t in group.instance_types]
    return list(dict.fromkeys(types))


def quota_needs(config: DeploymentConfig) -> list[QuotaNeed]:
    """SageMaker ``<type> for cluster usage`` per instance type (instances summed over groups), and CodeBuild's.

    With ``cluster.node_autoscaling`` the groups start at 0 instances and scale to fit the pods, so
    the need is the instances ``max_replicas`` pods take (``GpuGroup.pods_per_node`` pods per
    instance, rounded up; at least one).

    Every type of a priority list (``instance_types``) needs the group's whole count: when the first type
    has no capacity, HyperPod may place every instance of the group on a fallback type.
    """
    counts: Counter[str] = Counter()
    for group in config.gpu_groups:
        for instance_type in group.instance_types:
            if config.cluster.node_autoscaling:
                counts[instance_type] += max(1, -(-group.max_replicas // group.pods_per_node))
            else:
                counts[instance_type] += group.instance_count
    needs = [
        QuotaNeed(
            "sagemaker",
            f"{instance_type} for cluster usage",
            count,
            f"HyperPod instances of GPU group(s) "
            f"{', '.join(g.name for g in config.gpu_groups if instance_type in g.instance_types)}",
        )
        for instance_type, count in counts.items()
        if count
    ]
    needs.append(
        QuotaNeed(
            "codebuild",
            CODEBUILD_IMAGE_COMPUTE,
            1,
            "the serving-image build (CodeBuild BUILD_GENERAL1_LARGE)",
            substring=True,
        )
    )
    return needs


def offered_types(ec2: Any, instance_types: Sequence[str]) -> set[str]:
    """Which of ``instance_types`` EC2 offers in the client's region (``DescribeInstanceTypeOfferings``).

    Raises:
        botocore.exceptions.ClientError: the call failed (e.g. access denied, expired credentials).
        botocore.exceptions.BotoCoreError: no credentials or no connection.
    """
    offered: set[str] = set()
    paginator = ec2.get_paginator("describe_instance_type_offerings")
    pages = paginator.paginate(
        LocationType="region", Filters=[{"Name": "instance-type", "Values": list(instance_types)}]
    )
    for page in pages:
        offered |= {offering["InstanceType"] for offering in page["InstanceTypeOfferings"]}
    return offered


def service_quotas(client: Any, service_code: str) -> list[Quota]:
    """Every quota of ``service_code``: the defaults, overridden by the account's applied values.

    Raises:
        botocore.exceptions.ClientError: a list call failed (e.g. access denied, expired credentials).
        botocore.exceptions.BotoCoreError: no credentials or no connection.
    """
    by_code: dict[str, Quota] = {}
    for operation in ("list_aws_default_service_quotas", "list_service_quotas"):
        for page in client.get_paginator(operation).paginate(ServiceCode=service_code):
            for quota in page["Quotas"]:
                by_code[quota["QuotaCode"]] = Quota(quota["QuotaCode"], quota["QuotaName"], float(quota["Value"]))
    return list(by_code.values())


def _increase_command(need: QuotaNeed, quota: Quota, region: str) -> str:
    return (
        f"aws service-quotas request-service-quota-increase --service-code {need.service_code} "
        f"--quota-code {quota.code} --desired-value {need.needed} --region {region}"
    )


def quota_problems(needs: Sequence[QuotaNeed], quotas: dict[str, list[Quota]], region: str) -> list[str]:
    """One sentence per need that the quotas do not meet, with the quota's name and how to raise it.

    Args:
        needs: :func:`quota_needs`.
        quotas: service code → :func:`service_quotas` of that service.
        region: for the messages and commands.
    """
    problems = []
    for need in needs:
        available = quotas.get(need.service_code, [])
        if need.substring:
            matches = [q for q in available if need.name.lower() in q.name.lower()]
        else:
            matches = [q for q in available if q.name.lower() == need.name.lower()]
        if not matches:
            if need.substring:
                continue  # the name could not be confirmed: unchecked, not failed (module docstring)
            problems.append(
                f"no Service Quotas entry '{need.name}' ({need.service_code}) in {region}: HyperPod does not offer "
                f"{need.name.split()[0]} there. Pick another instance type or region (Service Quotas console -> "
                f"Amazon SageMaker lists the '... for cluster usage' quotas of {region})"
            )
            continue
        quota = max(matches, key=lambda q: q.value)
        if quota.value < need.needed:
            problems.append(
                f"quota '{quota.name}' ({need.service_code}, {quota.code}) is {quota.value:g} in {region}; "
                f"this config needs {need.needed} for {need.why}. Request an increase (approval can take "
                f"days): {_increase_command(need, quota, region)}  -- or Service Quotas console -> "
                f"{need.service_code} -> '{quota.name}' -> Request increase"
            )
    return problems


def capacity_problems(ec2: Any, quotas_client: Any, config: DeploymentConfig) -> list[str]:
    """Everything that would stop the config's instances or builds from starting; empty when none.

    The SageMaker quotas are compared with this config's needs alone: they are account-wide, and
    what other HyperPod clusters of the account use is not subtracted (module docstring).

    Args:
        ec2: boto3 EC2 client in the config's region.
        quotas_client: boto3 Service Quotas client in the config's region.
        config: The deployment config.

    Raises:
        botocore.exceptions.ClientError: an EC2 or Service Quotas call failed (e.g. access denied).
        botocore.exceptions.BotoCoreError: no credentials or no connection.

    * **Regional offering** of every EC2 type behind the config (``ec2:DescribeInstanceTypeOfferings``,
      location type ``region``): the system node group's type, and the EC2 type of each HyperPod
      ``ml.<type>`` (``ml.g5.2xlarge`` runs on ``g5.2xlarge`` hardware). EC2 offering a type is necessary,
      not sufficient, for HyperPod to offer it; the SageMaker quota below is the HyperPod-specific check.
    * **SageMaker quotas** ``<ml type> for cluster usage`` ≥ the instances the config asks for, summed
      over the groups of each type. HyperPod's instance limits are the Amazon SageMaker quotas "for
      cluster usage" (SageMaker Developer Guide, "SageMaker HyperPod prerequisites", SageMaker HyperPod
      quotas: "In the search bar, type cluster usage. This shows quotas for cluster usage",
      https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-prerequisites.html); the
      ``<ml type> for cluster usage`` form of each name is how this repository matches them, not
      confirmed against a live account. A quota that does not exist in the region means HyperPod does
      not offer the type there. The quota is **account-wide** (per region): instances other HyperPod
      clusters of the account already use are not subtracted, so a check that passes can still fail
      at cluster creation when other clusters hold part of the quota.
    * **CodeBuild**: the serving-image project builds on ``BUILD_GENERAL1_LARGE`` (Linux), so a
      concurrency quota whose name contains ``Linux/Large`` must be ≥ 1. Matched by substring because
      the exact quota name could not be confirmed here; when none matches, it is reported as unchecked,
      not as a failure. Reserved GPU fleets (``engine_builder: codebuild_fleet``) are checked by their
      EC2 type's regional offering only.

    Quota values: ``servicequotas:ListServiceQuotas`` returns applied values and omits quotas that were
    never changed ("If the applied value is not available for a quota, the quota is not retrieved",
    Service Quotas API reference), so the defaults from ``ListAWSDefaultServiceQuotas`` fill the gaps.
    """
    region = config.region
    wanted = ec2_types(config)
    offered = offered_types(ec2, wanted)
    problems = [
        f"EC2 does not offer {t} in {region} (describe-instance-type-offerings), so neither does HyperPod"
        + (
            " for the system node group (cluster.system_node_instance_type)"
            if t == config.cluster.system_node_instance_type
            else f" (ml.{t}, gpu_groups)"
        )
        + "; pick a region that has it or another instance type"
        for t in wanted
        if t not in offered
    ]
    needs = quota_needs(config)
    codes = sorted({need.service_code for need in needs})
    problems += quota_problems(needs, {code: service_quotas(quotas_client, code) for code in codes}, region)
    return problems


def capacity_commands(config: DeploymentConfig) -> str:
    """The AWS CLI equivalent of :func:`capacity_problems` (what ``--dry-run`` prints)."""
    region = config.region
    quota_names = ", ".join(f"'{need.name}' >= {need.needed}" for need in quota_needs(config) if not need.substring)
    return (
        f"aws ec2 describe-instance-type-offerings --location-type region --filters "
        f"Name=instance-type,Values={','.join(ec2_types(config))} --region {region} && "
        f"aws service-quotas list-service-quotas --service-code sagemaker --region {region} "
        f"(+ list-aws-default-service-quotas; {quota_names}) && "
        f"aws service-quotas list-service-quotas --service-code codebuild --region {region} "
        f"('{CODEBUILD_IMAGE_COMPUTE}' builds >= 1)"
    )
