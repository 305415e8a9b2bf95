"""The AWS calls of ``make deploy`` / ``make destroy`` (boto3), each small and idempotent.

Every function takes its boto3 client(s) as arguments, so the tests drive them with botocore's
``Stubber`` or moto. Waiting: CloudFormation waits inside ``cdk deploy``; CodeBuild has no boto3
waiter, so :func:`run_builds` polls ``BatchGetBuilds``; the EKS cluster uses the ``cluster_active``
waiter.
Docs: docs/deploy.md, "Deploy".
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
        arn: str = iam.get_role(RoleName=role_name)["Role"]["Arn"]
        return arn
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


def wait_cluster_active(
    eks: Any,
    cluster: str,
    delay_s: int = 30,
    attempts: int = 60,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Block until the EKS cluster exists and is ``ACTIVE`` (up to ``delay_s × attempts``, 30 min by default).

    A cluster that does not exist yet (``ResourceNotFoundException``: CloudFormation has not created it)
    is waited for too, so ``make kubeconfig`` may start while ``cdk deploy`` is still creating it; then
    the boto3 ``cluster_active`` waiter.

    Raises:
        DeployError: the cluster did not appear in time.
    """
    for _ in range(attempts):
        try:
            eks.describe_cluster(name=cluster)
            break
        except ClientError as err:
            if err.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
        sleep(delay_s)
    else:
        raise DeployError(f"EKS cluster {cluster} does not exist after {delay_s * attempts} s")
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


def running_build(codebuild: Any, project: str) -> str | None:
    """Id of the project's latest build when it is still ``IN_PROGRESS`` (e.g. started by an interrupted run)."""
    ids = codebuild.list_builds_for_project(projectName=project, sortOrder="DESCENDING").get("ids", [])[:1]
    if not ids:
        return None
    builds = codebuild.batch_get_builds(ids=ids)["builds"]
    return ids[0] if builds and builds[0].get("buildStatus") == "IN_PROGRESS" else None


