"""Network: VPC, NAT, flow logs, S3 and Secrets Manager endpoints, the HyperPod node security group.

The VPC spans >= 2 AZs.
The Secrets Manager endpoint (private DNS) keeps the gateway's API-key reads inside the VPC, which is
what the serving pods' egress NetworkPolicy allows (HTTPS to the VPC CIDR only).
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Fn, RemovalPolicy, Stack, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from settings.network_plan import PRIVATE_SUBNET_MASK, PUBLIC_SUBNET_MASK
from settings.schema import NetworkSettings
from stacks.checkov_skips import skip_check

INTERNAL_ELB_TAG = "kubernetes.io/role/internal-elb"
"""Subnet tag the AWS Load Balancer Controller uses to place internal load balancers."""
PUBLIC_ELB_TAG = "kubernetes.io/role/elb"
"""Subnet tag the AWS Load Balancer Controller uses to place internet-facing load balancers."""


class NetworkStack(Stack):
    """VPC and the security group every HyperPod node (and the EKS control plane) shares.

    Attributes:
        vpc: The VPC; ``vpc.private_subnets`` host EKS, HyperPod nodes and internal load balancers.
        node_security_group: Security group with a self-referencing all-traffic rule, attached to
            the EKS control plane ENIs and every HyperPod instance group (as in AWS's HyperPod EKS
            templates, awsome-distributed-training ``security-group-stack.yaml``).
    """

    @property
    def availability_zones(self) -> list[str]:
        """The first ``network.max_azs`` AZs of the region, resolved by CloudFormation at deploy time.

        ``[Fn::Select [i, Fn::GetAZs ""]]`` for every i, whether or not the config pins ``account``.
        Stack's own answer would be a context lookup when the account is known (credentials and a
        bootstrap needed; offline CDK fills in ``dummy1a``…, which cfn-lint W3010 refuses) and only
        the first two AZs when it is not (aws-cdk-lib 2.275 ``core/lib/stack.ts``,
        ``availabilityZones``), silently ignoring a larger ``max_azs``. ``Fn::GetAZs`` lists the
        region's AZs in alphabetical order (CloudFormation intrinsic function reference); a region with
        fewer AZs than ``max_azs`` fails the deploy at ``Fn::Select``.
        """
        return [Fn.select(index, Fn.get_azs()) for index in range(self._az_count)]

    def __init__(self, scope: Construct, construct_id: str, *, settings: NetworkSettings, **kwargs: Any) -> None:
        self._az_count = settings.max_azs  # read by availability_zones while ec2.Vpc is built
        super().__init__(scope, construct_id, **kwargs)
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        skip_check(
            flow_log_group,
            "CKV_AWS_158",
            "CloudWatch Logs encrypts every log group at rest by default; VPC flow records hold addresses and "
            "ports, no secrets or customer data",
        )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(settings.vpc_cidr),
            max_azs=settings.max_azs,
            nat_gateways=settings.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=PUBLIC_SUBNET_MASK),
                ec2.SubnetConfiguration(
                    name="Private",
                    subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS,
                    cidr_mask=PRIVATE_SUBNET_MASK,
                ),
            ],
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )
        endpoint_security_group = ec2.SecurityGroup(
            self,
            "SecretsManagerEndpointSecurityGroup",
            vpc=self.vpc,
            description="Secrets Manager interface endpoint: HTTPS from the VPC",
            allow_all_outbound=False,
        )
        endpoint_security_group.add_ingress_rule(
            ec2.Peer.ipv4(settings.vpc_cidr), ec2.Port.tcp(443), "HTTPS from the VPC (serving pods' API-key reads)"
        )
        self.secrets_manager_endpoint = self.vpc.add_interface_endpoint(
            "SecretsManager",
            service=ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
            private_dns_enabled=True,
            subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[endpoint_security_group],
            open=False,
        )
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add(INTERNAL_ELB_TAG, "1")
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add(PUBLIC_ELB_TAG, "1")

        self.node_security_group = ec2.SecurityGroup(
            self,
            "NodeSecurityGroup",
            vpc=self.vpc,
            description="HyperPod nodes and EKS control plane; all traffic between members",
            allow_all_outbound=True,
        )
        self.node_security_group.add_ingress_rule(
            self.node_security_group,
            ec2.Port.all_traffic(),
            "All traffic between HyperPod nodes and the EKS control plane (kubelet, NCCL/EFA, webhooks)",
        )
