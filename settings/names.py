"""Names of the AWS resources and Kubernetes objects a deployment creates, derived from the config.

One place for the stacks (which create them), the deploy tool (which waits on and prints them) and
the docs. Pure functions of the config: importing this module loads no CDK.
Docs: docs/contracts.md, "1. Deployment config".
"""

from __future__ import annotations

from settings import labels, storage
from settings.schema import DeploymentConfig, GpuGroup

SERVING_IMAGE_REPOSITORY = "whisper-serving"
"""ECR repository name suffix of the serving image (Triton + gateway): ``<project>/whisper-serving``."""
HYPERPOD_CHART_NAME = "hyperpod-helm-chart"
"""``name`` in the HyperPod dependency chart's ``Chart.yaml`` (aws/sagemaker-hyperpod-cli)."""
CHARTS_NAMESPACE = "charts"
"""``helm push <tgz> oci://<registry>/<project>/charts`` stores the chart in the ECR repository
``<project>/charts/<chart name>`` (Helm OCI docs: the chart name is appended to the reference)."""
PROJECT_TAG = "project"
"""Tag key every resource of the deployment carries, value ``project_name`` (``Tags.of(app)``)."""
MODEL_BUCKET_PURPOSE = "models"
LIFECYCLE_BUCKET_PURPOSE = "lifecycle"
ENDPOINT_SERVICE_NAME = labels.APP_NAME
"""Kubernetes Service (and, for ``endpoint.kind: alb``, Ingress) in front of every GPU group."""
ENDPOINT_SERVICE_PORT = 80
"""Port of the endpoint without a certificate (plain HTTP, internal endpoints only)."""
ENDPOINT_TLS_PORT = 443
"""Port of the endpoint with ``endpoint.certificate_arn`` (NLB TLS / ALB HTTPS; no plaintext listener)."""


STACKS = ("Network", "Storage", "Cluster", "Observability", "Bulk", "Workloads", "EngineBuild")
"""Suffixes of every stack ``stacks/whisper_app.py`` can create, in creation order; :func:`stacks` picks
those of one config."""


def stacks(config: DeploymentConfig) -> tuple[str, ...]:
    """Suffixes of the stacks ``make deploy`` creates for ``config`` (what ``make destroy`` waits on and checks).

    E.g. ``config/default.yaml`` → Network, Storage, Cluster, Observability, Workloads, EngineBuild;
    ``config/examples/bulk.yaml`` adds Bulk.
    """
    enabled = {"Observability": config.observability.enabled, "Bulk": config.bulk.enabled}
    return tuple(stack for stack in STACKS if enabled.get(stack, True))


STACK_CONTENTS = {
    "Network": "network",
    "Storage": "storage (its buckets and ECR repositories are retained)",
    "Cluster": "EKS + HyperPod cluster",
    "Observability": "observability",
    "Bulk": "bulk job queues and bucket",
    "Workloads": "workloads",
    "EngineBuild": "engine builds",
}
"""Each stack's contents in a few words, for the deploy tool's step lines (docs/deploy.md, Stacks)."""


def stack_contents(config: DeploymentConfig, *, without: tuple[str, ...] = ()) -> str:
    """The contents of ``config``'s stacks (:func:`stacks`) less ``without``, in words.

    E.g. ``"network, EKS + HyperPod cluster, observability, workloads, engine builds"``
    (``without=("Storage",)``, default config).
    """
    return ", ".join(STACK_CONTENTS[stack] for stack in stacks(config) if stack not in without)


def stack_prefix(project_name: str) -> str:
    """``whisper-hyperpod`` → ``WhisperHyperpod`` (stack ids are CloudFormation stack names)."""
    return "".join(part.capitalize() for part in project_name.split("-"))


def stack_name(config: DeploymentConfig, stack: str) -> str:
    """CloudFormation stack name of one stack, e.g. ``stack_name(config, "Storage")`` → ``WhisperHyperpodStorage``."""
    return f"{stack_prefix(config.project_name)}{stack}"


def cluster_name(config: DeploymentConfig) -> str:
    """EKS cluster name: the project name."""
    return config.project_name


def hyperpod_cluster_name(config: DeploymentConfig) -> str:
    """SageMaker HyperPod cluster name, ``<project>-hp``."""
    return f"{config.project_name}-hp"


def serving_repository_name(config: DeploymentConfig) -> str:
    """ECR repository of the serving image, ``<project>/whisper-serving``."""
    return f"{config.project_name}/{SERVING_IMAGE_REPOSITORY}"


def chart_repository_name(config: DeploymentConfig) -> str:
    """ECR repository of the HyperPod dependency chart, ``<project>/charts/hyperpod-helm-chart``."""
    return f"{config.project_name}/{CHARTS_NAMESPACE}/{HYPERPOD_CHART_NAME}"


