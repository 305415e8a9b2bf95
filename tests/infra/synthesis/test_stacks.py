"""Properties of the synthesized stacks that the product depends on, for the default and the
three-group config: HyperPod instance groups follow the config, storage is TLS-only, the HyperPod
execution role cannot write S3, the EKS cluster has the add-ons HyperPod and Mountpoint need."""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_cdk.assertions import Match
from cdk_assembly import CONFIGS, Synthesized, synthesized

from settings import labels
from stacks.cluster_stack import KUBECTL_MINOR, check_kubectl_compatibility
from stacks.hyperpod import LIFECYCLE_DIR, ON_CREATE_SCRIPT
from stacks.hyperpod_iam import lifecycle_list_prefixes
from stacks.network_stack import INTERNAL_ELB_TAG, PUBLIC_ELB_TAG

pytestmark = pytest.mark.slow

REQUIRED_ADDONS = {"vpc-cni", "kube-proxy", "coredns", "eks-pod-identity-agent", "aws-mountpoint-s3-csi-driver"}
S3_READ_ACTIONS = {"s3:GetObject", "s3:ListBucket"}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def result(request: pytest.FixtureRequest) -> Synthesized:
    return synthesized(CONFIGS[request.param])


def _ids(result: Synthesized) -> tuple[str, str, str]:
    assert result.stacks is not None, result.error
    return result.stacks.network.artifact_id, result.stacks.storage.artifact_id, result.stacks.cluster.artifact_id


def _resources(template: dict[str, Any], resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == resource_type}


def _hyperpod(result: Synthesized) -> dict[str, Any]:
    clusters = _resources(result.template_json(_ids(result)[2]), "AWS::SageMaker::Cluster")
    assert len(clusters) == 1
    return next(iter(clusters.values()))


def test_one_instance_group_per_gpu_group(result: Synthesized) -> None:
    every_group = _hyperpod(result)["Properties"]["InstanceGroups"]
    groups = [g for g in every_group if "CapacityRequirements" not in g]  # Spot twins: tests/infra/*/test_capacity_*
    expected = [
        {
            "InstanceGroupName": g.name,
            # a priority list is a flexible group (InstanceRequirements), a single type InstanceType
            "InstanceType": g.instance_types if g.flexible else g.instance_type,
            # Karpenter-managed groups start at 0 nodes (stacks/hyperpod.py)
            "InstanceCount": 0 if result.config.cluster.node_autoscaling else g.instance_count,
            "ThreadsPerCore": g.threads_per_core,
            "Labels": {
                labels.GPU_GROUP_LABEL: g.name,
                labels.GPU_ARCH_LABEL: g.arch,
                # the MIG example's p5 group: the GPU Operator's MIG manager partitions its GPUs
                **({labels.MIG_CONFIG_LABEL: f"all-{g.mig_profile}"} if g.mig_profile else {}),
            },
            "VolumeSizeInGB": g.ebs_volume_gb,
        }
        for g in result.config.gpu_groups
    ]
    actual = [
        {
            "InstanceGroupName": g["InstanceGroupName"],
            "InstanceType": g.get("InstanceType") or g["InstanceRequirements"]["InstanceTypes"],
            "InstanceCount": g["InstanceCount"],
            "ThreadsPerCore": g["ThreadsPerCore"],
            "Labels": g["KubernetesConfig"]["Labels"],
            "VolumeSizeInGB": g["InstanceStorageConfigs"][0]["EbsVolumeConfig"]["VolumeSizeInGB"],
        }
        for g in groups
    ]
    assert actual == expected
    gpu_taint = {"Key": labels.GPU_TAINT_KEY, "Value": labels.GPU_TAINT_VALUE, "Effect": labels.GPU_TAINT_EFFECT}
    spot_taint = {"Key": labels.SPOT_TAINT_KEY, "Value": labels.SPOT_TAINT_VALUE, "Effect": labels.SPOT_TAINT_EFFECT}
    for group in every_group:
        spot = "CapacityRequirements" in group
        assert group["KubernetesConfig"]["Taints"] == ([gpu_taint, spot_taint] if spot else [gpu_taint])
        assert group["LifeCycleConfig"]["OnCreate"] == ON_CREATE_SCRIPT


