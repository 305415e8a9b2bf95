"""Workloads on the cluster: the AWS Load Balancer Controller, KEDA, and the cdk8s charts.

A stack of its own (after the cluster and observability stacks) because the KEDA objects need the
AMP workspace id and the observability stack already depends on the cluster stack: putting them in
the cluster stack would make a cycle. The charts are applied with
``eks.KubernetesManifest(cluster=…, manifest=chart.to_json())``, what ``cluster.add_cdk8s_chart``
does in the cluster's own stack. Entry point: :class:`WorkloadsStack` (its docstring gives the
order of what it applies). Docs: docs/deploy.md, "Stacks"; docs/kubernetes.md.
"""

from __future__ import annotations

from typing import Any

import cdk8s
from aws_cdk import CfnOutput, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from k8s_charts import naming
from k8s_charts.charts import WhisperCharts, build_charts
from k8s_charts.inputs import ChartInputs
from settings import namespaces
from settings.endpoint_auth import SECRET_ARN_OUTPUT
from settings.schema import DeploymentConfig
from stacks.api_keys import GatewayApiKeys
from stacks.bulk_stack import KEDA_QUEUE_ACTIONS, BulkStack
from stacks.checkov_skips import skip_check
from stacks.cluster_stack import ClusterStack, as_icluster
from stacks.inference_operator import InferenceOperatorAddon
from stacks.nag import acknowledge_policy_wildcards
from stacks.observability_stack import AMP_QUERY_ACTIONS

ALB_CONTROLLER_VERSION = eks.AlbControllerVersion.V2_13_3
"""AWS Load Balancer Controller release (supports the NLB ``listener-attributes`` annotation used for
the TCP idle timeout, and ``least_outstanding_requests`` ALB target groups)."""

KEDA_CHART_REPOSITORY = "https://kedacore.github.io/charts"
KEDA_CHART_VERSION = "2.18.3"
"""KEDA >= 2.18: ``fallback`` works on ``metricType: Value`` triggers (keda-docs 2.18
``reference/scaledobject-spec.md``; 2.17 supported ``AverageValue`` only)."""
KEDA_NAMESPACE = namespaces.KEDA
KEDA_OPERATOR_SERVICE_ACCOUNT = "keda-operator"
"""Service account the KEDA chart creates for its operator (chart default ``serviceAccount.operator.name``)."""

OIDC_PROVIDER_HANDLER = "Custom::AWSCDKOpenIdConnectProviderCustomResourceProvider"
"""Stack-level singleton aws-cdk-lib creates for ``cluster.open_id_connect_provider``."""


