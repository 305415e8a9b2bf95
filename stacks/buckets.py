"""The project's S3 bucket shapes, one source for the storage and bulk stacks.

Every bucket is TLS-only, versioned, public access blocked, owner-enforced and retained
(``RemovalPolicy.RETAIN``: a redeploy imports it). A stack's data buckets log to one access-log
bucket of that stack (:func:`access_log_bucket`, SSE-S3, logs kept 365 days).
Docs: docs/deploy.md, "Security".
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.checkov_skips import skip_check
from stacks.nag import acknowledge

ACCESS_LOG_DAYS = 365


def access_log_bucket(scope: Construct, logged: str) -> s3.Bucket:
    """Bucket ``AccessLogs`` of ``scope``: the server-access-log destination of ``logged``.

    ``logged`` in words, e.g. ``"the model bucket"``; the log bucket itself is not logged (cdk-nag
    AwsSolutions-S1 and checkov CKV_AWS_18 acknowledged with that reason).
    """
    logs = s3.Bucket(
        scope,
        "AccessLogs",
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(ACCESS_LOG_DAYS))],
        removal_policy=RemovalPolicy.RETAIN,
    )
    reason = f"This bucket is the server-access-log destination of {logged}; logging it too would need a third bucket"
    acknowledge(logs, "AwsSolutions-S1", reason)
    skip_check(logs, "CKV_AWS_18", reason)
    return logs


def logged_bucket(
    scope: Construct,
    construct_id: str,
    name: str,
    *,
    logs: s3.IBucket,
    log_prefix: str,
    lifecycle_rules: Sequence[s3.LifecycleRule],
    key: kms.IKey | None = None,
) -> s3.Bucket:
    """A data bucket named ``name`` logging to ``logs`` under ``log_prefix``.

    Encrypted with SSE-S3, or SSE-KMS with ``key`` (S3 Bucket Keys on: fewer KMS requests).
    """
    encryption = (
        {"encryption": s3.BucketEncryption.KMS, "encryption_key": key, "bucket_key_enabled": True}
        if key
        else {"encryption": s3.BucketEncryption.S3_MANAGED}
    )
    return s3.Bucket(
        scope,
        construct_id,
        bucket_name=name,
        **encryption,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        versioned=True,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        server_access_logs_bucket=logs,
        server_access_logs_prefix=log_prefix,
        lifecycle_rules=list(lifecycle_rules),
        removal_policy=RemovalPolicy.RETAIN,
    )
