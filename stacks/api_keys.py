"""The gateway's API keys: a Secrets Manager secret under a customer-managed KMS key.

The serving pods read it through EKS Pod Identity.

Secret format (``docs/deploy.md``, Security): a JSON object whose string values are the active keys,
``{"primary": "<key>", "next": "<key>"}``, or a JSON list of keys, ``["<key>", "<key>"]``. Every
listed key is accepted, so a key is rotated without downtime: add the new one, move clients, drop
the old one. The stack generates ``{"primary": <48 random letters and digits>}``. The gateway reads
the secret every ``WHISPER_GATEWAY_API_KEYS_REFRESH_SECONDS`` (:mod:`whisper_build.serving.gateway.auth`).

Entry point: :class:`GatewayApiKeys` (the details, in its docstring).
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from settings.endpoint_auth import GENERATED_KEY_NAME
from stacks.nag import acknowledge

GENERATED_KEY_LENGTH = 48
"""Letters and digits: ~285 bits of entropy."""


class GatewayApiKeys(Construct):
    """KMS key + secret of API keys + the Pod Identity role the serving pods read it with.

    Args:
        cluster: The EKS cluster (its Pod Identity agent add-on must exist).
        namespace: Namespace of the serving pods.
        service_account: Their ServiceAccount name.
        project_name: Named in the key's and the secret's descriptions.

    Attributes:
        key: The customer-managed KMS key (rotation on) encrypting the secret.
        secret: The secret; ``secret.secret_arn`` goes into ``WHISPER_GATEWAY_API_KEYS_SECRET``.
        role: The role the serving ServiceAccount assumes (read the secret, decrypt through Secrets Manager).
        association: The ``CfnPodIdentityAssociation`` of role and ServiceAccount.

    Lifecycle: CloudFormation names the secret (``GatewayApiKeysSecret…-<random>``; the pods get its ARN,
    people the stack output ``ApiKeysSecretArn``), and the secret and its KMS key are deleted with the stack.
    A fixed name would collide on the next deploy: with a retained secret, and even with a deleted one,
    because Secrets Manager keeps a deleted secret's name for its recovery window (7–30 days, DeleteSecret
    API reference). ``make destroy`` therefore revokes every key; a redeploy generates new ones
    (docs/deploy.md, Teardown).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.ICluster,
        namespace: str,
        service_account: str,
        project_name: str,
    ) -> None:
        super().__init__(scope, id)
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"{project_name}: encrypts the gateway API keys secret",
            removal_policy=RemovalPolicy.DESTROY,  # with its secret (module docstring)
            pending_window=Duration.days(30),
        )
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description=f"{project_name}: active API keys of the whisper gateway, JSON object of name -> key "
            "(docs/deploy.md)",
            encryption_key=self.key,
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template="{}",
                generate_string_key=GENERATED_KEY_NAME,
                exclude_punctuation=True,
                include_space=False,
                password_length=GENERATED_KEY_LENGTH,
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        acknowledge(
            self.secret,
            "AwsSolutions-SMG4",
            "API keys are shared with clients, so rotation is an operator step (add a key, move clients, "
            "drop the old key; docs/deploy.md) that a rotation Lambda cannot coordinate",
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description="Serving pods: read the gateway API keys secret",
        )
        self.secret.grant_read(self.role)  # GetSecretValue/DescribeSecret + kms:Decrypt via Secrets Manager
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "PodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=self.role.role_arn,
        )
