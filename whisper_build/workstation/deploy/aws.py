"""The AWS calls of ``make deploy`` / ``make destroy`` (boto3), each small and idempotent.

Every function takes its boto3 client(s) as arguments, so the tests drive them with botocore's
``Stubber`` or moto. Waiting: CloudFormation waits inside ``cdk deploy``; CodeBuild has no boto3
waiter, so :func:`run_builds` polls ``BatchGetBuilds``; the EKS cluster uses the ``cluster_active``
waiter.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

EKS_NAMESPACE_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSAdminPolicy"
"""EKS access policy granting admin rights inside the namespaces of its access scope (EKS user guide,
"Access policy permissions"): enough for ``kubectl rollout status`` and ``port-forward`` in the
serving namespace, nothing cluster-wide."""

BUILD_POLL_SECONDS = 30.0


class DeployError(RuntimeError):
    """A deploy step failed; the message says which and where to look."""


def caller_identity(sts: Any) -> tuple[str, str]:
    """``(account id, caller ARN)`` of the credentials in use (``sts:GetCallerIdentity``)."""
    identity = sts.get_caller_identity()
    return identity["Account"], identity["Arn"]


def access_entry_principal(caller_arn: str, iam: Any) -> str:
    """The IAM principal ARN an EKS access entry needs for ``caller_arn``.

    An assumed-role session ARN (``arn:aws:sts::123456789012:assumed-role/Admin/me``) becomes the
    role's ARN with its path (``iam:GetRole``; IAM Identity Center roles live under
    ``/aws-reserved/sso.amazonaws.com/``, which the session ARN omits). User ARNs are returned as is.
    """
    parts = caller_arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role_name = parts[5].split("/")[1]
        return iam.get_role(RoleName=role_name)["Role"]["Arn"]
    return caller_arn


def ensure_access_entry(eks: Any, cluster: str, principal_arn: str, namespace: str) -> bool:
    """Give ``principal_arn`` admin rights in ``namespace`` of ``cluster``; safe to repeat.

    Returns:
        True when the access entry was created now, False when it existed.
    """
    created = True
    try:
        eks.create_access_entry(clusterName=cluster, principalArn=principal_arn)
    except ClientError as err:
        if err.response["Error"]["Code"] != "ResourceInUseException":
            raise
        created = False
    eks.associate_access_policy(
        clusterName=cluster,
        principalArn=principal_arn,
        policyArn=EKS_NAMESPACE_ADMIN_POLICY,
        accessScope={"type": "namespace", "namespaces": [namespace]},
    )
    return created


def wait_cluster_active(eks: Any, cluster: str, delay_s: int = 30, attempts: int = 40) -> None:
    """Block until the EKS cluster is ``ACTIVE`` (boto3 ``cluster_active`` waiter)."""
    eks.get_waiter("cluster_active").wait(name=cluster, WaiterConfig={"Delay": delay_s, "MaxAttempts": attempts})


def image_exists(ecr: Any, repository: str, tag: str) -> bool:
    """Whether ``repository:tag`` is in ECR (False also when the repository does not exist yet)."""
    try:
        ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
    except ClientError as err:
        if err.response["Error"]["Code"] in ("ImageNotFoundException", "RepositoryNotFoundException"):
            return False
        raise
    return True


@dataclass(frozen=True)
class BuildResult:
    """One finished CodeBuild build: ``project``, ``build_id``, ``status`` and its ``logs`` console link."""

    project: str
    build_id: str
    status: str
    logs: str


def run_builds(
    codebuild: Any,
    projects: Sequence[str],
    report: Callable[[str], None],
    poll_s: float = BUILD_POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[BuildResult]:
    """Start one build of every project (in parallel) and wait until all have finished.

    Args:
        codebuild: boto3 CodeBuild client.
        projects: project names.
        report: receives a progress line per project whenever its phase changes.
        poll_s: seconds between ``BatchGetBuilds`` calls.
        sleep: injected for tests.

    Raises:
        DeployError: a build ended other than ``SUCCEEDED``; names each failed project and its logs.
    """
    ids = {codebuild.start_build(projectName=p)["build"]["id"]: p for p in projects}
    phases: dict[str, str] = {}
    done: dict[str, BuildResult] = {}
    while True:
        for build in codebuild.batch_get_builds(ids=[i for i in ids if i not in done])["builds"]:
            project = ids[build["id"]]
            phase = build.get("currentPhase", "")
            if phases.get(project) != phase:
                phases[project] = phase
                report(f"{project}: {phase.lower().replace('_', ' ')}")
            if build.get("buildComplete"):
                logs = build.get("logs", {}).get("deepLink", "")
                done[build["id"]] = BuildResult(project, build["id"], build["buildStatus"], logs)
        if len(done) == len(ids):
            break
        sleep(poll_s)
    failed = [r for r in done.values() if r.status != "SUCCEEDED"]
    if failed:
        raise DeployError(
            "; ".join(
                f"CodeBuild project {r.project} ended {r.status} (build {r.build_id}, logs: {r.logs})" for r in failed
            )
        )
    return [done[i] for i in ids]


@dataclass(frozen=True)
class Retained:
    """A resource CloudFormation keeps after ``cdk destroy`` (``RemovalPolicy.RETAIN``): ``kind``, ``name``, ``why``."""

    kind: str
    name: str
    why: str


def find_retained(s3: Any, ecr: Any, buckets: dict[str, str], repositories: dict[str, str]) -> list[Retained]:
    """Which of the named buckets / ECR repositories still exist (name → why it is retained)."""
    found = []
    for name, why in buckets.items():
        try:
            s3.head_bucket(Bucket=name)
        except ClientError:
            continue
        found.append(Retained("s3-bucket", name, why))
    for name, why in repositories.items():
        try:
            ecr.describe_repositories(repositoryNames=[name])
        except ClientError as err:
            if err.response["Error"]["Code"] != "RepositoryNotFoundException":
                raise
            continue
        found.append(Retained("ecr-repository", name, why))
    return found


def tagged_buckets(tagging: Any, tag_key: str, tag_value: str) -> list[str]:
    """Names of S3 buckets tagged ``tag_key=tag_value`` (e.g. the access-log buckets, whose names CloudFormation generates)."""
    names = []
    paginator = tagging.get_paginator("get_resources")
    for page in paginator.paginate(
        TagFilters=[{"Key": tag_key, "Values": [tag_value]}], ResourceTypeFilters=["s3:bucket"]
    ):
        names += [m["ResourceARN"].rsplit(":", 1)[-1] for m in page["ResourceTagMappingList"]]
    return names


def delete_retained(s3_resource: Any, ecr: Any, resources: Sequence[Retained]) -> None:
    """Delete retained buckets (every object version first) and ECR repositories (with their images). Irreversible."""
    for resource in resources:
        if resource.kind == "s3-bucket":
            bucket = s3_resource.Bucket(resource.name)
            bucket.object_versions.delete()
            bucket.objects.delete()
            bucket.delete()
        elif resource.kind == "ecr-repository":
            ecr.delete_repository(repositoryName=resource.name, force=True)


def delete_commands(resource: Retained, region: str) -> list[str]:
    """How to delete ``resource`` by hand (``make destroy PURGE=1`` does the same with boto3)."""
    if resource.kind == "s3-bucket":
        return [
            f"empty it, every object version included (S3 console: select {resource.name} -> Empty), then",
            f"aws s3 rb s3://{resource.name} --region {region}",
        ]
    return [f"aws ecr delete-repository --repository-name {resource.name} --force --region {region}"]