def test_three_group_config_has_the_h100_group() -> None:
    groups = _hyperpod(synthesized(CONFIGS["three-groups"]))["Properties"]["InstanceGroups"]
    p5 = [g for g in groups if g["InstanceGroupName"] == "p5"]
    assert [(g["InstanceType"], g["KubernetesConfig"]["Labels"][labels.GPU_ARCH_LABEL]) for g in p5] == [
        ("ml.p5.48xlarge", "sm90")
    ]


def test_hyperpod_cluster_is_eks_orchestrated_and_ordered_after_its_chart(result: Synthesized) -> None:
    cluster_template = result.template_json(_ids(result)[2])
    hyperpod = _hyperpod(result)
    props = hyperpod["Properties"]
    assert props["NodeRecovery"] == "Automatic"
    if result.config.cluster.node_autoscaling:  # the bulk example: Karpenter (test_node_autoscaling_uses_karpenter…)
        assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    else:
        assert "AutoScaling" not in props and "NodeProvisioningMode" not in props
    eks_clusters = _resources(cluster_template, "AWS::EKS::Cluster")
    assert props["Orchestrator"] == {"Eks": {"ClusterArn": {"Fn::GetAtt": [next(iter(eks_clusters)), "Arn"]}}}
    charts = _resources(cluster_template, "Custom::AWSCDK-EKS-HelmChart")
    hyperpod_charts = [k for k, v in charts.items() if v["Properties"].get("Release") == "hyperpod-dependencies"]
    assert len(hyperpod_charts) == 1
    assert hyperpod_charts[0] in hyperpod["DependsOn"]
    addons = _resources(cluster_template, "AWS::EKS::Addon")
    assert set(addons) <= set(hyperpod["DependsOn"])


def test_eks_cluster_api_auth_version_and_addons(result: Synthesized) -> None:
    template = result.template(_ids(result)[2])
    template.has_resource_properties(
        "AWS::EKS::Cluster",
        {
            "AccessConfig": Match.object_like({"AuthenticationMode": "API"}),
            "Version": result.config.cluster.kubernetes_version,
            # the public API endpoint is reachable only from the configured CIDRs
            "ResourcesVpcConfig": Match.object_like(
                {"EndpointPublicAccess": True, "PublicAccessCidrs": result.config.cluster.public_access_cidrs}
            ),
        },
    )
    addons = {
        a["Properties"]["AddonName"]
        for a in _resources(result.template_json(_ids(result)[2]), "AWS::EKS::Addon").values()
    }
    assert addons == REQUIRED_ADDONS
    template.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "kube-system", "ServiceAccount": "s3-csi-driver-sa"}
    )
    template.has_resource_properties(
        "AWS::EKS::Nodegroup",
        {
            "InstanceTypes": [result.config.cluster.system_node_instance_type],
            "ScalingConfig": Match.object_like({"DesiredSize": result.config.cluster.system_node_count}),
        },
    )


def test_addons_are_ordered_around_the_system_node_group(result: Synthesized) -> None:
    template = result.template_json(_ids(result)[2])
    addon_ids = {v["Properties"]["AddonName"]: k for k, v in _resources(template, "AWS::EKS::Addon").items()}
    ((nodegroup_id, nodegroup),) = _resources(template, "AWS::EKS::Nodegroup").items()
    # Nodes become Ready only with the CNI; CoreDNS and the Mountpoint controller need a node.
    assert {addon_ids["vpc-cni"], addon_ids["kube-proxy"], addon_ids["eks-pod-identity-agent"]} <= set(
        nodegroup["DependsOn"]
    )
    for name in ("coredns", "aws-mountpoint-s3-csi-driver"):
        assert nodegroup_id in template["Resources"][addon_ids[name]]["DependsOn"], name


