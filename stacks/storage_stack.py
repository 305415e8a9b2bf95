"""Storage: the S3 model bucket (engines, lifecycle scripts) and the ECR repositories.

Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy, Stack, Token
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_s3 as s3
from constructs import Construct

from settings import names
from settings.names import CHARTS_NAMESPACE, HYPERPOD_CHART_NAME, SERVING_IMAGE_REPOSITORY  # noqa: F401 (re-exported)
from stacks.buckets import access_log_bucket, logged_bucket
from stacks.checkov_skips import skip_check

UNTAGGED_IMAGE_EXPIRY_DAYS = 14
S3_BUCKET_NAME_MAX = 63
"""S3 bucket names are 3–63 characters (Amazon S3 bucket naming rules)."""
ACCOUNT_ID_LENGTH = 12


class StorageStack(Stack):
    """Model bucket (TLS-only, versioned, SSE-S3, access-logged) and ECR repositories.

    Attributes:
        model_bucket: Engines under ``models/<model>/<gpu_arch>/`` (``settings.storage``).
        model_bucket_name: Its name, ``<project>-models-<account>-<region>``: deterministic, so other
            stacks build ARNs from it without cross-stack imports.
        lifecycle_bucket / lifecycle_bucket_name: HyperPod lifecycle scripts (``<project>-lifecycle-<account>-<region>``);
            separate so that the CDK upload Lambda can write there and nowhere near the engines.
        access_log_bucket: Receives the server access logs of the other buckets.
        tls_bucket / tls_bucket_name: Only with ``tls_certificates`` (``serving.target: inference_operator``):
            where the HyperPod inference operator writes the self-signed certificates of its endpoints
            (``<project>-tls-<account>-<region>``); ``tls_bucket_name`` is ``None`` otherwise.
        serving_repository: ECR repository of the serving image (scan on push, immutable tags).
        chart_repository: ECR repository the HyperPod dependency chart is pushed to
            (``scripts/publish_hyperpod_chart.sh``); its OCI URL is :attr:`chart_oci_url`.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, project_name: str, tls_certificates: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.access_log_bucket = access_log_bucket(self, "the model bucket")
        self.model_bucket_name = self._bucket_name(project_name, names.MODEL_BUCKET_PURPOSE)
        self.model_bucket = self._logged_bucket("Models", self.model_bucket_name)
        self.lifecycle_bucket_name = self._bucket_name(project_name, names.LIFECYCLE_BUCKET_PURPOSE)
        self.lifecycle_bucket = self._logged_bucket("Lifecycle", self.lifecycle_bucket_name)
        self.tls_bucket_name: str | None = None
        if tls_certificates:
            self.tls_bucket_name = self._bucket_name(project_name, "tls")
            self.tls_bucket = self._logged_bucket("TlsCertificates", self.tls_bucket_name)
        self.serving_repository = self._repository("ServingImage", f"{project_name}/{SERVING_IMAGE_REPOSITORY}")
        self.chart_repository = self._repository(
            "HyperPodChart", f"{project_name}/{CHARTS_NAMESPACE}/{HYPERPOD_CHART_NAME}"
        )
        self.chart_oci_url = f"oci://{self.chart_repository.repository_uri}"
        """OCI reference of the HyperPod chart, ``oci://<account>.dkr.ecr.<region>.amazonaws.com/<project>/charts/hyperpod-helm-chart``
        (the CDK kubectl handler runs ``helm pull <reference> --version <v>``)."""

    def _bucket_name(self, project_name: str, purpose: str) -> str:
        region_length = len(self.region) if not Token.is_unresolved(self.region) else len("ap-southeast-1")
        length = len(project_name) + len(purpose) + ACCOUNT_ID_LENGTH + region_length + 3
        if length > S3_BUCKET_NAME_MAX:
            raise ValueError(
                f"project_name '{project_name}' is too long for the bucket name "
                f"'{project_name}-{purpose}-<account>-<region>' ({length} > {S3_BUCKET_NAME_MAX} characters); shorten it"
            )
        return names.bucket_name(project_name, purpose, Aws.ACCOUNT_ID, self.region)

    def _logged_bucket(self, construct_id: str, name: str) -> s3.Bucket:
        return logged_bucket(
            self,
            construct_id,
            name,
            logs=self.access_log_bucket,
            log_prefix=f"{construct_id.lower()}/",
            lifecycle_rules=[s3.LifecycleRule(noncurrent_version_expiration=Duration.days(30))],
        )

    def _repository(self, construct_id: str, name: str) -> ecr.Repository:
        repository = ecr.Repository(
            self,
            construct_id,
            repository_name=name,
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.AES_256,
            lifecycle_rules=[
                ecr.LifecycleRule(
                    tag_status=ecr.TagStatus.UNTAGGED, max_image_age=Duration.days(UNTAGGED_IMAGE_EXPIRY_DAYS)
                )
            ],
            removal_policy=RemovalPolicy.RETAIN,
        )
        skip_check(
            repository,
            "CKV_AWS_136",
            "images are encrypted at rest with AES-256 (ECR default); they hold code and public model tooling, "
            "no customer data, and ECR's encryption type cannot change without replacing the repository",
        )
        return repository
