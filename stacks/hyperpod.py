"""The SageMaker HyperPod cluster (``AWS::SageMaker::Cluster``, EKS orchestrator).

One instance group per configured GPU group, its lifecycle script and IAM.

Property names and rules: CloudFormation ``AWS::SageMaker::Cluster`` and the SageMaker API reference
(``ClusterInstanceGroupSpecification``, ``ClusterKubernetesConfig``,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_ClusterLifeCycleConfig.html), AWS's sample
template (aws-samples/awsome-distributed-training
``1.architectures/7.sagemaker-hyperpod-eks/cfn-templates/nested-stacks/hyperpod-cluster-stack.yaml``) and
the HyperPod node labels page
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-hyperpod-eks-resiliency-node-labels.html).
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aws_cdk import CfnTag, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_sagemaker as sagemaker
from constructs import Construct

from settings import labels, names
from settings.fleet import needs_continuous, spot_group_name, spot_groups, spot_instance_types
from settings.schema import DeploymentConfig, GpuGroup
from stacks.hyperpod_iam import create_execution_role, create_karpenter_cluster_role, lifecycle_source_uri
from stacks.nag import acknowledge, acknowledge_managed_policies, acknowledge_policy_wildcards

LIFECYCLE_DIR = Path(__file__).resolve().parent / "lifecycle"
"""Directory shipped to ``s3://<model bucket>/lifecycle/``; HyperPod copies the whole prefix to each node."""
LIFECYCLE_KEY = "lifecycle"
"""Key of the instance groups' ``SourceS3Uri`` (``s3://<bucket>/lifecycle``); the scripts are under ``lifecycle/``."""
ON_CREATE_SCRIPT = "on_create.sh"
BUCKET_DEPLOYMENT_HANDLER_PREFIX = "Custom::CDKBucketDeployment"
"""Id prefix of the singleton upload Lambda aws-cdk-lib adds to the stack for every BucketDeployment."""
SAGEMAKER_TAG = CfnTag(key="SageMaker", value="true")
"""Tag that AWS's HyperPod samples put on the cluster (the managed training-operator policy keys on it)."""


def instance_group_labels(group: GpuGroup) -> dict[str, str]:
    """Kubernetes node labels of one GPU group (``docs/contracts.md`` §2).

    E.g. ``{"whisper-hyperpod.io/gpu-group": "g5", "whisper-hyperpod.io/gpu-arch": "sm86"}``.

    A group with ``mig_profile`` also gets ``nvidia.com/mig.config: all-<profile>``: the way HyperPod
    partitions an instance group's GPUs ("Using GPU partitions in Amazon SageMaker HyperPod": MIG
    labels on the instance group), applied by the NVIDIA GPU Operator's MIG manager, which partitions
    every GPU of a node labelled so into that profile; with the ``mixed`` MIG strategy the device
    plugin then advertises ``nvidia.com/mig-<profile>`` (NVIDIA GPU Operator docs, "GPU Operator with MIG").
    """
    node_labels = {labels.GPU_GROUP_LABEL: group.name, labels.GPU_ARCH_LABEL: group.arch}
    if group.mig is not None:
        node_labels[labels.MIG_CONFIG_LABEL] = group.mig.mig_config
    return node_labels


