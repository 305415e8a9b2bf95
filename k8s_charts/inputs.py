"""Values the charts need that only exist once the AWS stacks exist (bucket, image, AMP workspace).

The cluster stack passes CDK tokens (resolved by CloudFormation at deploy time); the plain YAML
written to ``dist/k8s/`` for review uses :data:`PLACEHOLDER_INPUTS`, whose values are clearly named
placeholders to replace before ``kubectl apply``.
Docs: docs/contracts.md, "1. Deployment config".
"""

from __future__ import annotations

from dataclasses import dataclass

PLACEHOLDER_BUCKET = "REPLACE-WITH-MODEL-BUCKET-NAME"
PLACEHOLDER_AMP_WORKSPACE_ID = "ws-REPLACE-WITH-AMP-WORKSPACE-ID"
"""Starts with ``ws-`` so the placeholder URL still matches the pattern the inference operator's CRD
requires of an AMP ``serverAddress``."""
PLACEHOLDER_TLS_BUCKET = "REPLACE-WITH-TLS-CERTIFICATE-BUCKET-NAME"
PLACEHOLDER_IMAGE_REPOSITORY = "REPLACE-WITH-SERVING-IMAGE-REPOSITORY-URI"
PLACEHOLDER_API_KEYS_SECRET_ARN = "REPLACE-WITH-API-KEYS-SECRET-ARN"
PLACEHOLDER_BULK_QUEUE_URL = (
    "https://sqs.REPLACE-WITH-REGION.amazonaws.com/REPLACE-WITH-ACCOUNT/REPLACE-WITH-BULK-QUEUE"
)
PLACEHOLDER_BULK_BUCKET = "REPLACE-WITH-BULK-BUCKET-NAME"


@dataclass(frozen=True)
class ChartInputs:
    """Deploy-time values of the charts.

    Attributes:
        bucket_name: Model bucket (``docs/contracts.md`` §3); a CDK token is fine.
        image_repository: Serving image repository URI without tag, e.g.
            ``123456789012.dkr.ecr.us-east-1.amazonaws.com/whisper-serving``; the tag is
            ``config.serving.image_tag``.
        amp_workspace_id: Amazon Managed Prometheus workspace id (``ws-...``) KEDA queries;
            ``None`` when there is no workspace (``observability.enabled: false``): then the charts
            have no KEDA objects and each Deployment runs ``max(min_replicas, 1)`` pods.
        tls_bucket_name: Bucket the inference operator writes its self-signed certificates to
            (``serving.target: inference_operator`` without a custom certificate).
        api_keys_secret_arn: ARN of the Secrets Manager secret holding the gateway's API keys
            (``endpoint.auth: api_key``); ``None`` without authentication.
        scraper_cidrs: CIDRs the metrics scraper connects from (the private subnets); ``None``:
            the VPC CIDR.
    """

    bucket_name: str
    image_repository: str
    amp_workspace_id: str | None
    tls_bucket_name: str = PLACEHOLDER_TLS_BUCKET
    api_keys_secret_arn: str | None = None
    scraper_cidrs: tuple[str, ...] | None = None
    bulk_queue_url: str = PLACEHOLDER_BULK_QUEUE_URL
    bulk_bucket_name: str = PLACEHOLDER_BULK_BUCKET

    def image(self, tag: str) -> str:
        """Image reference ``<repository>:<tag>``."""
        return f"{self.image_repository}:{tag}"


PLACEHOLDER_INPUTS = ChartInputs(
    PLACEHOLDER_BUCKET,
    PLACEHOLDER_IMAGE_REPOSITORY,
    PLACEHOLDER_AMP_WORKSPACE_ID,
    api_keys_secret_arn=PLACEHOLDER_API_KEYS_SECRET_ARN,
)
"""Inputs for plain YAML (``dist/k8s/``): named placeholders instead of stack outputs."""