def run_builds(
    codebuild: Any,
    projects: Sequence[str],
    report: Callable[[str], None],
    poll_s: float = BUILD_POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[BuildResult]:
    """Start one build of every project (in parallel) and wait until all have finished.

    A project whose latest build is still running (a run interrupted by expired credentials or
    Ctrl-C leaves it running in CodeBuild) is waited on instead of started twice: a second image
    build would fail pushing the same immutable ECR tag.

    Args:
        codebuild: boto3 CodeBuild client.
        projects: project names.
        report: receives a progress line per project whenever its phase changes.
        poll_s: seconds between ``BatchGetBuilds`` calls.
        sleep: injected for tests.

    Raises:
        DeployError: a build ended other than ``SUCCEEDED``; names each failed project and its logs.
    """
    ids: dict[str, str] = {}
    for project in projects:
        running = running_build(codebuild, project)
        if running is not None:
            report(f"{project}: build {running} already running, waiting for it")
            ids[running] = project
        else:
            ids[codebuild.start_build(projectName=project)["build"]["id"]] = project
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
    """A resource that outlives ``cdk destroy``: ``kind``, ``name`` (ARN or id for keys), ``why``.

    Kinds: ``s3-bucket``, ``ecr-repository`` (``RemovalPolicy.RETAIN``), ``kms-key``, ``secret``
    (tagged with the project and still active: retained by a policy or left by an older version),
    ``log-group`` (created by EKS, CodeBuild, Lambda or HyperPod themselves, outside CloudFormation).
    """

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


def tagged_resources(tagging: Any, tag_key: str, tag_value: str, resource_type: str) -> list[str]:
    """ARNs of resources of ``resource_type`` (e.g. ``s3:bucket``, ``kms:key``) tagged ``tag_key=tag_value``.

    The Resource Groups Tagging API also returns resources deleted a short while ago (its
    ``GetResources`` reference: "tagged or previously tagged"), so callers check each one.
    """
    arns = []
    paginator = tagging.get_paginator("get_resources")
    for page in paginator.paginate(
        TagFilters=[{"Key": tag_key, "Values": [tag_value]}], ResourceTypeFilters=[resource_type]
    ):
        arns += [m["ResourceARN"] for m in page["ResourceTagMappingList"]]
    return arns


def tagged_buckets(tagging: Any, tag_key: str, tag_value: str) -> list[str]:
    """Names of S3 buckets tagged ``tag_key=tag_value`` (e.g. the access-log buckets, whose names CloudFormation generates)."""
    return [arn.rsplit(":", 1)[-1] for arn in tagged_resources(tagging, tag_key, tag_value, "s3:bucket")]


def active_keys(kms: Any, arns: Sequence[str], why: str) -> list[Retained]:
    """The customer-managed KMS keys among ``arns`` that are not (yet) pending deletion."""
    found = []
    for arn in arns:
        try:
            metadata = kms.describe_key(KeyId=arn)["KeyMetadata"]
        except ClientError as err:
            if err.response["Error"]["Code"] != "NotFoundException":
                raise
            continue
        if metadata.get("KeyManager") == "CUSTOMER" and metadata["KeyState"] not in (
            "PendingDeletion",
            "PendingReplicaDeletion",
        ):
            description = metadata.get("Description", "")
            found.append(Retained("kms-key", metadata["KeyId"], f"{why}{f' ({description})' if description else ''}"))
    return found


def active_secrets(secretsmanager: Any, arns: Sequence[str], why: str) -> list[Retained]:
    """The secrets among ``arns`` that exist and are not scheduled for deletion."""
    found = []
    for arn in arns:
        try:
            secret = secretsmanager.describe_secret(SecretId=arn)
        except ClientError as err:
            if err.response["Error"]["Code"] != "ResourceNotFoundException":
                raise
            continue
        if "DeletedDate" not in secret:
            found.append(Retained("secret", secret["ARN"], why))
    return found


def log_groups(logs: Any, prefixes: dict[str, str]) -> list[Retained]:
    """Log groups whose names start with one of ``prefixes`` (prefix → why it exists)."""
    found = []
    paginator = logs.get_paginator("describe_log_groups")
    for prefix, why in prefixes.items():
        for page in paginator.paginate(logGroupNamePrefix=prefix):
            found += [Retained("log-group", group["logGroupName"], why) for group in page["logGroups"]]
    return found


KEY_PENDING_WINDOW_DAYS = 7
"""Shortest KMS deletion waiting period (7–30 days, KMS ``ScheduleKeyDeletion`` API reference)."""


def delete_retained(client: Callable[[str], Any], s3_resource: Any, resources: Sequence[Retained]) -> None:
    """Delete retained resources. Irreversible except keys, which KMS deletes after a 7-day waiting period.

    Buckets lose every object version first; ECR repositories go with their images; secrets are
    deleted without a recovery window; log groups with their events.

    Args:
        client: boto3 client factory by service name, in the deployment's region.
        s3_resource: boto3 S3 resource (bucket emptying).
        resources: what :meth:`whisper_build.deploy.aws_session.AwsSession.retained` found.
    """
    for resource in resources:
        if resource.kind == "s3-bucket":
            bucket = s3_resource.Bucket(resource.name)
            bucket.object_versions.delete()
            bucket.objects.delete()
            bucket.delete()
        elif resource.kind == "ecr-repository":
            client("ecr").delete_repository(repositoryName=resource.name, force=True)
        elif resource.kind == "kms-key":
            client("kms").schedule_key_deletion(KeyId=resource.name, PendingWindowInDays=KEY_PENDING_WINDOW_DAYS)
        elif resource.kind == "secret":
            client("secretsmanager").delete_secret(SecretId=resource.name, ForceDeleteWithoutRecovery=True)
        elif resource.kind == "log-group":
            client("logs").delete_log_group(logGroupName=resource.name)


def delete_commands(resource: Retained, region: str) -> list[str]:
    """How to delete ``resource`` by hand (``make destroy PURGE=1`` does the same with boto3)."""
    if resource.kind == "s3-bucket":
        return [
            f"empty it, every object version included (S3 console: select {resource.name} -> Empty), then",
            f"aws s3 rb s3://{resource.name} --region {region}",
        ]
    if resource.kind == "kms-key":
        return [
            f"aws kms schedule-key-deletion --key-id {resource.name} "
            f"--pending-window-in-days {KEY_PENDING_WINDOW_DAYS} --region {region}"
        ]
    if resource.kind == "secret":
        return [
            f"aws secretsmanager delete-secret --secret-id {resource.name} "
            f"--force-delete-without-recovery --region {region}"
        ]
    if resource.kind == "log-group":
        return [f"aws logs delete-log-group --log-group-name {resource.name} --region {region}"]
    return [f"aws ecr delete-repository --repository-name {resource.name} --force --region {region}"]


def failed_events(cloudformation: Any, stack: str, limit: int = 10) -> list[str]:
    """The newest ``*_FAILED`` events of ``stack`` (``DescribeStackEvents``), one line each, newest first.

    E.g. ``ModelBucket (AWS::S3::Bucket) IMPORT_FAILED: …``; empty when the stack does not exist.
    """
    lines: list[str] = []
    try:
        for page in cloudformation.get_paginator("describe_stack_events").paginate(StackName=stack):
            for event in page["StackEvents"]:
                if event.get("ResourceStatus", "").endswith("_FAILED"):
                    lines.append(
                        f"{event['LogicalResourceId']} ({event.get('ResourceType', '?')}) {event['ResourceStatus']}: "
                        f"{event.get('ResourceStatusReason', 'no reason given')}"
                    )
                if len(lines) >= limit:
                    return lines
    except ClientError as err:
        if "does not exist" in err.response["Error"].get("Message", ""):
            return []
        raise
    return lines
