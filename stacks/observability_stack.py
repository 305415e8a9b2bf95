"""Observability: AMP workspace and managed scraper, rules, and optionally Amazon Managed Grafana.

The AMP managed scraper runs on the EKS cluster; recording/alert rules go into the workspace; the
optional Grafana workspace gets the AMP data source and the dashboard (with ``bulk.enabled`` also a
CloudWatch data source for the queue's ``AWS/SQS`` metrics) through a custom resource
(``observability/grafana_provisioner``). Everything is generated from :mod:`observability.queries`;
nothing here writes PromQL. Entry point: :class:`ObservabilityStack` (the CloudFormation facts it
relies on, in its docstring). Docs: docs/observability.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_aps as aps
from aws_cdk import aws_grafana as grafana
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from k8s_charts.autoscaling import amp_server_address
from observability import cost_queries, dashboard, rules, scrape_config
from settings import DeploymentConfig
from stacks.checkov_skips import skip_check
from stacks.nag import acknowledge_managed_policies, acknowledge_policy_wildcards, acknowledge_resource
from whisper_build.paths import REPO_ROOT

PROVISIONER_DIR = REPO_ROOT / "observability" / "grafana_provisioner"
GRAFANA_VERSION = "10.4"
"""Amazon Managed Grafana version (service accounts need Grafana ≥ 9.4; AMG user guide)."""

AMP_QUERY_ACTIONS = ["aps:QueryMetrics", "aps:GetLabels", "aps:GetSeries", "aps:GetMetricMetadata"]
"""Read access a Grafana workspace or KEDA needs on an AMP workspace (AMG user guide,
"Amazon Managed Grafana permissions for Amazon Managed Service for Prometheus")."""

CLOUDWATCH_READ_ACTIONS = ["cloudwatch:GetMetricData", "cloudwatch:ListMetrics"]
"""What the Grafana CloudWatch data source needs for the bulk row's ``AWS/SQS`` panels: ``GetMetricData``
(every metric query) and ``ListMetrics`` (the query editor's metric and dimension lists, the metrics half of
"Save & test"). Grafana's own metrics-only example adds alarms, EC2, tag and Performance Insights reads
(Grafana docs, "Configure the Amazon CloudWatch data source", IAM policy examples,
https://grafana.com/docs/grafana/latest/datasources/aws-cloudwatch/configure/); no panel here uses them.
Neither action has a resource type (Service Authorization Reference, "Actions, resources, and condition
keys for Amazon CloudWatch"), so the statement's resource is ``*``, narrowed to the stack's region by
``aws:RequestedRegion``."""

GRAFANA_PROVISIONER_ACTIONS = [
    "grafana:CreateWorkspaceServiceAccount",
    "grafana:CreateWorkspaceServiceAccountToken",
    "grafana:DeleteWorkspaceServiceAccountToken",
    "grafana:DeleteWorkspaceServiceAccount",
]


def cloudwatch_datasource_properties(config: DeploymentConfig) -> dict[str, str]:
    """The provisioner's CloudWatch data-source properties: the bulk row's, so only with ``bulk.enabled``.

    Without bulk, no panel reads CloudWatch and the workspace role gets no CloudWatch grant, so no data
    source is made that could only fail (the provisioner deletes one an earlier bulk config made).
    """
    if not config.bulk.enabled:
        return {}
    return {
        "CloudWatchDatasourceUid": dashboard.CLOUDWATCH_DATASOURCE_UID,
        "CloudWatchDatasourceName": dashboard.CLOUDWATCH_DATASOURCE_NAME,
    }


def _ignore_redundant_role_dependency(function: Construct) -> None:
    """Silence cfn-lint W3005 on one CDK Lambda function, with the reason in the template.

    CDK writes ``DependsOn`` on the function's role next to ``Fn::GetAtt Role.Arn`` (so that the
    role's policy exists before the function); cfn-lint flags the duplicate edge as W3005. The
    suppression is per resource (cfn-lint ``Metadata.cfn-lint.config.ignore_checks``), so the
    rule still applies everywhere else.
    """
    cfn_function = function.node.default_child
    assert isinstance(cfn_function, lambda_.CfnFunction)
    cfn_function.add_metadata("cfn-lint", {"config": {"ignore_checks": ["W3005"]}})
    cfn_function.add_metadata(
        "cfn-lint-reason", "W3005: DependsOn on the role is emitted by CDK next to GetAtt; redundant, harmless"
    )


class ObservabilityStack(Stack):
    """AMP + managed scraper + rules, and Grafana with the dashboard when enabled.

    Args:
        config: the deployment config (``observability``, ``gpu_groups``, ``serving`` are used).
        cluster_arn: ARN of the EKS cluster to scrape.
        subnet_ids: private subnets of the cluster's VPC, at least two (in two AZs).
        security_group_id: security group for the scraper's ENIs; it must reach the pods
            (the cluster/node security group).

    Attributes:
        workspace: the AMP workspace (``attr_workspace_id``, ``attr_arn``).
        prometheus_query_url: ``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>``
            (KEDA ``serverAddress``).
        scraper: the managed scraper.
        grafana_workspace: the Grafana workspace, or ``None`` when ``observability.grafana`` is off.

    Raises:
        ValueError: fewer than two subnets.

    Facts used (CloudFormation ``AWS::APS::Scraper`` and ``AWS::APS::Workspace`` reference pages,
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-aps-scraper.html, and the
    Amazon Managed Service for Prometheus user guide, its section on AWS managed collectors):

    * ``AWS::APS::Scraper`` needs ≥ 2 subnets in ≥ 2 AZs of the cluster's VPC, the EKS endpoint
      with private access, and creates its EKS access entry itself (authentication mode ``API`` or
      ``API_AND_CONFIG_MAP``). ``ConfigurationBlob`` is passed as plain YAML, as in the
      CloudFormation example of ``AWS::APS::Scraper`` and AWS's sample template
      (aws-samples/containers-blog-maelstrom ``amp-scraper-automation-blog/cloudformation/scraper.yaml``);
      the CreateScraper API itself takes base64 (verify on the first deploy).
    * ``attr_prometheus_endpoint`` ends in ``/api/v1/``; KEDA and Grafana need the workspace URL
      without it, built here as :attr:`ObservabilityStack.prometheus_query_url`.
    * CloudFormation has no Grafana data-source or dashboard resource: a custom resource
      (``observability/grafana_provisioner``) calls the Grafana API with a short-lived
      service-account token.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: DeploymentConfig,
        cluster_arn: str,
        subnet_ids: Sequence[str],
        security_group_id: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        if len(subnet_ids) < 2:
            raise ValueError(
                f"the AMP scraper needs at least two subnets in two AZs, got {len(subnet_ids)}; "
                "pass the cluster VPC's private subnets (network.max_azs >= 2)"
            )
        # NoReadyPods alerts only for groups that must always serve (min_replicas >= 1): a group
        # allowed to scale to zero would page permanently while it is at zero.
        always_serving = [group.name for group in config.gpu_groups if group.min_replicas >= 1]
        interval = config.observability.scrape_interval_seconds

        self.workspace = aps.CfnWorkspace(self, "Workspace", alias=f"{config.project_name}-metrics")
        self.prometheus_query_url = amp_server_address(self.region, self.workspace.attr_workspace_id)

        self.scraper = aps.CfnScraper(
            self,
            "Scraper",
            alias=f"{config.project_name}-scraper",
            source=aps.CfnScraper.SourceProperty(
                eks_configuration=aps.CfnScraper.EksConfigurationProperty(
                    cluster_arn=cluster_arn,
                    subnet_ids=list(subnet_ids),
                    security_group_ids=[security_group_id],
                )
            ),
            scrape_configuration=aps.CfnScraper.ScrapeConfigurationProperty(
                configuration_blob=scrape_config.scrape_config_yaml(config)
            ),
            destination=aps.CfnScraper.DestinationProperty(
                amp_configuration=aps.CfnScraper.AmpConfigurationProperty(workspace_arn=self.workspace.attr_arn)
            ),
        )

        aps.CfnRuleGroupsNamespace(
            self,
            "Rules",
            name=f"{config.project_name}-rules",
            workspace=self.workspace.attr_arn,
            data=rules.rules_yaml(
                always_serving, interval, cost_queries.recording_rules(cost_queries.cost_groups(config))
            ),
        )

        CfnOutput(self, "PrometheusWorkspaceId", value=self.workspace.attr_workspace_id)
        CfnOutput(self, "PrometheusQueryUrl", value=self.prometheus_query_url)

        self.grafana_workspace: grafana.CfnWorkspace | None = None
        if config.observability.grafana:
            self.grafana_workspace = self._grafana(config)

    def _grafana(self, config: DeploymentConfig) -> grafana.CfnWorkspace:
        role = iam.Role(
            self,
            "GrafanaRole",
            assumed_by=iam.ServicePrincipal("grafana.amazonaws.com"),
            description="Amazon Managed Grafana workspace role: query the whisper AMP workspace",
        )
        role.add_to_policy(iam.PolicyStatement(actions=AMP_QUERY_ACTIONS, resources=[self.workspace.attr_arn]))
        if config.bulk.enabled:
            self._allow_cloudwatch_reads(role)
        workspace = grafana.CfnWorkspace(
            self,
            "Grafana",
            name=f"{config.project_name}-grafana",
            account_access_type="CURRENT_ACCOUNT",
            authentication_providers=["AWS_SSO"],
            permission_type="CUSTOMER_MANAGED",
            role_arn=role.role_arn,
            grafana_version=GRAFANA_VERSION,
            description="Whisper on HyperPod: Triton, GPU and gateway metrics from AMP",
        )
        self._provision_dashboard(config, workspace)
        CfnOutput(self, "GrafanaUrl", value=f"https://{workspace.attr_endpoint}")
        return workspace

    def _allow_cloudwatch_reads(self, role: iam.Role) -> None:
        """Only with ``bulk.enabled``: no other panel reads CloudWatch, so no other config gets the grant."""
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadCloudWatchMetrics",
                actions=CLOUDWATCH_READ_ACTIONS,
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": self.region}},
            )
        )
        acknowledge_resource(
            role,
            "*",
            "cloudwatch:GetMetricData and ListMetrics support no resource-level permissions (Service "
            "Authorization Reference); the statement is read-only and limited to the stack's region",
        )

    def _provision_dashboard(self, config: DeploymentConfig, workspace: grafana.CfnWorkspace) -> None:
        log_group = logs.LogGroup(
            self,
            "ProvisionerLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self,
            "ProvisionerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Grafana dashboard provisioner: temporary service account token, own logs",
        )
        workspace_arn = self.format_arn(service="grafana", resource="/workspaces", resource_name=workspace.attr_id)
        role.add_to_policy(iam.PolicyStatement(actions=GRAFANA_PROVISIONER_ACTIONS, resources=[workspace_arn]))
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            )
        )
        handler = lambda_.Function(
            self,
            "Provisioner",
            runtime=lambda_.Runtime.PYTHON_3_14,
            handler="handler.on_event",
            code=lambda_.Code.from_asset(str(PROVISIONER_DIR), exclude=["__pycache__", "*.pyc"]),
            timeout=Duration.minutes(2),
            memory_size=256,
            role=role,
            log_group=log_group,
            description="Provisions the AMP data source and the whisper dashboard into Grafana",
        )
        provider_logs = logs.LogGroup(
            self,
            "ProviderLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        for group in (log_group, provider_logs):
            skip_check(
                group,
                "CKV_AWS_158",
                "CloudWatch Logs encrypts every log group at rest by default; the dashboard provisioner logs "
                "hold request outcomes, never the temporary Grafana token",
            )
        provider = cr.Provider(self, "ProvisionerProvider", on_event_handler=handler, log_group=provider_logs)
        CustomResource(
            self,
            "Dashboard",
            service_token=provider.service_token,
            resource_type="Custom::GrafanaDashboard",
            properties={
                "WorkspaceId": workspace.attr_id,
                "WorkspaceEndpoint": workspace.attr_endpoint,
                "PrometheusUrl": self.prometheus_query_url,
                "Region": self.region,
                "DatasourceUid": dashboard.DATASOURCE_UID,
                "DatasourceName": dashboard.DATASOURCE_NAME,
                "DashboardJson": dashboard.dashboard_json(config),
                **cloudwatch_datasource_properties(config),
            },
        )
        framework = provider.node.find_child("framework-onEvent")
        assert isinstance(framework, lambda_.Function), "cr.Provider's framework-onEvent is a lambda Function"
        for function in (handler, framework):
            _ignore_redundant_role_dependency(function)
        framework_role = framework.role
        assert framework_role is not None, "the Provider framework function creates its own role"
        acknowledge_managed_policies(
            framework_role,
            "CDK custom-resource Provider framework function: AWS's basic execution policy only lets it "
            "write its own CloudWatch logs",
        )
        acknowledge_policy_wildcards(
            framework_role,
            "CDK Provider framework invokes every version/alias of the one provisioner function it wraps",
        )
