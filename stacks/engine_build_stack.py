"""CodeBuild projects that build the serving image, the per-architecture engines, and roll the pods.

Entry point: :class:`EngineBuildStack` (the details, in its docstring).
Docs: docs/engines.md, "The pieces".
"""

from __future__ import annotations

import math
from typing import Any

from aws_cdk import Arn, ArnComponents, ArnFormat, CfnOutput, Duration, IgnoreMode, Size, Stack
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from settings import gpu_catalog, labels, storage
from settings.names import engine_project_name, image_project_name, rollout_project_name  # noqa: F401 (re-exported)
from settings.schema import DeploymentConfig, GpuGroup
from stacks import buildspecs, engine_job
from stacks.checkov_skips import skip_check
from stacks.nag import (
    acknowledge,
    acknowledge_document_wildcards,
    acknowledge_policy_wildcards,
    acknowledge_resource,
)
from whisper_build.paths import REPO_ROOT
from whisper_build.release import invocations

DOCKERFILE = "whisper_build/image/Dockerfile"
IMAGE_CONTEXT = ["requirements", "settings", "whisper_build"]
"""What ``whisper_build/image/Dockerfile`` copies from the repository root (its ``COPY`` lines);
only these are uploaded as the image project's build context. Add a path here when the
Dockerfile copies a new one."""

EDIT_POLICY = "AmazonEKSEditPolicy"
"""EKS access policy with Kubernetes ``edit`` rights; scoped to one namespace it can create Jobs
and ServiceAccounts and restart Deployments there, nothing cluster-wide (EKS User Guide,
"Access policy permissions")."""

FLEET_DISK_GIB = 200
BUILD_MARGIN_SECONDS = 1800
"""Install, kubeconfig, Job start and log/resume steps around the waits of an engine build."""
ROLLOUT_TIMEOUT_SECONDS = 1800


def build_timeout(config: DeploymentConfig) -> Duration:
    """Timeout of an engine project: the serving drain, the Job's deadline and a margin, in whole minutes.

    The margin is :data:`BUILD_MARGIN_SECONDS`, so the buildspec's own waits end (and post_build resumes
    serving) before CodeBuild stops the build. Whole minutes: CodeBuild's ``TimeoutInMinutes``.
    """
    seconds = engine_job.drain_timeout_seconds(config) + engine_job.JOB_DEADLINE_SECONDS + BUILD_MARGIN_SECONDS
    return Duration.minutes(math.ceil(seconds / 60))


def fleet_instance_type(group: GpuGroup) -> str:
    """EC2 instance type of a HyperPod instance type: ``ml.g5.2xlarge`` → ``g5.2xlarge``."""
    return gpu_catalog.ec2_instance_type(group.instance_type)