def bucket_name(project_name: str, purpose: str, account: str, region: str) -> str:
    """``<project>-<purpose>-<account>-<region>``, e.g. ``whisper-hyperpod-models-123456789012-us-east-1``.

    ``account`` and ``region`` may be CloudFormation tokens inside the stacks.
    """
    return f"{project_name}-{purpose}-{account}-{region}"


def bulk_queue_name(config: DeploymentConfig) -> str:
    """The bulk job queue, ``<project>-bulk-jobs``: named by the bulk stack, read by the dashboard's CloudWatch panels.

    At most 49 characters (``project_name`` ≤ 32), within SQS's 80 letters, digits, ``-`` and ``_``
    (SQS API Reference, ``CreateQueue``, ``QueueName``); CloudWatch's ``AWS/SQS`` metrics carry it as the
    ``QueueName`` dimension.
    """
    return f"{config.project_name}-bulk-jobs"


def bulk_dead_letter_queue_name(config: DeploymentConfig) -> str:
    """The bulk job queue's dead-letter queue, ``<project>-bulk-dead-letter``."""
    return f"{config.project_name}-bulk-dead-letter"


BULK_STACK_OUTPUTS = {"bucket": "BulkBucketName", "queue": "BulkQueueUrl", "dead_letter": "BulkDeadLetterQueueUrl"}
"""The bulk stack's (``stack_name(config, "Bulk")``) output keys: the job bucket's name, the job queue's
and the dead-letter queue's URLs. The stack writes them; ``make submit`` / ``jobs`` / ``fetch`` read them
with one ``DescribeStacks`` (no CDK)."""


def workload_name(group: GpuGroup) -> str:
    """Deployment / PDB / ScaledObject name of a group, e.g. ``whisper-g5``."""
    return f"{labels.APP_NAME}-{group.name}"


def engine_project_name(config: DeploymentConfig, arch: str) -> str:
    """``<project>-engine-<target>``, e.g. ``whisper-hyperpod-engine-sm86``.

    ``arch`` is an engine target; ``sm90-1g.10gb`` gives ``…-engine-sm90-1g-10gb`` (no dots in CodeBuild names).
    """
    return f"{config.project_name}-engine-{storage.kubernetes_name(arch)}"


def image_project_name(config: DeploymentConfig) -> str:
    """``<project>-serving-image``."""
    return f"{config.project_name}-serving-image"


def rollout_project_name(config: DeploymentConfig) -> str:
    """``<project>-rollout``."""
    return f"{config.project_name}-rollout"


SAGEMAKER_ENDPOINT_NAME_MAX = 63
"""Longest SageMaker endpoint name (``EndpointName`` pattern, SageMaker API reference, ``CreateEndpoint``)."""


def sagemaker_endpoint_name(config: DeploymentConfig, mig_profile: str | None) -> str:
    """``endpointName`` of the ``InferenceEndpointConfig`` serving whole GPUs (``None``) or one MIG profile.

    ``<project>`` or ``<project>-mig-<profile>`` (no dots), e.g. ``whisper-hyperpod-mig-1g-10gb``; the
    HyperPod inference operator registers a SageMaker endpoint of that name (``serving.target:
    inference_operator``, ``k8s_charts/inference_endpoint.py``).

    Raises:
        ValueError: longer than :data:`SAGEMAKER_ENDPOINT_NAME_MAX` characters (shorten ``project_name``).
    """
    name = config.project_name + (f"-mig-{storage.kubernetes_name(mig_profile)}" if mig_profile else "")
    if len(name) > SAGEMAKER_ENDPOINT_NAME_MAX:
        raise ValueError(
            f"SageMaker endpoint name {name!r} is longer than {SAGEMAKER_ENDPOINT_NAME_MAX} characters; shorten "
            "project_name"
        )
    return name


def sagemaker_endpoint_names(config: DeploymentConfig) -> list[str]:
    """Every SageMaker endpoint the inference operator target registers: one per resource shape, in config order."""
    profiles = dict.fromkeys(group.mig_profile for group in config.gpu_groups)
    return [sagemaker_endpoint_name(config, profile) for profile in profiles]


def operator_endpoint_names(config: DeploymentConfig) -> list[str]:
    """The SageMaker endpoints ``config`` deploys (what ``make destroy`` checks and the closing lines name).

    :func:`sagemaker_endpoint_names` for ``serving.target: inference_operator``; none for ``deployments``.
    """
    return sagemaker_endpoint_names(config) if config.serving.target == "inference_operator" else []


INFERENCE_ENDPOINT_CONFIGS = "inferenceendpointconfigs.inference.sagemaker.aws.amazon.com"
"""The HyperPod inference operator's CRD as ``<plural>.<group>`` (its schema is vendored in ``tests/data/crds/``)."""