def _role_statements(template: dict[str, Any], role_logical_id: str) -> list[dict[str, Any]]:
    role = template["Resources"][role_logical_id]
    statements = [s for p in role["Properties"].get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for policy in _resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} in policy["Properties"].get("Roles", []):
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_execution_role_has_no_s3_writes_and_no_wildcard_s3(result: Synthesized) -> None:
    template = result.template_json(_ids(result)[2])
    role_ids = {g["ExecutionRole"]["Fn::GetAtt"][0] for g in _hyperpod(result)["Properties"]["InstanceGroups"]}
    assert len(role_ids) == 1
    statements = _role_statements(template, role_ids.pop())
    s3_statements = [s for s in statements if any(a.startswith("s3:") for a in _as_list(s["Action"]))]
    assert s3_statements, "the execution role must be able to read its lifecycle scripts"
    for statement in s3_statements:
        assert set(_as_list(statement["Action"])) <= S3_READ_ACTIONS, statement
        assert "*" not in _as_list(statement["Resource"]), statement
    for statement in statements:
        if "*" in _as_list(statement["Resource"]):
            assert not any(a.startswith("s3:") or a == "*" for a in _as_list(statement["Action"])), statement


def test_mountpoint_role_reads_models_only_through_pod_identity(result: Synthesized) -> None:
    template = result.template_json(_ids(result)[2])
    (association,) = _resources(template, "AWS::EKS::PodIdentityAssociation").values()
    role_id = association["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    trust = template["Resources"][role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert [(t["Principal"], sorted(_as_list(t["Action"]))) for t in trust] == [
        ({"Service": "pods.eks.amazonaws.com"}, ["sts:AssumeRole", "sts:TagSession"])
    ]
    statements = _role_statements(template, role_id)
    assert {a for s in statements for a in _as_list(s["Action"])} == S3_READ_ACTIONS
    objects = [s for s in statements if s["Action"] == "s3:GetObject"]
    assert json.dumps(objects[0]["Resource"]).endswith('/models/*"]]}')


def test_every_bucket_is_tls_only_private_and_versioned(result: Synthesized) -> None:
    template = result.template_json(_ids(result)[1])
    buckets = _resources(template, "AWS::S3::Bucket")
    policies = _resources(template, "AWS::S3::BucketPolicy")
    # models, lifecycle, access logs; + the inference operator's certificates on that target
    operator = result.config.serving.target == "inference_operator"
    assert len(buckets) == (4 if operator else 3)
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        bucket_policies = [p for p in policies.values() if p["Properties"]["Bucket"] == {"Ref": logical_id}]
        assert len(bucket_policies) == 1, logical_id
        deny_plain_http = [
            s
            for s in bucket_policies[0]["Properties"]["PolicyDocument"]["Statement"]
            if s["Effect"] == "Deny" and s.get("Condition") == {"Bool": {"aws:SecureTransport": "false"}}
        ]
        assert deny_plain_http and deny_plain_http[0]["Action"] == "s3:*", logical_id
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == (3 if operator else 2)  # model + lifecycle (+ TLS) buckets log to the access-log bucket


def test_ecr_repositories_scan_on_push_and_are_immutable(result: Synthesized) -> None:
    repositories = _resources(result.template_json(_ids(result)[1]), "AWS::ECR::Repository")
    assert len(repositories) == 2
    for repository in repositories.values():
        assert repository["Properties"]["ImageScanningConfiguration"] == {"ScanOnPush": True}
        assert repository["Properties"]["ImageTagMutability"] == "IMMUTABLE"


