"""CDK Pipelines delivery: source → synth → deploy → serving image → engines → rollout.

In full: source → synth (tests, gates, ``cdk synth``) → self-mutate → deploy the stacks → build the
serving image → build every architecture's engine in parallel → roll the pods.

Only synthesized when ``config.pipeline`` names a source (:func:`add_app`); otherwise the app holds
the plain stacks for a workstation ``cdk deploy``. The pipeline steps after the deployment are thin
triggers (:func:`stacks.buildspecs.start_build_commands`) of the CodeBuild projects that the
deployed :class:`stacks.engine_build_stack.EngineBuildStack` defines, so the same projects also run
by hand (``aws codebuild start-build --project-name ...``).

Entry point: :class:`PipelineStack` (the details, in its docstring).
Docs: docs/engines.md, "Path B: the pipeline".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aws_cdk import CfnResource, Duration, RemovalPolicy, Stack, Stage, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct, IConstruct

from settings.names import stack_prefix
from settings.schema import DeploymentConfig
from stacks import buildspecs
from stacks.checkov_skips import skip_check
from stacks.engine_build_stack import (
    build_timeout,
    engine_project_name,
    image_project_name,
    project_arn,
    rollout_project_name,
)
from stacks.nag import acknowledge, acknowledge_policy_wildcards
from stacks.whisper_app import WhisperStacks, add_whisper_stacks, stack_environment
from whisper_build.paths import REPO_ROOT

DEFAULT_CONFIG_PATH = "config/default.yaml"
STAGE_ID = "Deploy"
TRIGGER_MARGIN = Duration.minutes(30)


def trigger_timeout(config: DeploymentConfig) -> Duration:
    """Timeout of a trigger step: it waits for its project, so it outlives the longest project timeout.

    The longest project timeout is :func:`stacks.engine_build_stack.build_timeout`'s; the margin is
    :data:`TRIGGER_MARGIN`.
    """
    return build_timeout(config).plus(TRIGGER_MARGIN)


class WhisperStage(Stage):
    """The app stacks (``add_whisper_stacks``) as one deployable pipeline stage.

    Attributes:
        stacks: the stacks of the deployment.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: DeploymentConfig, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.stacks: WhisperStacks = add_whisper_stacks(self, config)


def synth_commands(config_path: str) -> list[str]:
    """The synth step: the test suite, then the gated synthesis of this config into ``cdk.out``.

    ``make test`` creates ``.venv`` and installs the pinned tools first (Makefile). ``make synth``
    synthesizes once and moves the assembly into ``cdk.out`` only when cfn-lint, cdk-nag and checkov
    pass (scripts/synth.py); that ``cdk.out`` is the step's output, so the pipeline deploys exactly the
    assembly that passed the gates (a ``cdk synth`` after them would synthesize anew).
    """
    return ["make test", f"make synth CONFIG={config_path}"]