class WorkloadsStack(Stack):
    """Controllers and the serving charts on the cluster of ``cluster_stack``.

    Args:
        config: The deployment config.
        cluster_stack: The cluster stack (EKS cluster, system node group, HyperPod, model bucket).
        serving_repository_name: ECR repository name of the serving image (tag ``config.serving.image_tag``),
            referenced by name in this stack's account and region (no cross-stack export).
        amp_workspace_id: AMP workspace id for KEDA, or ``None`` when observability is off (then no
            KEDA, no ScaledObjects, and each Deployment runs ``max(min_replicas, 1)`` pods).
        amp_workspace_arn: ARN of that workspace (the operator role's policy resource).

    Attributes:
        alb_controller: The AWS Load Balancer Controller.
        keda: The KEDA Helm release, or ``None``.
        api_keys: The gateway's API keys (secret, key, Pod Identity), or ``None`` with ``endpoint.auth: none``.
        manifests: Chart id → the ``KubernetesManifest`` that applies it.

    Order (each an explicit dependency, with the reason next to it): (1) the AWS Load Balancer
    Controller (``aws_eks_v2.AlbController``, pinned) and KEDA (Helm chart from
    ``https://kedacore.github.io/charts``, pinned), after the system node group they run on; the KEDA
    operator's service account gets an EKS Pod Identity role allowed to query the AMP workspace
    (``aps:QueryMetrics``, ``GetSeries``, ``GetLabels``, ``GetMetricMetadata``; keda-docs 2.18 AMP
    example). (2) ``whisper-node-autoscaling`` (when enabled) → ``whisper-serving`` (after the HyperPod
    cluster, the Mountpoint CSI driver and the Load Balancer Controller, whose webhook gives its pods
    their readiness gates) → ``whisper-endpoint`` (after the controller, whose webhook mutates
    Services) and ``whisper-autoscaling`` (after KEDA's CRDs and the operator's identity). With
    ``serving.target: inference_operator`` (:mod:`stacks.inference_operator`): no Load Balancer
    Controller and no KEDA here (the operator add-on brings its own); the EKS add-on
    ``amazon-sagemaker-hyperpod-inference`` with its execution role instead, after the system node
    group and the Mountpoint add-on, and ``whisper-serving`` (the ``InferenceEndpointConfig`` objects)
    after it. (3) ``whisper-gpu-metrics`` (with observability): its own namespace and the DCGM exporter
    DaemonSets, no explicit dependency (a DaemonSet waits for matching nodes by itself). With
    ``endpoint.auth: api_key`` the stack also owns the gateway's API keys
    (:class:`stacks.api_keys.GatewayApiKeys`); the serving chart is applied after the Pod Identity
    association, so pods start with credentials, and the secret's ARN is the output ``ApiKeysSecretArn``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        cluster_stack: ClusterStack,
        serving_repository_name: str,
        amp_workspace_id: str | None,
        amp_workspace_arn: str | None,
        tls_bucket_name: str | None = None,
        bulk: BulkStack | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if (amp_workspace_id is None) != (amp_workspace_arn is None):
            raise ValueError("pass both amp_workspace_id and amp_workspace_arn, or neither (no KEDA)")
        operator_target = config.serving.target == "inference_operator"
        if operator_target and tls_bucket_name is None:
            raise ValueError("serving.target inference_operator needs tls_bucket_name (the storage stack's TLS bucket)")
        self.alb_controller: eks.AlbController | None = None
        self.keda: eks.HelmChart | None = None
        self.inference_operator: InferenceOperatorAddon | None = None
        if operator_target:
            assert tls_bucket_name is not None
            self.inference_operator = self._add_inference_operator(cluster_stack, tls_bucket_name)
        else:
            self.alb_controller = self._add_alb_controller(cluster_stack)
            if amp_workspace_arn is not None or bulk is not None:
                self.keda = self._add_keda(cluster_stack, amp_workspace_arn, bulk)
        self._skip_oidc_handler_check(cluster_stack)
        self.api_keys: GatewayApiKeys | None = None
        if config.endpoint.auth == "api_key" and not operator_target:
            self.api_keys = self._add_api_keys(config, cluster_stack)
        inputs = self._chart_inputs(cluster_stack, serving_repository_name, amp_workspace_id, tls_bucket_name, bulk)
        charts = build_charts(cdk8s.App(), config, inputs)
        self.manifests: dict[str, eks.KubernetesManifest] = {}
        for chart in charts.all():
            self.manifests[chart.node.id] = eks.KubernetesManifest(
                self, chart.node.id, cluster=as_icluster(cluster_stack.cluster), manifest=chart.to_json()
            )
        self._order_manifests(cluster_stack, charts)

    def _add_inference_operator(self, cluster_stack: ClusterStack, tls_bucket_name: str) -> InferenceOperatorAddon:
        operator = InferenceOperatorAddon(
            self,
            "InferenceOperator",
            cluster=cluster_stack.cluster,
            model_bucket=cluster_stack.model_bucket,
            tls_bucket=s3.Bucket.from_bucket_name(self, "TlsBucket", tls_bucket_name),
        )
        # the operator's controller runs on the system nodes and mounts engines with the Mountpoint driver
        operator.addon.node.add_dependency(cluster_stack.system_nodegroup, *cluster_stack.addons.values())
        return operator

    def _skip_oidc_handler_check(self, cluster_stack: ClusterStack) -> None:
        # IRSA (the controller's or the inference operator's role) makes aws-cdk-lib add the cluster's
        # OIDC provider handler to the cluster stack
        oidc_handler = cluster_stack.node.try_find_child(OIDC_PROVIDER_HANDLER)
        if oidc_handler is not None:
            skip_check(
                oidc_handler.node.find_child("Role"),
                "CKV_AWS_109",
                "aws-cdk-lib's OIDC provider handler creates/updates/deletes the cluster's IAM OIDC provider, "
                "whose ARN exists only after creation (iam:*OpenIDConnectProvider on *)",
            )

    def _add_api_keys(self, config: DeploymentConfig, cluster_stack: ClusterStack) -> GatewayApiKeys:
        api_keys = GatewayApiKeys(
            self,
            "GatewayApiKeys",
            cluster=as_icluster(cluster_stack.cluster),
            namespace=config.serving.namespace,
            service_account=naming.SERVING_SERVICE_ACCOUNT,
            project_name=config.project_name,
        )
        api_keys.association.node.add_dependency(cluster_stack.addons["eks-pod-identity-agent"])
        CfnOutput(
            self,
            SECRET_ARN_OUTPUT,
            value=api_keys.secret.secret_arn,
            description="Secrets Manager secret of the gateway API keys (make api-key prints how to read/rotate)",
        )
        return api_keys

    def _chart_inputs(
        self,
        cluster_stack: ClusterStack,
        serving_repository_name: str,
        amp_workspace_id: str | None,
        tls_bucket_name: str | None,
        bulk: BulkStack | None,
    ) -> ChartInputs:
        private_subnets = cluster_stack.cluster.vpc.select_subnets(
            subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS
        ).subnets
        return ChartInputs(
            bucket_name=cluster_stack.model_bucket.bucket_name,
            image_repository=ecr.Repository.from_repository_name(
                self, "ServingRepository", serving_repository_name
            ).repository_uri,
            amp_workspace_id=amp_workspace_id,
            **({"tls_bucket_name": tls_bucket_name} if tls_bucket_name else {}),
            api_keys_secret_arn=self.api_keys.secret.secret_arn if self.api_keys else None,
            # the AMP scraper's network interfaces sit in the cluster's private subnets
            scraper_cidrs=tuple(subnet.ipv4_cidr_block for subnet in private_subnets),
            **({"bulk_queue_url": bulk.queue.queue_url, "bulk_bucket_name": bulk.bucket.bucket_name} if bulk else {}),
        )

    def _order_manifests(self, cluster_stack: ClusterStack, charts: WhisperCharts) -> None:
        serving = self.manifests[charts.serving.node.id]
        # model volumes need the Mountpoint CSI driver; pods need the HyperPod GPU nodes
        serving.node.add_dependency(*cluster_stack.workload_dependencies)
        if self.api_keys is not None:
            # pods read the API keys at start: their Pod Identity association must exist first
            serving.node.add_dependency(self.api_keys.association)
        if self.alb_controller is not None:
            # the controller's webhook injects the pods' readiness gates: a pod created before it runs gets
            # none and counts Ready before its target is healthy (aws-load-balancer-controller#4034)
            serving.node.add_dependency(self.alb_controller)
        if charts.node_autoscaling is not None:
            # the NodePools must exist before pods wait for nodes they provision
            serving.node.add_dependency(self.manifests[charts.node_autoscaling.node.id])
        if self.inference_operator is not None:
            # InferenceEndpointConfig objects need the operator's CRD and webhooks
            serving.node.add_dependency(self.inference_operator.addon)
        if charts.endpoint is not None and self.alb_controller is not None:
            # the controller's webhook mutates Services; a Service created before it gets no load balancer
            self.manifests[charts.endpoint.node.id].node.add_dependency(serving, self.alb_controller)
        if charts.autoscaling is not None and self.keda is not None:
            # ScaledObject/TriggerAuthentication need KEDA's CRDs; scaling targets need the Deployments
            self.manifests[charts.autoscaling.node.id].node.add_dependency(serving, self.keda)
        if charts.bulk is not None and self.keda is not None:
            # ScaledObjects need KEDA's CRDs; worker pods need the namespace, model volumes and GPU nodes
            self.manifests[charts.bulk.node.id].node.add_dependency(serving, self.keda)

    def _add_alb_controller(self, cluster_stack: ClusterStack) -> eks.AlbController:
        controller = eks.AlbController(
            self, "AlbController", cluster=cluster_stack.cluster, version=ALB_CONTROLLER_VERSION
        )
        # the controller's pods need a node to run on before its webhook answers
        controller.node.add_dependency(cluster_stack.system_nodegroup)
        service_account = controller.node.find_child("alb-sa")
        assert isinstance(service_account, eks.ServiceAccount), f"{service_account.node.path} is not a ServiceAccount"
        controller_reason = (
            "AWS Load Balancer Controller IAM policy as shipped by aws-cdk-lib for this controller version "
            "(the controller creates load balancers, target groups and security groups with generated names)"
        )
        acknowledge_policy_wildcards(service_account.role, controller_reason)
        skip_check(service_account.role.node.find_child("DefaultPolicy"), "CKV_AWS_111", controller_reason)
        return controller

    def _add_keda(
        self, cluster_stack: ClusterStack, amp_workspace_arn: str | None, bulk: BulkStack | None
    ) -> eks.HelmChart:
        cluster = cluster_stack.cluster
        role = iam.Role(
            self,
            "KedaOperatorRole",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description="KEDA operator: query the whisper AMP workspace (SigV4 prometheus trigger) and the "
            "bulk queue's length (aws-sqs-queue trigger)",
        )
        if amp_workspace_arn is not None:
            role.add_to_policy(iam.PolicyStatement(actions=list(AMP_QUERY_ACTIONS), resources=[amp_workspace_arn]))
        if bulk is not None:
            # the aws-sqs-queue scaler authenticates as the operator (TriggerAuthentication identityOwner keda)
            role.add_to_policy(iam.PolicyStatement(actions=list(KEDA_QUEUE_ACTIONS), resources=[bulk.queue.queue_arn]))
        association = eks.CfnPodIdentityAssociation(
            self,
            "KedaOperatorPodIdentity",
            cluster_name=cluster.cluster_name,
            namespace=KEDA_NAMESPACE,
            service_account=KEDA_OPERATOR_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        association.node.add_dependency(cluster_stack.addons["eks-pod-identity-agent"])
        keda = eks.HelmChart(
            self,
            "Keda",
            cluster=as_icluster(cluster),
            chart="keda",
            repository=KEDA_CHART_REPOSITORY,
            version=KEDA_CHART_VERSION,
            release="keda",
            namespace=KEDA_NAMESPACE,
            create_namespace=True,
            wait=True,
        )
        # the operator must start with its Pod Identity credentials; its pods need the system nodes
        keda.node.add_dependency(association, cluster_stack.system_nodegroup)
        return keda
