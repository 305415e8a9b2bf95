"""Launch template of the EKS managed system node group: the ``project`` tag on its instances.

Tags on an ``AWS::EKS::Nodegroup`` tag the node group only; EKS does not copy them to the EC2
instances, volumes and network interfaces it launches (aws/containers-roadmap#608, open since
2019). A launch template's ``TagSpecifications`` do reach them (EKS user guide, "Customize managed
nodes with launch templates"), so the cost tracking of docs/deploy.md counts the system nodes.

The template sets nothing else EKS would choose (no AMI, user data or instance type: the node
group keeps ``instance_types`` and ``ami_type``) except the instance metadata options: IMDSv2
only (``HttpTokens: required``) with a hop limit of 2, because an IMDSv2 response to a pod crosses
one more hop than to the host, and controllers on these nodes may read their region from the
instance metadata.
"""

from __future__ import annotations

from aws_cdk import CfnTag
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from settings.names import PROJECT_TAG

TAGGED_RESOURCE_TYPES = ("instance", "volume", "network-interface")
"""What an instance launch creates and can be tagged at launch (EC2 ``TagSpecification.ResourceType``)."""
METADATA_HOP_LIMIT = 2


def system_node_launch_template(scope: Construct, project_name: str) -> eks.LaunchTemplateSpec:
    """A launch template that tags every instance, volume and ENI of the node group ``project=<project_name>``.

    Returns:
        The spec for ``add_nodegroup_capacity(launch_template_spec=…)`` (latest version).
    """
    tags = [CfnTag(key=PROJECT_TAG, value=project_name)]
    template = ec2.CfnLaunchTemplate(
        scope,
        "SystemNodesLaunchTemplate",
        launch_template_data=ec2.CfnLaunchTemplate.LaunchTemplateDataProperty(
            metadata_options=ec2.CfnLaunchTemplate.MetadataOptionsProperty(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=METADATA_HOP_LIMIT
            ),
            tag_specifications=[
                ec2.CfnLaunchTemplate.TagSpecificationProperty(resource_type=resource_type, tags=tags)
                for resource_type in TAGGED_RESOURCE_TYPES
            ],
        ),
    )
    return eks.LaunchTemplateSpec(id=template.ref, version=template.attr_latest_version_number)