def test_network_two_azs_flow_logs_s3_endpoint_and_node_security_group(result: Synthesized) -> None:
    template = result.template_json(_ids(result)[0])
    subnets = _resources(template, "AWS::EC2::Subnet").values()
    tags = [{t["Key"]: t["Value"] for t in s["Properties"]["Tags"]} for s in subnets]
    assert sum(INTERNAL_ELB_TAG in t for t in tags) >= 2 and sum(PUBLIC_ELB_TAG in t for t in tags) >= 2
    assert len({str(s["Properties"]["AvailabilityZone"]) for s in subnets}) >= 2
    assert _resources(template, "AWS::EC2::NatGateway")
    assert [f["Properties"]["TrafficType"] for f in _resources(template, "AWS::EC2::FlowLog").values()] == ["ALL"]
    endpoints = _resources(template, "AWS::EC2::VPCEndpoint").values()
    # S3 (gateway) and Secrets Manager (interface, for the serving pods' API-key reads inside the VPC)
    assert sorted(e["Properties"]["VpcEndpointType"] for e in endpoints) == ["Gateway", "Interface"]
    self_rules = [
        r["Properties"]
        for r in _resources(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == r["Properties"].get("SourceSecurityGroupId")
    ]
    assert len(self_rules) == 1 and self_rules[0]["IpProtocol"] == "-1"


def test_node_autoscaling_uses_karpenter_with_empty_groups(tmp_path: Path) -> None:
    data = yaml.safe_load(CONFIGS["default"].read_text(encoding="utf-8"))
    data["cluster"]["node_autoscaling"] = True
    path = tmp_path / "autoscaling.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    result = synthesized(path)
    assert result.error is None, result.error
    props = _hyperpod(result)["Properties"]
    assert props["AutoScaling"] == {"Mode": "Enable", "AutoScalerType": "Karpenter"}
    assert props["NodeProvisioningMode"] == "Continuous"
    role_id = props["ClusterRole"]["Fn::GetAtt"][0]
    role = result.template_json(_ids(result)[2])["Resources"][role_id]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "hyperpod.sagemaker.amazonaws.com"
    }
    for group in props["InstanceGroups"]:
        assert group["InstanceCount"] == 0
        assert "OnStartDeepHealthChecks" not in group
        assert len(group["OverrideVpcConfig"]["Subnets"]) == 1  # HyperpodNodeClass: one AZ per group


def test_kubectl_layer_skew_is_checked() -> None:
    check_kubectl_compatibility(f"1.{KUBECTL_MINOR - 1}")
    with pytest.raises(ValueError, match=r"cluster\.kubernetes_version 1\.30 is outside the skew"):
        check_kubectl_compatibility("1.30")


def test_lifecycle_script_is_valid_bash_and_moves_containerd_root() -> None:
    script = LIFECYCLE_DIR / ON_CREATE_SCRIPT
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "/opt/sagemaker/containerd/data-root" in script.read_text(encoding="utf-8")


def test_execution_role_may_list_exactly_the_lifecycle_source_uri(result: Synthesized) -> None:
    # GIVEN the SourceS3Uri every instance group uses, s3://<bucket>/<key>
    template = result.template_json(_ids(result)[2])
    groups = _hyperpod(result)["Properties"]["InstanceGroups"]
    uris = {json.dumps(g["LifeCycleConfig"]["SourceS3Uri"], sort_keys=True) for g in groups}
    assert len(uris) == 1
    parts = json.loads(uris.pop())["Fn::Join"][1]
    uri = "".join(part if isinstance(part, str) else "TOKEN" for part in parts)  # account/region tokens
    # the API's SourceS3Uri pattern (API_ClusterLifeCycleConfig): bucket, then the key after one "/"
    match = re.fullmatch(r"(https|s3)://([^/]+)/?(.*)", uri)
    assert match is not None, uri
    key = match.group(3)
    assert key and not key.endswith("/"), uri
    # WHEN HyperPod lists the bucket under it THEN the role's s3:ListBucket condition allows the key
    # itself and everything below it (StringLike: * = any characters), and nothing beside it
    role_id = groups[0]["ExecutionRole"]["Fn::GetAtt"][0]
    (listing,) = [s for s in _role_statements(template, role_id) if "s3:ListBucket" in _as_list(s["Action"])]
    patterns = _as_list(listing["Condition"]["StringLike"]["s3:prefix"])

    def allowed(prefix: str) -> bool:
        return any(fnmatch.fnmatchcase(prefix, pattern) for pattern in patterns)

    assert allowed(key) and allowed(f"{key}/") and allowed(f"{key}/{ON_CREATE_SCRIPT}")
    assert not allowed(f"{key}-other/") and not allowed("") and not allowed("models/")
    # ... and the objects below it may be read
    (reading,) = [s for s in _role_statements(template, role_id) if "s3:GetObject" in _as_list(s["Action"])]
    assert reading["Resource"]["Fn::Join"][1][-1].endswith(f"/{key}/*"), reading["Resource"]


def test_lifecycle_key_must_be_a_plain_key() -> None:
    assert lifecycle_list_prefixes("lifecycle") == ["lifecycle", "lifecycle/*"]
    for bad in ("", "lifecycle/", "/lifecycle"):
        with pytest.raises(ValueError, match="lifecycle_key must be an S3 key"):
            lifecycle_list_prefixes(bad)