class PipelineStack(Stack):
    """The self-mutating delivery pipeline of one deployment.

    Attributes:
        stage: the deployed :class:`WhisperStage`.
        pipeline: the CDK Pipelines ``CodePipeline`` (built; ``pipeline.pipeline`` is the CodePipeline).
        engine_steps: the per-architecture trigger steps (one wave), keyed by arch.

    Stages of the synthesized pipeline::

        Source → Build (Synth) → UpdatePipeline (self-mutation) → Assets → Deploy (optional manual
        approval first, then the app stacks) → ServingImage → Engines (one action per GPU
        architecture, same run order = parallel) → Rollout
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeploymentConfig, config_path: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        source_settings = config.pipeline
        if not source_settings.enabled:
            raise ValueError("pipeline.connection_arn and pipeline.repository must be set to synthesize the pipeline")
        assert source_settings.repository is not None and source_settings.connection_arn is not None
        source = pipelines.CodePipelineSource.connection(
            source_settings.repository, source_settings.branch, connection_arn=source_settings.connection_arn
        )
        artifact_key = kms.Key(self, "ArtifactKey", enable_key_rotation=True, description="Pipeline artifacts")
        artifacts = s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=artifact_key,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        no_access_log = (
            "Pipeline artifact bucket: only CodePipeline/CodeBuild roles of this pipeline read and write it, "
            "and every access is already in CloudTrail and the pipeline's execution history"
        )
        acknowledge(artifacts, "AwsSolutions-S1", no_access_log)
        skip_check(artifacts, "CKV_AWS_18", no_access_log)
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=f"{config.project_name}-delivery",
            pipeline_type=codepipeline.PipelineType.V2,
            artifact_bucket=artifacts,
            self_mutation=True,
            synth=pipelines.ShellStep(
                "Synth", input=source, commands=synth_commands(config_path), primary_output_directory="cdk.out"
            ),
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(build_image=codebuild.LinuxBuildImage.STANDARD_7_0)
            ),
        )
        self._trigger_timeout = trigger_timeout(config)
        self.stage = WhisperStage(self, STAGE_ID, config=config, env=stack_environment(config))
        approval = [pipelines.ManualApprovalStep("ApproveProduction")] if source_settings.manual_approval else []
        self.pipeline.add_stage(self.stage, pre=approval)
        self.pipeline.add_wave("ServingImage", post=[self._trigger("BuildServingImage", image_project_name(config))])
        self.engine_steps = {
            arch: self._trigger(f"BuildEngine-{arch}", engine_project_name(config, arch))
            for arch in config.engine_targets
        }
        # no engine steps when every group serves the Hugging Face checkpoint (torch): CDK Pipelines
        # then leaves the empty wave out
        self.pipeline.add_wave("Engines", post=list(self.engine_steps.values()))
        self.pipeline.add_wave("Rollout", post=[self._trigger("RolloutServing", rollout_project_name(config))])
        self.pipeline.build_pipeline()
        self._acknowledge_generated()
        self._scope_asset_builds()
        self._action_arns_as_sub()

    def _trigger(self, step_id: str, project_name: str) -> pipelines.CodeBuildStep:
        """A step that starts ``project_name`` and fails when that build fails; may start and read only it."""
        return pipelines.CodeBuildStep(
            step_id,
            commands=buildspecs.start_build_commands(),
            env={"PROJECT_NAME": project_name},
            role_policy_statements=[
                iam.PolicyStatement(
                    actions=["codebuild:StartBuild", "codebuild:BatchGetBuilds"],
                    resources=[project_arn(self, project_name)],
                )
            ],
            timeout=self._trigger_timeout,
        )

    def _acknowledge_generated(self) -> None:
        """Acknowledge wildcards in the roles aws-cdk-lib's CDK Pipelines generates.

        Those roles: the artifact bucket's, the log groups', the ``cdk-*`` bootstrap roles for self-mutation
        and asset publishing.
        """
        for construct in _walk(self.pipeline):
            if isinstance(construct, iam.Role):
                acknowledge_policy_wildcards(
                    construct,
                    "CDK Pipelines-generated role: object wildcards on this pipeline's artifact bucket, "
                    "log streams of its own CodeBuild projects, and sts:AssumeRole on the CDK bootstrap "
                    "roles (cdk-*) that self-mutation and asset publishing use",
                )

    def _scope_asset_builds(self) -> None:
        """Limit the asset-publishing role's ``codebuild:StartBuild``/``StopBuild``/``BatchGetBuilds`` to its projects.

        CDK Pipelines grants them on ``*`` to the role its asset-publishing CodeBuild actions and projects
        share (checkov CKV_AWS_111); the role only ever starts this pipeline's ``Assets/FileAsset<n>``
        projects, so the statement's resource becomes their ARNs.
        """
        assets = self.pipeline.node.try_find_child("Assets")
        if assets is None:
            return
        projects = [c.project_arn for c in assets.node.find_all() if isinstance(c, codebuild.Project)]
        policy = assets.node.find_child("FileRole").node.find_child("DefaultPolicy").node.default_child
        assert isinstance(policy, iam.CfnPolicy)
        for index, statement in enumerate(self.resolve(policy.policy_document)["Statement"]):
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            if statement.get("Resource") == "*" and all(action.startswith("codebuild:") for action in actions):
                policy.add_property_override(f"PolicyDocument.Statement.{index}.Resource", projects)

    def _action_arns_as_sub(self) -> None:
        """Rewrite ``Fn::Join`` values in action configurations as ``Fn::Sub``, the form cfn-lint requires (E3703).

        The values are CDK Pipelines' CloudFormation role ARNs of an account-agnostic stage.
        """
        cfn_pipeline = self.pipeline.pipeline.node.default_child
        assert isinstance(cfn_pipeline, CfnResource)
        for i, stage in enumerate(self.resolve(cfn_pipeline.stages)):  # type: ignore[attr-defined]
            for j, action in enumerate(stage["actions"]):
                for key, value in (action.get("configuration") or {}).items():
                    sub = join_as_sub(value)
                    if sub is not None:
                        cfn_pipeline.add_property_override(f"Stages.{i}.Actions.{j}.Configuration.{key}", sub)


def join_as_sub(value: Any) -> dict[str, str] | None:
    """A plain string ``Fn::Join`` as ``Fn::Sub``; None for anything else.

    ``{"Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":iam::x"]]}`` →
    ``{"Fn::Sub": "arn:${AWS::Partition}:iam::x"}``. Anything else: other delimiters, parts other than
    strings and ``Ref``s.
    """
    if not (isinstance(value, dict) and list(value) == ["Fn::Join"]):
        return None
    delimiter, parts = value["Fn::Join"]
    if delimiter != "" or not isinstance(parts, list):
        return None
    text = []
    for part in parts:
        if isinstance(part, str) and "${" not in part:
            text.append(part)
        elif isinstance(part, dict) and list(part) == ["Ref"] and isinstance(part["Ref"], str):
            text.append("${" + part["Ref"] + "}")
        else:
            return None
    return {"Fn::Sub": "".join(text)}


def _walk(root: IConstruct) -> list[IConstruct]:
    return list(root.node.find_all())


def repository_path(path: str | Path) -> str:
    """``path`` relative to the repository root, POSIX-style, as the pipeline's checkout sees it.

    Raises:
        ValueError: an absolute path outside the repository (the pipeline could not read it).
    """
    candidate = Path(path)
    if not candidate.is_absolute():
        return candidate.as_posix()
    try:
        return candidate.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError as exc:
        raise ValueError(
            f"config file {path} is outside the repository; the pipeline synthesizes from its own checkout, "
            "so commit the config inside the repository (e.g. config/examples/pipeline.yaml)"
        ) from exc


def add_app(scope: Construct, config: DeploymentConfig, *, config_path: str | Path | None = None) -> WhisperStacks:
    """What ``app.py`` synthesizes: the pipeline, or the app stacks directly.

    The pipeline (containing the app stacks) when ``config.pipeline`` names a source, else the app
    stacks directly (workstation ``cdk deploy``).

    Args:
        scope: the CDK app (or another scope) the stacks are added to.
        config: the deployment config.
        config_path: the config file (``-c config=...``); the pipeline's synth step passes it on to
            ``cdk synth``. Default: ``config/default.yaml``.

    Returns:
        The app stacks (inside the pipeline's stage when there is a pipeline).
    """
    if config.pipeline.enabled:
        pipeline = PipelineStack(
            scope,
            f"{stack_prefix(config.project_name)}Pipeline",
            config=config,
            config_path=repository_path(config_path or DEFAULT_CONFIG_PATH),
            env=stack_environment(config),
        )
        return pipeline.stage.stacks
    return add_whisper_stacks(scope, config)
