"""The HyperPod inference operator as an EKS add-on, with its IAM execution role.

Entry point: :class:`InferenceOperatorAddon` (the details, in its docstring).
Docs: docs/serving-targets.md.
"""

from __future__ import annotations

from aws_cdk import CfnJson, Stack
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from settings import namespaces, storage
from stacks.nag import acknowledge_managed_policies, acknowledge_resource

ADDON_NAME = "amazon-sagemaker-hyperpod-inference"
OPERATOR_NAMESPACE = namespaces.INFERENCE_OPERATOR
"""Namespace of the operator's controller (``kubectl get pods -n hyperpod-inference-system``, HyperPod
inference troubleshooting)."""
MANAGED_POLICY = "AmazonSageMakerHyperPodInferenceAccess"
"""AWS managed policy of the operator's execution role (HyperPod inference operator setup)."""


class InferenceOperatorAddon(Construct):
    """``AWS::EKS::Addon`` ``amazon-sagemaker-hyperpod-inference`` and its execution role.

    Args:
        cluster: The EKS cluster (its OIDC provider is created if missing).
        model_bucket: Model bucket (the operator mounts ``models/<model>/`` from it).
        tls_bucket: Bucket the operator writes its self-signed endpoint certificates to.

    Attributes:
        role: The execution role.
        addon: The add-on (apply ``InferenceEndpointConfig`` objects after it: it installs the CRD).

    Installed with ``serving.target: inference_operator``. Why the add-on and not the dependency chart's ``inferenceOperators.enabled``: the chart's operator
    sub-chart brings its own AWS Load Balancer Controller, KEDA 2.17.1, Mountpoint for S3 CSI driver,
    cert-manager, metrics-server and FSx CSI driver (``charts/inference-operator/Chart.yaml``), which
    would duplicate the Mountpoint add-on this project installs and would each have to be switched off
    and kept compatible by hand; the EKS add-on ``amazon-sagemaker-hyperpod-inference`` (inference
    operator v3.0, "EKS add-on integration"; AWS's ``migration/helm_to_addon.sh`` moves Helm installs to
    it) is versioned, upgraded and rolled back by EKS, installs its dependencies as add-ons, and takes
    its execution role and TLS bucket as configuration values. So with this target the workloads stack
    installs neither its own Load Balancer Controller nor KEDA (the operator's dependencies provide both).

    Configuration values (``executionRoleArn``, ``tlsCertificateS3Bucket``) as AWS's HyperPod samples
    pass them to ``AWS::EKS::Addon``. The execution role is assumed through the cluster's OIDC provider
    (IRSA) by the operator's service accounts in :data:`OPERATOR_NAMESPACE` (HyperPod troubleshooting,
    "IAM trust relationship issue": ``sts:AssumeRoleWithWebIdentity`` for
    ``system:serviceaccount:<namespace>:<service-account-name>``), with the AWS managed policy
    :data:`MANAGED_POLICY`, read access to the engines (``models/`` of the model bucket) and read/write of
    the TLS certificate bucket. Not deployed here (no AWS account): the add-on's behaviour is as documented.
    """

    def __init__(
        self, scope: Construct, id: str, *, cluster: eks.Cluster, model_bucket: s3.IBucket, tls_bucket: s3.IBucket
    ) -> None:
        super().__init__(scope, id)
        provider = cluster.open_id_connect_provider
        issuer = provider.open_id_connect_provider_issuer
        conditions = CfnJson(
            self,
            "TrustConditions",
            value={
                f"{issuer}:sub": f"system:serviceaccount:{OPERATOR_NAMESPACE}:*",
                f"{issuer}:aud": "sts.amazonaws.com",
            },
        )
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.FederatedPrincipal(
                provider.open_id_connect_provider_arn,
                {"StringLike": conditions},
                "sts:AssumeRoleWithWebIdentity",
            ),
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(MANAGED_POLICY)],
            description="HyperPod inference operator: endpoints, load balancers, certificates for whisper",
        )
        models = f"{storage.MODELS_ROOT}*"
        policy = iam.Policy(
            self,
            "ExecutionPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[model_bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [models]}},
                ),
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[model_bucket.arn_for_objects(models)]),
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[tls_bucket.bucket_arn]),
                iam.PolicyStatement(
                    actions=["s3:GetObject", "s3:PutObject", "s3:PutObjectTagging", "s3:DeleteObject"],
                    resources=[tls_bucket.arn_for_objects("*")],
                ),
            ],
        )
        policy.attach_to_role(self.role)
        acknowledge_managed_policies(
            self.role,
            f"{MANAGED_POLICY} is the policy AWS documents for the HyperPod inference operator's execution role",
        )
        acknowledge_resource(
            policy,
            model_bucket.arn_for_objects(models),
            "engine files under models/ have version-stamped keys; read-only",
        )
        acknowledge_resource(
            policy,
            tls_bucket.arn_for_objects("*"),
            "the TLS bucket holds only the certificates the operator generates, under names it chooses",
        )
        self.addon = eks_l1.CfnAddon(
            self,
            "Resource",
            addon_name=ADDON_NAME,
            cluster_name=cluster.cluster_name,
            resolve_conflicts="OVERWRITE",
            # a JSON string holding tokens: Stack.to_json_string renders them (json.dumps cannot)
            configuration_values=Stack.of(self).to_json_string(
                {"executionRoleArn": self.role.role_arn, "tlsCertificateS3Bucket": tls_bucket.bucket_name}
            ),
        )
        self.addon.node.add_dependency(policy)
