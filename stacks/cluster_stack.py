"""Cluster: the EKS control plane (``aws_eks_v2``), add-ons, system nodes, HyperPod chart and cluster.

The EKS control plane, its add-ons and system node group, the HyperPod dependency Helm chart, and
the HyperPod cluster whose GPU nodes join it.

Order at deploy time (HyperPod EKS prerequisites: "install the dependency Helm chart before creating
the HyperPod cluster"): EKS cluster → node add-ons (vpc-cni, kube-proxy, pod identity agent) →
system node group → CoreDNS, Mountpoint add-ons and the HyperPod dependency chart →
``AWS::SageMaker::Cluster``. Workloads (cdk8s charts, controllers) come after, via :meth:`ClusterStack.add_workloads`.
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from typing import Any, cast

import cdk8s
from aws_cdk import CfnOutput, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk.lambda_layer_kubectl_v34 import KubectlV34Layer
from constructs import Construct, IConstruct

from settings import names, namespaces, storage
from settings.names import HYPERPOD_CHART_NAME
from settings.schema import DeploymentConfig
from stacks.hyperpod import HyperPodCluster
from stacks.nag import acknowledge, acknowledge_managed_policies, acknowledge_policy_wildcards, acknowledge_resource
from stacks.system_nodes import system_node_launch_template

KUBECTL_MINOR = 34
"""Minor version of kubectl/helm in the kubectl layer (``aws-cdk.lambda-layer-kubectl-v34``)."""
KUBECTL_SKEW = 1
"""kubectl supports control planes one minor version older or newer (Kubernetes version skew policy,
https://kubernetes.io/releases/version-skew-policy/#kubectl)."""

NODE_ADDONS = ("vpc-cni", "kube-proxy")
"""EKS managed add-ons (DaemonSets) a node needs to become Ready; installed before any node. HyperPod
requires VPC CNI >= 1.18.3, the EKS default for Kubernetes >= 1.30."""
ADDON_CONFIGURATION = {"vpc-cni": {"enableNetworkPolicy": "true"}}
"""Add-on configuration values: the VPC CNI's network policy agent enforces the serving
NetworkPolicies (``k8s_charts.network_policy``; VPC CNI >= 1.14, EKS user guide "Restrict pod
traffic with Kubernetes network policies")."""
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
COREDNS_ADDON = "coredns"
"""CoreDNS runs as a Deployment, so it is installed once the system node group exists (AWS's HyperPod
EKS templates install the same four add-ons)."""
MOUNTPOINT_ADDON = "aws-mountpoint-s3-csi-driver"
MOUNTPOINT_SERVICE_ACCOUNT = (namespaces.KUBE_SYSTEM, "s3-csi-driver-sa")
"""Service account of the Mountpoint for S3 CSI driver; driver v2 takes credentials from EKS Pod
Identity (mountpoint-s3-csi-driver ``docs/CONFIGURATION.md``)."""
HYPERPOD_CHART_RELEASE = "hyperpod-dependencies"
"""Release name AWS's HyperPod console/CloudFormation setup uses for the dependency chart."""
SYSTEM_NODE_LABEL = ("whisper-hyperpod.io/node-role", "system")


def as_icluster(cluster: eks.Cluster) -> eks.ICluster:
    """``cluster`` typed as the ``eks.ICluster`` it implements (a cast; nothing changes at run time).

    aws-cdk-lib's Python ``Cluster`` declares ``@jsii.implements(ICluster)`` but not the interface's
    optional ``kubectl_provider_options`` property, so a type checker sees no structural match where
    an ``ICluster`` is expected (``Addon``, ``KubernetesManifest``, ``HelmChart``).
    """
    return cast(eks.ICluster, cluster)


def check_kubectl_compatibility(kubernetes_version: str) -> None:
    """Fail synthesis when the kubectl layer cannot manage a control plane of ``kubernetes_version``.

    Raises:
        ValueError: the minor version differs from :data:`KUBECTL_MINOR` by more than :data:`KUBECTL_SKEW`.
    """
    minor = int(kubernetes_version.split(".")[1])
    if abs(minor - KUBECTL_MINOR) > KUBECTL_SKEW:
        raise ValueError(
            f"cluster.kubernetes_version {kubernetes_version} is outside the skew of the kubectl layer "
            f"(kubectl 1.{KUBECTL_MINOR} manages 1.{KUBECTL_MINOR - KUBECTL_SKEW}–1.{KUBECTL_MINOR + KUBECTL_SKEW}); "
            f"use 1.{KUBECTL_MINOR - KUBECTL_SKEW} or 1.{KUBECTL_MINOR}, or switch stacks/cluster_stack.py to the "
            "matching aws-cdk.lambda-layer-kubectl-vNN package"
        )


class ClusterStack(Stack):
    """EKS + HyperPod.

    Attributes:
        cluster: The EKS cluster (``aws_eks_v2.Cluster``, API authentication mode, kubectl provider).
        secrets_key: Customer-managed KMS key (rotation on) for the envelope encryption of
            Kubernetes Secrets (EKS ``EncryptionConfig``).
        system_nodegroup: Managed CPU node group for system pods (CoreDNS, controllers, KEDA).
        addons: EKS managed add-ons by name (``vpc-cni``, ``kube-proxy``, ``coredns``,
            ``eks-pod-identity-agent``, ``aws-mountpoint-s3-csi-driver``).
        mountpoint_role: Read-only role of the Mountpoint S3 CSI driver on ``models/`` of the model bucket.
        hyperpod_chart: The HyperPod dependency Helm release.
        hyperpod: The HyperPod cluster construct (``hyperpod.cluster`` is the ``CfnCluster``).
        model_bucket: The model bucket, referenced by name (no cross-stack export).
        lifecycle_bucket: The bucket the lifecycle scripts are uploaded to, referenced by name.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        vpc: ec2.IVpc,
        node_security_group: ec2.ISecurityGroup,
        model_bucket_name: str,
        lifecycle_bucket_name: str,
        chart_repository: ecr.IRepository,
        chart_oci_url: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        check_kubectl_compatibility(config.cluster.kubernetes_version)
        self.config = config
        self.model_bucket = s3.Bucket.from_bucket_name(self, "ModelBucket", model_bucket_name)
        self.lifecycle_bucket = s3.Bucket.from_bucket_name(self, "LifecycleBucket", lifecycle_bucket_name)
        private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)

        self.cluster = eks.Cluster(
            self,
            "Eks",
            cluster_name=names.cluster_name(config),
            version=eks.KubernetesVersion.of(config.cluster.kubernetes_version),
            vpc=vpc,
            vpc_subnets=[private_subnets],
            security_group=node_security_group,
            endpoint_access=(
                eks.EndpointAccess.PRIVATE
                if config.cluster.endpoint_access == "private"
                else eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*config.cluster.public_access_cidrs)
            ),
            default_capacity_type=eks.DefaultCapacityType.NODEGROUP,
            default_capacity=0,
            bootstrap_self_managed_addons=False,
            cluster_logging=[
                eks.ClusterLoggingTypes.API,
                eks.ClusterLoggingTypes.AUDIT,
                eks.ClusterLoggingTypes.AUTHENTICATOR,
                eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
                eks.ClusterLoggingTypes.SCHEDULER,
            ],
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV34Layer(self, "KubectlLayer")),
            secrets_encryption_key=self._secrets_key(),
        )
        # Pods on the managed CPU nodes (EKS cluster security group) and on HyperPod nodes (shared
        # node security group) talk to each other: DNS, webhooks, gateway → Triton.
        # The rules live in this stack (L1) because the node security group's stack cannot refer
        # to the EKS-created cluster security group without a cross-stack cycle.
        for rule_id, source, target in (
            ("ClusterSgToNodeSg", self.cluster.cluster_security_group_id, node_security_group.security_group_id),
            ("NodeSgToClusterSg", node_security_group.security_group_id, self.cluster.cluster_security_group_id),
        ):
            ec2.CfnSecurityGroupIngress(
                self,
                rule_id,
                group_id=target,
                source_security_group_id=source,
                ip_protocol="-1",
                description="EKS managed CPU nodes <-> HyperPod nodes (all traffic)",
            )

        self.addons = self._add_addons()
        self.system_nodegroup = self.cluster.add_nodegroup_capacity(
            "SystemNodes",
            instance_types=[ec2.InstanceType(config.cluster.system_node_instance_type)],
            min_size=config.cluster.system_node_count,
            desired_size=config.cluster.system_node_count,
            max_size=config.cluster.system_node_count,
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            subnets=private_subnets,
            labels=dict([SYSTEM_NODE_LABEL]),
            launch_template_spec=system_node_launch_template(self, config.project_name),
        )
        self.system_nodegroup.node.add_dependency(*(self.addons[name] for name in (*NODE_ADDONS, POD_IDENTITY_ADDON)))
        coredns = eks.Addon(self, f"Addon-{COREDNS_ADDON}", cluster=as_icluster(self.cluster), addon_name=COREDNS_ADDON)
        coredns.node.add_dependency(self.system_nodegroup)
        self.addons[COREDNS_ADDON] = coredns
        self.mountpoint_role = self._add_mountpoint(self.model_bucket)

        self.hyperpod_chart = self._add_hyperpod_chart(chart_repository, chart_oci_url)
        self.hyperpod = HyperPodCluster(
            self,
            "HyperPod",
            config=config,
            eks_cluster_arn=self.cluster.cluster_arn,
            subnets=vpc.select_subnets(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS).subnets,
            security_group=node_security_group,
            lifecycle_bucket=self.lifecycle_bucket,
        )
        # HyperPod refuses to attach to an EKS cluster without its dependency chart.
        self.hyperpod.cluster.node.add_dependency(self.hyperpod_chart, *self.addons.values())

        self._acknowledge_aws_prescribed()
        CfnOutput(self, "EksClusterName", value=self.cluster.cluster_name, description="EKS cluster name")
        CfnOutput(
            self, "HyperPodClusterArn", value=self.hyperpod.cluster.attr_cluster_arn, description="HyperPod cluster ARN"
        )

        # --- Workloads -------------------------------------------------------------------------
        # Controllers (AWS Load Balancer Controller, KEDA) and the cdk8s serving charts are added
        # here, after the HyperPod cluster, e.g. ``self.add_workloads("Serving", chart)``.

    @property
    def workload_dependencies(self) -> list[IConstruct]:
        """Constructs every workload must be created after.

        The HyperPod cluster (GPU nodes) and the Mountpoint CSI driver (model volumes).
        """
        return [self.hyperpod.cluster, self.addons[MOUNTPOINT_ADDON]]

    def add_workloads(self, construct_id: str, chart: cdk8s.Chart) -> eks.KubernetesManifest:
        """Apply a cdk8s chart to the cluster after :attr:`workload_dependencies`.

        Args:
            construct_id: Construct id of the manifest (stable; changing it replaces the objects).
            chart: A synthesizable cdk8s chart (its ``App`` may hold other charts).

        Returns:
            The manifest custom resource (add further dependencies on it as needed).
        """
        manifest = self.cluster.add_cdk8s_chart(construct_id, chart)
        manifest.node.add_dependency(*self.workload_dependencies)
        return manifest

    def _acknowledge_aws_prescribed(self) -> None:
        """Acknowledge cdk-nag findings on roles and Lambdas whose policies AWS or aws-cdk-lib prescribe."""
        acknowledge_managed_policies(
            self.cluster.role, "EKS requires AmazonEKSClusterPolicy on the cluster role (EKS cluster IAM role docs)"
        )
        acknowledge_managed_policies(
            self.system_nodegroup.role,
            "EKS managed node groups require AmazonEKSWorkerNodePolicy, AmazonEKS_CNI_Policy and "
            "AmazonEC2ContainerRegistryReadOnly on the node role (EKS node IAM role docs)",
        )
        provider = self.cluster.kubectl_provider
        if provider is not None:
            for role_path in ("Handler/ServiceRole", "Provider/framework-onEvent/ServiceRole"):
                role = provider.node.find_child(role_path.split("/")[0])
                for part in role_path.split("/")[1:]:
                    role = role.node.find_child(part)
                assert isinstance(role, iam.Role), f"{role.node.path} is not an iam.Role"
                acknowledge_managed_policies(
                    role, "aws-cdk-lib's kubectl provider Lambda: basic/VPC execution and ECR read policies set by CDK"
                )
                acknowledge_policy_wildcards(
                    role,
                    "aws-cdk-lib's kubectl provider: eks:DescribeCluster/ECR token calls and invoking its own handler versions",
                )
            acknowledge(
                provider,
                "AwsSolutions-L1",
                "The kubectl provider Lambda runtime is pinned by aws-cdk-lib (updated with aws-cdk-lib releases)",
            )

    def _secrets_key(self) -> kms.Key:
        """KMS key of the cluster's Secrets encryption.

        EKS encrypts Secrets with it from creation on. A cluster deployed without one gets it
        through EKS ``AssociateEncryptionConfig``: irreversible, the key cannot be changed later,
        and Secrets written before stay as they were until rewritten (docs/deploy.md, Security).
        """
        self.secrets_key = kms.Key(
            self,
            "SecretsKey",
            enable_key_rotation=True,
            description=f"{self.config.project_name}: envelope encryption of Kubernetes Secrets (EKS)",
            removal_policy=RemovalPolicy.RETAIN,
        )
        return self.secrets_key

    def _add_addons(self) -> dict[str, IConstruct]:
        addons: dict[str, IConstruct] = {
            name: eks.Addon(
                self,
                f"Addon-{name}",
                cluster=as_icluster(self.cluster),
                addon_name=name,
                configuration_values=ADDON_CONFIGURATION.get(name),
            )
            for name in NODE_ADDONS
        }
        # The cluster's own accessor, so later Pod Identity service accounts reuse this add-on; it
        # creates the add-on on first access (typed optional by aws-cdk-lib, never None here).
        pod_identity_agent = self.cluster.eks_pod_identity_agent
        assert pod_identity_agent is not None, "aws_eks_v2.Cluster creates the Pod Identity agent add-on on access"
        addons[POD_IDENTITY_ADDON] = pod_identity_agent
        return addons

    def _add_mountpoint(self, model_bucket: s3.IBucket) -> iam.Role:
        models_prefix = storage.MODELS_ROOT
        models_arn = model_bucket.arn_for_objects(f"{models_prefix}*")
        role = iam.Role(
            self,
            "MountpointRole",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description="Mountpoint for S3 CSI driver: read-only access to the model engines",
        )
        policy = iam.Policy(
            self,
            "MountpointPolicy",
            statements=[
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[model_bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{models_prefix}*"]}},
                ),
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[models_arn]),
            ],
        )
        policy.attach_to_role(role)
        acknowledge_resource(
            policy, models_arn, "engine files under models/ have version-stamped keys unknown at deploy time; read-only"
        )
        addon = eks.Addon(
            self, f"Addon-{MOUNTPOINT_ADDON}", cluster=as_icluster(self.cluster), addon_name=MOUNTPOINT_ADDON
        )
        # Its controller is a Deployment: it needs a node, and Pod Identity for its credentials.
        addon.node.add_dependency(self.addons[POD_IDENTITY_ADDON], self.system_nodegroup)
        namespace, service_account = MOUNTPOINT_SERVICE_ACCOUNT
        association = eks.CfnPodIdentityAssociation(
            self,
            "MountpointPodIdentity",
            cluster_name=self.cluster.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=role.role_arn,
        )
        association.node.add_dependency(addon)
        self.addons[MOUNTPOINT_ADDON] = addon
        self.mountpoint_policy = policy
        return role

    def _add_hyperpod_chart(self, chart_repository: ecr.IRepository, chart_oci_url: str) -> eks.HelmChart:
        chart_settings = self.config.cluster.hyperpod_chart
        kubectl_role = self.cluster.kubectl_provider.role if self.cluster.kubectl_provider else None
        if chart_settings.oci_repository is None and kubectl_role is not None:
            chart_repository.grant_pull(kubectl_role)
        chart = self.cluster.add_helm_chart(
            "HyperPodDependencies",
            chart=HYPERPOD_CHART_NAME,
            repository=chart_settings.oci_repository or chart_oci_url,
            version=chart_settings.version,
            release=HYPERPOD_CHART_RELEASE,
            namespace=namespaces.KUBE_SYSTEM,
            values={"global": {"region": self.region}},
        )
        chart.node.add_dependency(self.system_nodegroup)
        return chart