class EngineBuildStack(Stack):
    """Image, engine and rollout CodeBuild projects of one deployment.

    Attributes:
        engine_projects: one project per GPU architecture, keyed by arch (``sm86``).
        fleets: reserved GPU fleets of the architectures with ``engine_builder: codebuild_fleet``.
        builder_roles: Pod Identity roles of the Job pods, keyed by arch (hyperpod_job archs only).
        image_project: builds and pushes the serving image.
        rollout_project: restarts the serving Deployments.

    * one **engine project per engine target** (``config.engine_targets``: a GPU architecture, or
      architecture + MIG profile for a group served on MIG slices, e.g. ``sm90-1g.10gb``). Default runner
      (``engine_builder: hyperpod_job``): the project pauses the serving Deployment of that
      architecture's build group (its GPUs are needed), applies a Kubernetes Job pinned to that group,
      waits for it and resumes serving (:func:`stacks.buildspecs.hyperpod_job_buildspec`). Each
      architecture's Job runs in a namespace of its own (:func:`stacks.engine_job.build_namespace`);
      the project's role reaches the cluster through an EKS access entry with ``AmazonEKSEditPolicy``
      on that namespace only, plus a Kubernetes group bound to a Role in the serving namespace that may
      only pause and scale the build group's Deployment (:func:`stacks.engine_job.serving_access_manifests`).
      The Job's pods write only their architecture's S3 prefix (EKS Pod Identity role), and no other
      project can start pods under that service account.
      With ``engine_builder: codebuild_fleet`` the project instead runs the build itself on a reserved
      CodeBuild GPU fleet of the group's EC2 instance type, inside the serving image;
    * a **serving image project** (Docker build of ``whisper_build/image/Dockerfile`` → ECR);
    * a **rollout project** (``kubectl rollout restart`` of the serving Deployments).

    Builds are per architecture, settings per group: the first configured group of an architecture
    (:func:`stacks.engine_job.build_group`) hosts its Job and decides its ``engine_builder``.
    Project names are fixed (:func:`engine_project_name` etc.) so the pipeline can start them.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        cluster_name: str,
        kubectl_provider: eks.IKubectlProvider | None,
        model_bucket_name: str,
        serving_repository_name: str,
        vpc: ec2.IVpc,
        cluster_security_group: ec2.ISecurityGroup,
        **kwargs: Any,
    ) -> None:
        """Define the projects of ``config``'s GPU architectures on the cluster the HyperPod nodes joined.

        Deploy after the workloads stack (access entries need the cluster, the Roles the serving
        namespace).

        Args:
            scope: the CDK app or stage.
            construct_id: the stack's id.
            config: the deployment config.
            cluster_name: name of the EKS cluster the HyperPod nodes joined.
            kubectl_provider: the cluster's kubectl provider (``cluster.kubectl_provider``), which
                applies each architecture's build namespace and serving-namespace Role; ``None`` only
                when every architecture builds on a CodeBuild fleet.
            model_bucket_name: the model bucket's deterministic name (not a token), imported here so
                that ARNs in this stack's policies are plain strings, not cross-stack imports.
            serving_repository_name: the serving image repository's deterministic name, for the same
                reason.
            vpc: private subnets of it host the projects that call the Kubernetes API.
            cluster_security_group: a security group allowed to reach the cluster endpoint (the
                shared node security group).
            **kwargs: passed to :class:`aws_cdk.Stack` (``env``, ``description``, ...).

        Raises:
            ValueError: an architecture builds as a HyperPod Job but ``kubectl_provider`` is ``None``.
        """
        super().__init__(scope, construct_id, **kwargs)
        self._config = config
        if kubectl_provider is None and any(
            engine_job.build_group(config, arch).engine_builder == "hyperpod_job" for arch in config.engine_targets
        ):
            raise ValueError("kubectl_provider is required when an architecture builds as a HyperPod Job")
        self._cluster = eks.Cluster.from_cluster_attributes(
            self, "Cluster", cluster_name=cluster_name, kubectl_provider=kubectl_provider
        )
        self._bucket = s3.Bucket.from_bucket_name(self, "ModelBucket", model_bucket_name)
        self._repository = ecr.Repository.from_repository_name(self, "ServingRepository", serving_repository_name)
        self._vpc = vpc
        self._security_group = cluster_security_group
        self._image_uri = self._repository.repository_uri_for_tag(config.serving.image_tag)
        self.key = kms.Key(
            self, "BuildKey", enable_key_rotation=True, description="Encrypts CodeBuild artifacts and logs"
        )
        self.engine_projects: dict[str, codebuild.Project] = {}
        self.fleets: dict[str, codebuild.Fleet] = {}
        self.builder_roles: dict[str, iam.Role] = {}
        for arch in config.engine_targets:
            group = engine_job.build_group(config, arch)
            if group.engine_builder == "codebuild_fleet":
                project = self._fleet_project(arch, group)
            else:
                project = self._job_project(arch)
            self.engine_projects[arch] = project
            CfnOutput(self, f"EngineProject{arch}", value=project.project_name, description=f"Engine build ({arch})")
        self.image_project = self._image_project()
        self.rollout_project = self._rollout_project()

    # ------------------------------------------------------------------------------ helpers

    def _cluster_project(
        self,
        construct_id: str,
        *,
        name: str,
        description: str,
        spec: dict[str, Any],
        namespace: str,
        env: dict[str, codebuild.BuildEnvironmentVariable],
        timeout: Duration,
        kubernetes_groups: list[str] | None = None,
    ) -> codebuild.Project:
        """A project that talks to the Kubernetes API from the private subnets, limited to ``namespace``.

        Its access entry grants ``edit`` in ``namespace`` only (``NAMESPACE`` in its environment),
        optionally Kubernetes RBAC groups, and ``eks:DescribeCluster`` (for ``aws eks update-kubeconfig``).
        """
        project = codebuild.Project(
            self,
            construct_id,
            project_name=name,
            description=description,
            build_spec=codebuild.BuildSpec.from_object(spec),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0, compute_type=codebuild.ComputeType.SMALL
            ),
            environment_variables={
                **_env(
                    CLUSTER_NAME=self._cluster.cluster_name,
                    K8S_VERSION=self._config.cluster.kubernetes_version,
                    NAMESPACE=namespace,
                ),
                **env,
            },
            vpc=self._vpc,
            subnet_selection=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self._security_group],
            encryption_key=self.key,
            timeout=timeout,
        )
        project.add_to_role_policy(
            iam.PolicyStatement(actions=["eks:DescribeCluster"], resources=[self._cluster.cluster_arn])
        )
        entry = eks.AccessEntry(
            self,
            f"{construct_id}Access",
            cluster=self._cluster,
            principal=project.role.role_arn,  # type: ignore[union-attr]
            access_policies=[
                eks.AccessPolicy.from_access_policy_name(
                    EDIT_POLICY, access_scope_type=eks.AccessScopeType.NAMESPACE, namespaces=[namespace]
                )
            ],
        )
        if kubernetes_groups:
            # aws_eks_v2.AccessEntry has no groups property; AWS::EKS::AccessEntry has KubernetesGroups
            cfn_entry = entry.node.default_child
            assert isinstance(cfn_entry, eks.CfnAccessEntry), f"{entry.node.path} has no CfnAccessEntry"
            cfn_entry.kubernetes_groups = kubernetes_groups
        self._acknowledge_codebuild_defaults(project, in_vpc=True)
        return project

    def _grant_arch_prefix_write(self, role: iam.IRole, arch: str) -> iam.Policy:
        """Grant read/write under ``models/<model>/<arch>/`` only: upload, verify, switch the pointer.

        Actions of :mod:`whisper_build.release.publish`: PutObject, HeadObject/GetObject, ListObjectsV2.
        """
        prefix = storage.model_prefix(self._config.model.name, arch)
        objects = self._bucket.arn_for_objects(f"{prefix}*")
        policy = iam.Policy(
            self,
            f"ModelPrefixWrite{arch}",
            statements=[
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[self._bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}*"]}},
                ),
                iam.PolicyStatement(
                    actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"], resources=[objects]
                ),
            ],
        )
        policy.attach_to_role(role)
        acknowledge_resource(
            policy,
            objects,
            f"Limited to {prefix} of the model bucket, this architecture's engines: every build writes a new "
            "version folder whose object keys are not known before the build",
        )
        return policy

    def _grant_arch_prefix_read(self, role: iam.IRole, arch: str) -> None:
        """Grant GetObject under ``models/<model>/<arch>/`` only.

        The pointer and manifest the engine project reads to skip a build whose engine is already published
        (:func:`stacks.buildspecs.hyperpod_job_buildspec`).
        """
        prefix = storage.model_prefix(self._config.model.name, arch)
        objects = self._bucket.arn_for_objects(f"{prefix}*")
        policy = iam.Policy(
            self,
            f"ModelPrefixRead{arch}",
            statements=[iam.PolicyStatement(actions=["s3:GetObject"], resources=[objects])],
        )
        policy.attach_to_role(role)
        acknowledge_resource(
            policy,
            objects,
            f"Read-only, limited to {prefix} of the model bucket: current.json and the manifest of the "
            "version it names, whose name is not known before the build",
        )

    # ------------------------------------------------------------------------------ engine projects

    def _job_project(self, arch: str) -> codebuild.Project:
        role = iam.Role(
            self,
            f"EngineBuilderRole{arch}",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description=f"Engine build pods ({arch}): write models/<model>/{arch}/ only",
        )
        self._grant_arch_prefix_write(role, arch)
        namespace = engine_job.build_namespace(self._config, arch)
        eks.KubernetesManifest(
            self,
            f"EngineBuildAccess{arch}",
            cluster=self._cluster,
            manifest=[
                engine_job.build_namespace_manifest(self._config, arch),
                *engine_job.serving_access_manifests(self._config, arch),
            ],
        )
        eks.CfnPodIdentityAssociation(
            self,
            f"EngineBuilderIdentity{arch}",
            cluster_name=self._cluster.cluster_name,
            namespace=namespace,
            service_account=engine_job.service_account_name(arch),
            role_arn=role.role_arn,
        )
        self.builder_roles[arch] = role
        manifests = engine_job.engine_build_manifests(
            self._config, arch, image_uri=self._image_uri, bucket_name=self._bucket.bucket_name, region=self.region
        )
        project = self._cluster_project(
            f"EngineBuild{arch}",
            name=engine_project_name(self._config, arch),
            description=f"Builds the {arch} TensorRT-LLM engine as a Job on a {arch} HyperPod group and awaits it",
            spec=buildspecs.hyperpod_job_buildspec(),
            namespace=namespace,
            kubernetes_groups=[engine_job.kubernetes_group(arch)],
            env=_env(
                GPU_ARCH=storage.kubernetes_name(arch),
                # skip the build (and the pause) when the published engine has this key (buildspecs)
                BUILD_KEY=invocations.engine_build_key(self._config, arch),
                MODEL_BUCKET=self._bucket.bucket_name,
                MODEL_PREFIX=storage.model_prefix(self._config.model.name, arch),
                FORCE_ENGINE_BUILD="false",
                JOB_TIMEOUT_SECONDS=str(engine_job.JOB_DEADLINE_SECONDS),
                JOB_MANIFEST=self.to_json_string({"apiVersion": "v1", "kind": "List", "items": manifests}),
                SERVING_NAMESPACE=self._config.serving.namespace,
                SERVING_SELECTOR=engine_job.serving_selector(self._config, arch),
                SERVING_REPLICAS=str(engine_job.build_group(self._config, arch).baseline_replicas),
                # KEDA (and its ScaledObjects) is installed with observability (stacks.whisper_app)
                KEDA_ENABLED="true" if self._config.observability.enabled else "false",
                DRAIN_TIMEOUT_SECONDS=str(engine_job.drain_timeout_seconds(self._config)),
            ),
            timeout=build_timeout(self._config),
        )
        self._grant_arch_prefix_read(project.role, arch)  # type: ignore[arg-type]
        return project

    def _fleet_project(self, arch: str, group: GpuGroup) -> codebuild.Project:
        fleet = codebuild.Fleet(
            self,
            f"GpuFleet{arch}",
            base_capacity=1,
            compute_type=codebuild.FleetComputeType.CUSTOM_INSTANCE_TYPE,
            environment_type=codebuild.EnvironmentType.LINUX_GPU_CONTAINER,
            compute_configuration=codebuild.ComputeConfiguration(
                instance_type=ec2.InstanceType(fleet_instance_type(group)), disk=Size.gibibytes(FLEET_DISK_GIB)
            ),
            overflow_behavior=codebuild.FleetOverflowBehavior.QUEUE,
        )
        self.fleets[arch] = fleet
        project = codebuild.Project(
            self,
            f"EngineBuild{arch}",
            project_name=engine_project_name(self._config, arch),
            description=f"Builds the {arch} TensorRT-LLM engine on a reserved {fleet_instance_type(group)} fleet",
            build_spec=codebuild.BuildSpec.from_object(
                buildspecs.fleet_buildspec(
                    invocations.engine_build_command(self._config, arch, self._bucket.bucket_name),
                    invocations.engine_current_command(self._config, arch, self._bucket.bucket_name),
                )
            ),
            environment_variables=_env(FORCE_ENGINE_BUILD="false"),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxGpuBuildImage.from_ecr_repository(
                    self._repository, self._config.serving.image_tag
                ),
                fleet=fleet,
            ),
            encryption_key=self.key,
            timeout=build_timeout(self._config),
        )
        self._grant_arch_prefix_write(project.role, arch)  # type: ignore[arg-type]
        acknowledge(
            project,
            "AwsSolutions-CB5",
            "The build must run inside the project's own serving image: it carries the TensorRT-LLM "
            "version the engine is tied to",
        )
        self._acknowledge_codebuild_defaults(
            project,
            in_vpc=False,
            extra="; ecr:GetAuthorizationToken for pulling the serving image, which has no resource-level permissions",
        )
        return project

    # ------------------------------------------------------------------------------ image + rollout

    def _image_project(self) -> codebuild.Project:
        source = s3_assets.Asset(
            self,
            "ImageSource",
            path=str(REPO_ROOT),
            ignore_mode=IgnoreMode.DOCKER,
            exclude=["*", *(f"!{path}" for path in IMAGE_CONTEXT), "**/__pycache__", "**/*.pyc"],
        )
        project = codebuild.Project(
            self,
            "ServingImage",
            project_name=image_project_name(self._config),
            description="Builds the serving image (Triton + TensorRT-LLM + gateway) and pushes it to ECR",
            source=codebuild.Source.s3(bucket=source.bucket, path=source.s3_object_key),
            build_spec=codebuild.BuildSpec.from_object(buildspecs.image_buildspec()),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                compute_type=codebuild.ComputeType.LARGE,
                privileged=True,
            ),
            environment_variables=_env(
                REPOSITORY_URI=self._repository.repository_uri,
                REPOSITORY_NAME=self._repository.repository_name,
                IMAGE_TAG=self._config.serving.image_tag,
                DOCKERFILE=DOCKERFILE,
            ),
            encryption_key=self.key,
            timeout=Duration.hours(2),
        )
        self._repository.grant_pull_push(project)
        project.add_to_role_policy(
            iam.PolicyStatement(actions=["ecr:DescribeImages"], resources=[self._repository.repository_arn])
        )
        acknowledge(
            project,
            "AwsSolutions-CB3",
            "Privileged mode is required to run the Docker daemon that builds the serving image",
        )
        self._acknowledge_codebuild_defaults(
            project,
            in_vpc=False,
            extra="; read of the CDK asset bucket for this project's source archive (grant written by "
            "aws-cdk-lib Source.s3); ecr:GetAuthorizationToken, which has no resource-level permissions",
        )
        CfnOutput(self, "ImageProject", value=project.project_name, description="Serving image build")
        return project

    def _rollout_project(self) -> codebuild.Project:
        project = self._cluster_project(
            "Rollout",
            name=rollout_project_name(self._config),
            description="Restarts the serving Deployments so they load the newly published engines",
            spec=buildspecs.rollout_buildspec(),
            namespace=self._config.serving.namespace,
            env=_env(
                SELECTOR=f"{labels.APP_NAME_LABEL}={labels.APP_NAME}",
                ROLLOUT_TIMEOUT_SECONDS=str(ROLLOUT_TIMEOUT_SECONDS),
            ),
            timeout=Duration.hours(1),
        )
        CfnOutput(self, "RolloutProject", value=project.project_name, description="Serving rollout")
        return project

    @staticmethod
    def _acknowledge_codebuild_defaults(project: codebuild.Project, *, in_vpc: bool, extra: str = "") -> None:
        """Acknowledge the wildcards aws-cdk-lib writes into every CodeBuild project's role.

        Call after the last grant to the role.
        """
        acknowledge_policy_wildcards(
            project.role,  # type: ignore[arg-type]
            "aws-cdk-lib CodeBuild defaults: log streams of this project's own log group (/aws/codebuild/<name>:*) "
            "and report groups named after this project (<name>-*)" + extra,
        )
        if in_vpc:
            vpc_policy = project.node.find_child("PolicyDocument")
            vpc_reason = (
                "aws-cdk-lib policy for a CodeBuild project in a VPC: ec2:CreateNetworkInterface and the "
                "ec2:Describe* calls have no resource-level permissions; CreateNetworkInterfacePermission is "
                "conditioned on this VPC's subnets and the CodeBuild service"
            )
            acknowledge_document_wildcards(vpc_policy, vpc_reason)
            skip_check(vpc_policy, "CKV_AWS_111", vpc_reason)


def _env(**values: str) -> dict[str, codebuild.BuildEnvironmentVariable]:
    return {name: codebuild.BuildEnvironmentVariable(value=value) for name, value in values.items()}


def project_arn(scope: Construct, name: str) -> str:
    """ARN of the CodeBuild project ``name`` in ``scope``'s account and region."""
    return Arn.format(
        ArnComponents(
            service="codebuild", resource="project", resource_name=name, arn_format=ArnFormat.SLASH_RESOURCE_NAME
        ),
        Stack.of(scope),
    )
