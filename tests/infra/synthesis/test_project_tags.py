"""The ``project`` tag reaches what the controller and EKS create outside CloudFormation."""

from __future__ import annotations

import pytest
from cdk_assembly import CONFIGS, synthesized
from k8s_support import config_with, of_kind, synth

from settings.names import PROJECT_TAG

TAGS_ANNOTATION = {
    "nlb": ("Service", "service.beta.kubernetes.io/aws-load-balancer-additional-resource-tags"),
    "alb": ("Ingress", "alb.ingress.kubernetes.io/tags"),
}


@pytest.mark.parametrize("kind", ["nlb", "alb"])
def test_controller_made_load_balancer_gets_the_project_tag(kind: str) -> None:
    config = config_with(project_name="whisper-tagged", endpoint={"kind": kind})
    object_kind, annotation = TAGS_ANNOTATION[kind]
    [endpoint] = of_kind(synth(config), object_kind).values()
    # the controller applies these key=value pairs to the load balancer, its target groups and security groups
    assert endpoint["metadata"]["annotations"][annotation] == f"{PROJECT_TAG}=whisper-tagged"


@pytest.mark.slow
def test_system_node_instances_volumes_and_enis_get_the_project_tag() -> None:
    result = synthesized(CONFIGS["default"])
    template = result.template_json("WhisperHyperpodCluster")
    resources = template["Resources"]
    [(template_id, launch_template)] = [(k, r) for k, r in resources.items() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    data = launch_template["Properties"]["LaunchTemplateData"]
    tagged = {spec["ResourceType"]: spec["Tags"] for spec in data["TagSpecifications"]}
    expected = [{"Key": PROJECT_TAG, "Value": result.config.project_name}]
    assert tagged == {"instance": expected, "volume": expected, "network-interface": expected}
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    [nodegroup] = [r for r in resources.values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert nodegroup["Properties"]["LaunchTemplate"]["Id"] == {"Ref": template_id}
    # EKS refuses disk size, AMI or remote access on the node group together with a launch template
    assert not {"DiskSize", "RemoteAccess"} & set(nodegroup["Properties"])
