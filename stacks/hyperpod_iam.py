"""IAM of the HyperPod cluster: the instance-group execution role and the Karpenter cluster role.

Sources: SageMaker HyperPod EKS prerequisites and IAM pages
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-prerequisites.html,
https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-autoscaling-iam.html) and
AWS's templates (aws/sagemaker-hyperpod-cluster-setup ``sagemaker-iam-role-template.yaml``,
awsome-distributed-training ``sagemaker-iam-role-stack.yaml``).
Docs: docs/deploy.md, "Security".
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from stacks.nag import acknowledge_managed_policies, acknowledge_resource

INSTANCE_ROLE_MANAGED_POLICY = "AmazonSageMakerClusterInstanceRolePolicy"
"""AWS managed policy every HyperPod instance-group execution role carries (HyperPod IAM docs)."""

EC2_DESCRIBE_ACTIONS = (
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeInstances",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeTags",
    "ec2:DescribeVpcs",
)
"""Read-only calls of the VPC CNI (aws-node) and the HyperPod agents; EC2 Describe* calls do not
support resource-level permissions (Service Authorization Reference, Amazon EC2)."""

ENI_ACTIONS = (
    "ec2:AssignPrivateIpAddresses",
    "ec2:AttachNetworkInterface",
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DetachNetworkInterface",
    "ec2:ModifyNetworkInterfaceAttribute",
    "ec2:UnassignPrivateIpAddresses",
)
"""ENI management of the VPC CNI on HyperPod nodes (HyperPod templates; AmazonEKS_CNI_Policy)."""

ECR_PULL_ACTIONS = (
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
)

KARPENTER_KMS_GRANT_OPERATIONS = (
    "CreateGrant",
    "Decrypt",
    "DescribeKey",
    "GenerateDataKeyWithoutPlaintext",
    "ReEncryptTo",
    "ReEncryptFrom",
    "RetireGrant",
)


def _ec2_arn(stack: Stack, resource: str) -> str:
    return stack.format_arn(service="ec2", resource=resource, resource_name="*")


def lifecycle_list_prefixes(lifecycle_key: str) -> list[str]:
    """``s3:prefix`` values of the execution role's ``s3:ListBucket`` on the lifecycle bucket.

    HyperPod reads the lifecycle scripts from ``LifeCycleConfig.SourceS3Uri`` — "An Amazon S3
    bucket path where your lifecycle scripts are stored"
    (https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterLifeCycleConfig.html) —
    ``s3://<bucket>/<key>``, so the listing may use the URI's key exactly as written or anything
    below it: ``[<key>, <key>/*]`` (``StringLike``; ``<key>/*`` also matches ``<key>/``).

    Raises:
        ValueError: ``lifecycle_key`` is empty or starts or ends with ``/`` (it would not be the
            key of ``s3://<bucket>/<key>``).
    """
    if not lifecycle_key or lifecycle_key.startswith("/") or lifecycle_key.endswith("/"):
        raise ValueError(f"lifecycle_key must be an S3 key without leading or trailing '/', got '{lifecycle_key}'")
    return [lifecycle_key, f"{lifecycle_key}/*"]


def lifecycle_source_uri(bucket_name: str, lifecycle_key: str) -> str:
    """``SourceS3Uri`` of the instance groups: ``s3://<bucket>/<key>`` (the key :func:`lifecycle_list_prefixes` allows)."""
    return f"s3://{bucket_name}/{lifecycle_key}"


def create_execution_role(
    scope: Construct,
    construct_id: str,
    *,
    cluster_arn: str,
    subnets: Sequence[ec2.ISubnet],
    security_group: ec2.ISecurityGroup,
    lifecycle_bucket: s3.IBucket,
    lifecycle_key: str,
) -> tuple[iam.Role, iam.Policy]:
    """Least-privilege execution role of the HyperPod instance groups.

    Grants: the managed instance policy; VPC CNI ENI management limited to this account/region's
    ENIs and instances and the cluster's subnets and security group; ECR image pulls; EKS Pod
    Identity for pods on the nodes (``eks-auth:AssumeRoleForPodIdentity`` on this cluster); read of
    the lifecycle scripts under ``lifecycle_key`` (no S3 write at all).

    Args:
        scope: construct scope of the role and its policy.
        construct_id: id of the role (the policy is ``<construct_id>Policy``).
        cluster_arn: ARN of the EKS cluster the nodes join.
        subnets: Subnets the instance groups use.
        security_group: Security group the instance groups use.
        lifecycle_bucket: Bucket holding ``on_create.sh``.
        lifecycle_key: The key part of the cluster's ``SourceS3Uri`` (``s3://<bucket>/<key>``), without
            a trailing ``/`` (e.g. ``lifecycle``); the scripts are the objects under ``<key>/``.

    Returns:
        The role and its inline policy (the HyperPod cluster must be created after the policy).

    Raises:
        ValueError: ``lifecycle_key`` is empty or starts or ends with ``/``.
    """
    stack = Stack.of(scope)
    lifecycle_objects = lifecycle_bucket.arn_for_objects(f"{lifecycle_key}/*")
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
        description="HyperPod instance groups: nodes of the whisper-hyperpod EKS cluster",
        managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(INSTANCE_ROLE_MANAGED_POLICY)],
    )
    eni_resources = [
        _ec2_arn(stack, "network-interface"),
        _ec2_arn(stack, "instance"),
        *(stack.format_arn(service="ec2", resource="subnet", resource_name=s.subnet_id) for s in subnets),
        stack.format_arn(service="ec2", resource="security-group", resource_name=security_group.security_group_id),
    ]
    statements = [
        iam.PolicyStatement(actions=list(EC2_DESCRIBE_ACTIONS), resources=["*"]),
        iam.PolicyStatement(actions=list(ENI_ACTIONS), resources=eni_resources),
        iam.PolicyStatement(actions=["ec2:CreateTags"], resources=[_ec2_arn(stack, "network-interface")]),
        iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
        iam.PolicyStatement(actions=list(ECR_PULL_ACTIONS), resources=["*"]),
        iam.PolicyStatement(actions=["eks-auth:AssumeRoleForPodIdentity"], resources=[cluster_arn]),
        iam.PolicyStatement(actions=["s3:GetObject"], resources=[lifecycle_objects]),
        iam.PolicyStatement(
            actions=["s3:ListBucket"],
            resources=[lifecycle_bucket.bucket_arn],
            conditions={"StringLike": {"s3:prefix": lifecycle_list_prefixes(lifecycle_key)}},
        ),
    ]
    policy = iam.Policy(scope, f"{construct_id}Policy", statements=statements)
    policy.attach_to_role(role)

    acknowledge_managed_policies(
        role, "AWS requires AmazonSageMakerClusterInstanceRolePolicy on every HyperPod execution role"
    )
    wildcard_reasons = {
        "*": "EC2 Describe* and ecr:GetAuthorizationToken have no resource-level permissions; ECR pulls "
        "(read-only) must reach AWS-owned registries of EKS add-ons and HyperPod agents in other accounts",
        eni_resources[0]: "the VPC CNI creates and tags ENIs whose ids are not known in advance; "
        "limited to this account and region",
        eni_resources[1]: "the VPC CNI attaches ENIs to HyperPod instances, whose ids HyperPod assigns at run "
        "time; limited to this account and region",
        lifecycle_objects: "HyperPod copies every lifecycle script under the prefix to each node; read-only",
    }
    for resource, reason in wildcard_reasons.items():
        acknowledge_resource(policy, resource, reason)
    return role, policy


def create_karpenter_cluster_role(scope: Construct, construct_id: str) -> iam.Role:
    """Role HyperPod's managed Karpenter assumes to add and remove cluster nodes (``ClusterRole``).

    Trust ``hyperpod.sagemaker.amazonaws.com``; policy copied from the HyperPod autoscaling IAM page
    (BatchAddClusterNodes/BatchDeleteClusterNodes on this account's clusters, KMS grants only via
    SageMaker for AWS resources).
    """
    role = iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal("hyperpod.sagemaker.amazonaws.com"),
        description="HyperPod-managed Karpenter: adds and removes HyperPod cluster nodes",
    )
    stack = Stack.of(scope)
    clusters = stack.format_arn(service="sagemaker", resource="cluster", resource_name="*")
    keys = stack.format_arn(service="kms", resource="key", resource_name="*")
    policy = iam.Policy(
        scope,
        f"{construct_id}Policy",
        statements=[
            iam.PolicyStatement(
                actions=["sagemaker:BatchAddClusterNodes", "sagemaker:BatchDeleteClusterNodes"],
                resources=[clusters],
                conditions={"StringEquals": {"aws:ResourceAccount": "${aws:PrincipalAccount}"}},
            ),
            iam.PolicyStatement(
                actions=["kms:CreateGrant", "kms:DescribeKey"],
                resources=[keys],
                conditions={
                    "StringLike": {"kms:ViaService": "sagemaker.*.amazonaws.com"},
                    "Bool": {"kms:GrantIsForAWSResource": "true"},
                    "ForAllValues:StringEquals": {"kms:GrantOperations": list(KARPENTER_KMS_GRANT_OPERATIONS)},
                },
            ),
        ],
    )
    policy.attach_to_role(role)
    acknowledge_resource(
        policy,
        clusters,
        "HyperPod's autoscaling IAM page scopes node add/remove to clusters of this account; the cluster id is "
        "only known after creation",
    )
    acknowledge_resource(
        policy,
        keys,
        "KMS grants are limited by condition to SageMaker-created grants for AWS resources (HyperPod autoscaling docs)",
    )
    return role
