"""Wiring of all whisper-hyperpod stacks into an ``App`` or a ``Stage``.

``app.py`` (``cdk synth``), the CDK Pipelines stage and the tests all call :func:`add_whisper_stacks`.
Which stacks a config gets, and their ids, come from :mod:`settings.names` (``names.stacks``), which
``make deploy`` and ``make destroy`` wait on too: a new stack is its suffix in ``names.STACKS``, one
constructor call here and one attribute on :class:`WhisperStacks` (tests/infra/synthesis/test_stack_names.py
checks the assembly against ``names.stacks`` for every shipped config).
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Environment, Stack, Tags
from constructs import Construct

from settings import names
from settings.names import PROJECT_TAG, serving_repository_name
from settings.schema import DeploymentConfig
from stacks.bulk_stack import BulkStack
from stacks.cluster_stack import ClusterStack
from stacks.engine_build_stack import EngineBuildStack
from stacks.network_stack import NetworkStack
from stacks.observability_stack import ObservabilityStack
from stacks.storage_stack import StorageStack
from stacks.workloads_stack import WorkloadsStack


@dataclass(frozen=True)
class WhisperStacks:
    """The stacks of one deployment, for stacks added on top (observability, pipeline) to reference."""

    network: NetworkStack
    storage: StorageStack
    cluster: ClusterStack
    observability: ObservabilityStack | None = None
    workloads: WorkloadsStack | None = None
    engine_build: EngineBuildStack | None = None
    bulk: BulkStack | None = None

    def built(self) -> tuple[Stack, ...]:
        """The stacks that exist, in creation order (the order of ``settings.names.STACKS``)."""
        made = (self.network, self.storage, self.cluster, self.observability, self.bulk, self.workloads)
        return tuple(stack for stack in (*made, self.engine_build) if stack is not None)


def stack_environment(config: DeploymentConfig) -> Environment:
    """``Environment(region=config.region, account=config.account)``.

    Without an account the stacks are account-agnostic, so synthesis needs no AWS credentials (AZs
    resolve with ``Fn::GetAZs``).
    """
    return Environment(account=config.account, region=config.region)


def add_whisper_stacks(scope: Construct, config: DeploymentConfig) -> WhisperStacks:
    """Create the network, storage and cluster stacks under ``scope``.

    Args:
        scope: An ``App`` (``cdk synth``) or a ``Stage`` (CDK Pipelines); stack ids are relative to it.
        config: The validated deployment config.

    Returns:
        The stacks, each exposing its shared resources as attributes.

    Raises:
        ValueError: a setting the stacks cannot honour (e.g. a Kubernetes version outside the kubectl
            layer's skew); the message names the setting.
    """
    wanted = names.stacks(config)

    def stack_id(stack: str) -> str:
        return names.stack_name(config, stack)

    # Stack tags are set on each stack (cdk.json sets @aws-cdk/core:explicitStackTags, under which
    # Tags.of() no longer tags stacks); CloudFormation copies them to every resource, including
    # types CDK's Tags.of() cannot tag. Tags.of() below still tags the resources in the templates.
    common: dict[str, Any] = {"env": stack_environment(config), "tags": {PROJECT_TAG: config.project_name}}
    network = NetworkStack(scope, stack_id("Network"), settings=config.network, **common)
    storage = StorageStack(
        scope,
        stack_id("Storage"),
        project_name=config.project_name,
        tls_certificates=config.serving.target == "inference_operator",
        **common,
    )
    cluster = ClusterStack(
        scope,
        stack_id("Cluster"),
        config=config,
        vpc=network.vpc,
        node_security_group=network.node_security_group,
        model_bucket_name=storage.model_bucket_name,
        lifecycle_bucket_name=storage.lifecycle_bucket_name,
        chart_repository=storage.chart_repository,
        chart_oci_url=storage.chart_oci_url,
        **common,
    )
    cluster.add_stack_dependency(storage, "buckets are referenced by name, not by export")
    observability = None
    if "Observability" in wanted:
        observability = ObservabilityStack(
            scope,
            stack_id("Observability"),
            config=config,
            cluster_arn=cluster.cluster.cluster_arn,
            subnet_ids=[subnet.subnet_id for subnet in network.vpc.private_subnets],
            security_group_id=network.node_security_group.security_group_id,
            **common,
        )
    bulk = None
    if "Bulk" in wanted:
        bulk = BulkStack(scope, stack_id("Bulk"), config=config, cluster_name=cluster.cluster.cluster_name, **common)
    workloads = WorkloadsStack(
        scope,
        stack_id("Workloads"),
        config=config,
        cluster_stack=cluster,
        serving_repository_name=serving_repository_name(config),
        amp_workspace_id=observability.workspace.attr_workspace_id if observability else None,
        amp_workspace_arn=observability.workspace.attr_arn if observability else None,
        tls_bucket_name=storage.tls_bucket_name,
        bulk=bulk,
        **common,
    )
    workloads.add_stack_dependency(storage, "serving repository referenced by name")
    engine_build = EngineBuildStack(
        scope,
        stack_id("EngineBuild"),
        config=config,
        cluster_name=cluster.cluster.cluster_name,
        kubectl_provider=cluster.cluster.kubectl_provider,
        model_bucket_name=storage.model_bucket_name,
        serving_repository_name=serving_repository_name(config),
        vpc=network.vpc,
        cluster_security_group=network.node_security_group,
        **common,
    )
    engine_build.add_stack_dependency(storage, "model bucket and serving repository are referenced by name")
    engine_build.add_stack_dependency(workloads, "build Roles live in the serving namespace the workloads create")
    Tags.of(scope).add(PROJECT_TAG, config.project_name)
    return WhisperStacks(
        network=network,
        storage=storage,
        cluster=cluster,
        observability=observability,
        workloads=workloads,
        engine_build=engine_build,
        bulk=bulk,
    )