class HyperPodCluster(Construct):
    """HyperPod cluster attached to an existing EKS cluster.

    Attributes:
        cluster: The ``CfnCluster``; ``cluster.attr_cluster_arn`` is its ARN. Add ordering
            dependencies (e.g. on the HyperPod dependency Helm chart) with ``cluster.node.add_dependency``.
        execution_role: Role of every instance group.
        karpenter_role: ``ClusterRole`` for HyperPod-managed Karpenter, or ``None`` when
            ``cluster.node_autoscaling`` is off.
        lifecycle_deployment: The upload of ``stacks/lifecycle/`` (the cluster depends on it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        eks_cluster_arn: str,
        subnets: Sequence[ec2.ISubnet],
        security_group: ec2.ISecurityGroup,
        lifecycle_bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        autoscaling = config.cluster.node_autoscaling
        self.lifecycle_deployment = s3deploy.BucketDeployment(
            self,
            "LifecycleScripts",
            sources=[s3deploy.Source.asset(str(LIFECYCLE_DIR))],
            destination_bucket=lifecycle_bucket,
            destination_key_prefix=f"{LIFECYCLE_KEY}/",
        )
        self._acknowledge_upload_handler()
        self.execution_role, execution_policy = create_execution_role(
            self,
            "ExecutionRole",
            cluster_arn=eks_cluster_arn,
            subnets=subnets,
            security_group=security_group,
            lifecycle_bucket=lifecycle_bucket,
            lifecycle_key=LIFECYCLE_KEY,
        )
        self.karpenter_role: iam.Role | None = (
            create_karpenter_cluster_role(self, "KarpenterRole") if autoscaling else None
        )
        lifecycle = sagemaker.CfnCluster.ClusterLifeCycleConfigProperty(
            source_s3_uri=lifecycle_source_uri(lifecycle_bucket.bucket_name, LIFECYCLE_KEY),
            on_create=ON_CREATE_SCRIPT,
        )
        # HyperpodNodeClass requires all subnets of an instance group in one AZ (HyperPod autoscaling docs).
        group_vpc = (
            sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id], subnets=[subnets[0].subnet_id]
            )
            if autoscaling
            else None
        )
        self.cluster = sagemaker.CfnCluster(
            self,
            "Resource",
            cluster_name=names.hyperpod_cluster_name(config),
            orchestrator=sagemaker.CfnCluster.OrchestratorProperty(
                eks=sagemaker.CfnCluster.ClusterOrchestratorEksConfigProperty(cluster_arn=eks_cluster_arn)
            ),
            vpc_config=sagemaker.CfnCluster.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id],
                subnets=[subnet.subnet_id for subnet in subnets],
            ),
            node_recovery="Automatic",
            node_provisioning_mode="Continuous" if needs_continuous(config) else None,
            auto_scaling=(
                sagemaker.CfnCluster.ClusterAutoScalingConfigProperty(mode="Enable", auto_scaler_type="Karpenter")
                if autoscaling
                else None
            ),
            cluster_role=self.karpenter_role.role_arn if self.karpenter_role else None,
            instance_groups=[
                self._instance_group(group, lifecycle, autoscaling=autoscaling, vpc=group_vpc)
                for group in config.gpu_groups
            ]
            + [
                self._instance_group(group, lifecycle, autoscaling=True, vpc=group_vpc, spot=True)
                for group in spot_groups(config)
            ],
            tags=[SAGEMAKER_TAG],
        )
        self.cluster.node.add_dependency(self.lifecycle_deployment)
        self.cluster.node.add_dependency(execution_policy)

    def _acknowledge_upload_handler(self) -> None:
        """cdk-nag findings on the upload Lambda that aws-cdk-lib's ``BucketDeployment`` creates."""
        role = self.lifecycle_deployment.handler_role
        acknowledge_managed_policies(
            role, "aws-cdk-lib's BucketDeployment Lambda logs through AWSLambdaBasicExecutionRole"
        )
        acknowledge_policy_wildcards(
            role,
            "aws-cdk-lib's BucketDeployment copies the asset from the CDK assets bucket into the lifecycle bucket, "
            "which holds nothing but lifecycle scripts",
        )
        stack = Stack.of(self)
        for child in stack.node.children:
            if child.node.id.startswith(BUCKET_DEPLOYMENT_HANDLER_PREFIX):
                acknowledge(child, "AwsSolutions-L1", "The BucketDeployment Lambda runtime is pinned by aws-cdk-lib")

    def _instance_group(
        self,
        group: GpuGroup,
        lifecycle: sagemaker.CfnCluster.ClusterLifeCycleConfigProperty,
        *,
        autoscaling: bool,
        vpc: sagemaker.CfnCluster.VpcConfigProperty | None,
        spot: bool = False,
    ) -> sagemaker.CfnCluster.ClusterInstanceGroupProperty:
        # Karpenter-managed groups must start at 0 nodes ("If you start with more than 0 nodes,
        # Karpenter will scale them down to 0", HyperPod autoscaling docs) and take no deep health checks.
        # A list of one stays InstanceType (today's template); a longer one is a flexible group. A Spot group
        # takes the first type only: Spot and flexible together is undocumented (docs/deploy.md).
        flexible = group.flexible and not spot
        taints = [
            sagemaker.CfnCluster.ClusterKubernetesTaintProperty(
                key=labels.GPU_TAINT_KEY, value=labels.GPU_TAINT_VALUE, effect=labels.GPU_TAINT_EFFECT
            )
        ]
        if spot:
            taints.append(
                sagemaker.CfnCluster.ClusterKubernetesTaintProperty(
                    key=labels.SPOT_TAINT_KEY, value=labels.SPOT_TAINT_VALUE, effect=labels.SPOT_TAINT_EFFECT
                )
            )
        return sagemaker.CfnCluster.ClusterInstanceGroupProperty(
            instance_group_name=spot_group_name(group) if spot else group.name,
            instance_type=None if flexible else (spot_instance_types(group)[0] if spot else group.instance_type),
            instance_requirements=(
                sagemaker.CfnCluster.InstanceRequirementsProperty(instance_types=list(group.instance_types))
                if flexible
                else None
            ),
            capacity_requirements=(sagemaker.CfnCluster.ClusterCapacityRequirementsProperty(spot={}) if spot else None),
            min_instance_count=None if spot else group.min_instance_count,
            instance_count=0 if autoscaling else group.instance_count,
            threads_per_core=group.threads_per_core,
            execution_role=self.execution_role.role_arn,
            life_cycle_config=lifecycle,
            instance_storage_configs=[
                sagemaker.CfnCluster.ClusterInstanceStorageConfigProperty(
                    ebs_volume_config=sagemaker.CfnCluster.ClusterEbsVolumeConfigProperty(
                        volume_size_in_gb=group.ebs_volume_gb
                    )
                )
            ],
            kubernetes_config=sagemaker.CfnCluster.ClusterKubernetesConfigProperty(
                labels={**instance_group_labels(group), **({labels.CAPACITY_LABEL: "spot"} if spot else {})},
                taints=taints,
            ),
            override_vpc_config=vpc,
        )
