"""The AWS calls of ``make destroy`` beyond ``cdk destroy``: stack states, load balancers, what still bills.

Stack states make a re-run safe (gone: skipped; ``DELETE_IN_PROGRESS``: waited for; ``DELETE_FAILED``:
reported with the resources that blocked it). The AWS Load Balancer Controller's load balancers are
no CloudFormation resources (tagged ``elbv2.k8s.aws/cluster=<cluster>``): deleted with the Service
and waited out, since leftovers keep the VPC in use. What still bills by the hour after the stacks
are gone (clusters, NAT gateways, Elastic IPs, load balancers, tagged volumes and interfaces, the
operator's SageMaker endpoints) is listed with the command that deletes each. Every function takes
its boto3 clients as arguments (tests: moto and botocore's Stubber). Entry points:
:func:`stack_status`, :func:`wait_for_deletes`, :func:`delete_failures`, :func:`billing_leftovers`.
Docs: docs/deploy.md, "Tear down".
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from whisper_build.deploy.aws import DeployError

LBC_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
"""Tag the AWS Load Balancer Controller puts on every load balancer, target group and security group it creates."""
VPC_CNI_CLUSTER_TAG = "cluster.k8s.amazonaws.com/name"
"""Tag the Amazon VPC CNI (v1.8.0+, configured with ``CLUSTER_NAME``) puts on the network interfaces it
creates: its scoped-down IAM policy allows ``ec2:CreateNetworkInterface`` only with
``aws:RequestTag/cluster.k8s.amazonaws.com/name`` = the cluster's name (aws/amazon-vpc-cni-k8s,
``docs/iam-policy.md``, "Scope-down IAM policy per EKS cluster")."""
STACK_POLL_SECONDS = 30.0


def stack_status(cloudformation: Any, stack: str) -> str | None:
    """``StackStatus`` of ``stack``, or ``None`` when it does not exist (or is ``DELETE_COMPLETE``).

    Raises:
        botocore.exceptions.ClientError: ``DescribeStacks`` failed other than with "does not exist".
    """
    try:
        stacks = cloudformation.describe_stacks(StackName=stack)["Stacks"]
    except ClientError as err:
        if "does not exist" in err.response["Error"].get("Message", ""):
            return None
        raise
    status = stacks[0]["StackStatus"] if stacks else None
    return None if status in (None, "DELETE_COMPLETE") else status


def wait_for_deletes(
    cloudformation: Any,
    stacks: Sequence[str],
    report: Callable[[str], None],
    poll_s: float = STACK_POLL_SECONDS,
    timeout_s: float = 3600.0,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, str | None]:
    """Wait while any of ``stacks`` is ``DELETE_IN_PROGRESS``; returns every stack's status afterwards.

    Raises:
        DeployError: a deletion still runs after ``timeout_s``; names the stacks and what to do.
    """
    waited = 0.0
    while True:
        states = {stack: stack_status(cloudformation, stack) for stack in stacks}
        deleting = [stack for stack, status in states.items() if status == "DELETE_IN_PROGRESS"]
        if not deleting:
            return states
        if waited >= timeout_s:
            raise DeployError(
                f"{', '.join(deleting)} still DELETE_IN_PROGRESS after {timeout_s / 60:.0f} min. CloudFormation "
                "carries on without this command: follow it with `aws cloudformation describe-stack-events "
                f"--stack-name {deleting[0]} --region {cloudformation.meta.region_name}` (the newest events say what it waits on), then run the same "
                "make destroy again (safe to re-run: it waits for or skips what is already deleting)"
            )
        report(f"{', '.join(deleting)}: DELETE_IN_PROGRESS (an earlier run's deletion), waiting for it")
        sleep(poll_s)
        waited += poll_s


@dataclass(frozen=True)
class BlockedResource:
    """A resource CloudFormation could not delete: its stack, logical id, type, physical id and reason."""

    stack: str
    logical_id: str
    resource_type: str
    physical_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.stack}: {self.logical_id} ({self.resource_type} {self.physical_id}): {self.reason}"


def delete_failures(cloudformation: Any, stack: str) -> list[BlockedResource]:
    """The resources of ``stack`` in ``DELETE_FAILED``, with CloudFormation's reason for each."""
    blocked = []
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack):
        for resource in page["StackResourceSummaries"]:
            if resource["ResourceStatus"] == "DELETE_FAILED":
                blocked.append(
                    BlockedResource(
                        stack,
                        resource["LogicalResourceId"],
                        resource["ResourceType"],
                        resource.get("PhysicalResourceId", ""),
                        resource.get("ResourceStatusReason", "no reason given"),
                    )
                )
    return blocked


@dataclass(frozen=True)
class Leftover:
    """Something that outlived the stacks and bills (or blocks the VPC's deletion).

    ``kind``, ``id``, ``detail`` and ``delete``, the AWS CLI command that removes it.
    """

    kind: str
    id: str
    detail: str
    delete: str


def _tag_map(tags: Sequence[dict[str, str]]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in tags}


LBC_RESOURCE_TYPES = {
    "elasticloadbalancing:loadbalancer": "load-balancer",
    "elasticloadbalancing:targetgroup": "target-group",
}
"""Resource Groups Tagging API resource types of the controller's load balancers and target groups → leftover kind."""


def _still_there(elbv2: Any, kind: str, arn: str) -> bool:
    """Whether a load balancer / target group exists (the Tagging API also lists ones deleted a short while ago)."""
    try:
        if kind == "load-balancer":
            elbv2.describe_load_balancers(LoadBalancerArns=[arn])
        else:
            elbv2.describe_target_groups(TargetGroupArns=[arn])
    except ClientError as err:
        if err.response["Error"]["Code"] in ("LoadBalancerNotFound", "TargetGroupNotFound"):
            return False
        raise
    return True


def controller_load_balancers(
    tagging: Any, elbv2: Any, ec2: Any, cluster: str, region: str, kinds: Sequence[str] = tuple(LBC_RESOURCE_TYPES)
) -> list[Leftover]:
    """Load balancers, target groups and security groups the AWS Load Balancer Controller made for ``cluster``.

    Found by their tag ``elbv2.k8s.aws/cluster=<cluster>``: the Resource Groups Tagging API's
    ``GetResources`` (``aws resourcegroupstaggingapi get-resources --tag-filters
    Key=elbv2.k8s.aws/cluster,Values=<cluster>``, what the dry run prints) for load balancers and
    target groups, ``DescribeSecurityGroups`` with a tag filter for security groups; no region-wide
    listing that the controller's own deletions could race. Each load balancer or target group is
    then described on its own, and one that is gone (``LoadBalancerNotFound`` /
    ``TargetGroupNotFound``: deleted meanwhile, or listed by the Tagging API shortly after its
    deletion) is left out.

    Args:
        tagging: boto3 Resource Groups Tagging API client.
        elbv2: boto3 ELBv2 client.
        ec2: boto3 EC2 client.
        cluster: EKS cluster name.
        region: for the delete commands.
        kinds: Tagging API resource types to look at (:data:`LBC_RESOURCE_TYPES` keys); security groups
            are listed only when every kind is.

    Raises:
        botocore.exceptions.ClientError: an AWS call failed other than with "not found".
    """
    found: list[Leftover] = []
    pages = tagging.get_paginator("get_resources").paginate(
        TagFilters=[{"Key": LBC_CLUSTER_TAG, "Values": [cluster]}], ResourceTypeFilters=list(kinds)
    )
    for page in pages:
        for mapping in page["ResourceTagMappingList"]:
            arn = mapping["ResourceARN"]
            kind = "load-balancer" if ":loadbalancer/" in arn else "target-group"
            if not _still_there(elbv2, kind, arn):
                continue
            tags = _tag_map(mapping.get("Tags", []))
            owner = tags.get("service.k8s.aws/stack") or tags.get("ingress.k8s.aws/stack") or "?"
            verb = "delete-load-balancer --load-balancer-arn" if kind == "load-balancer" else (
                "delete-target-group --target-group-arn")  # fmt: skip
            found.append(
                Leftover(
                    kind,
                    arn,
                    f"made by the AWS Load Balancer Controller for {owner}",
                    f"aws elbv2 {verb} {arn} --region {region}",
                )  # fmt: skip
            )
    if set(kinds) != set(LBC_RESOURCE_TYPES):
        return found
    return found + _controller_security_groups(ec2, cluster, region)


def _controller_security_groups(ec2: Any, cluster: str, region: str) -> list[Leftover]:
    """The security groups tagged ``elbv2.k8s.aws/cluster=<cluster>`` (``DescribeSecurityGroups``)."""
    security_groups = ec2.describe_security_groups(Filters=[{"Name": f"tag:{LBC_CLUSTER_TAG}", "Values": [cluster]}])
    return [
        Leftover(
            "security-group",
            group["GroupId"],
            f"{group.get('GroupName', '')}: made by the AWS Load Balancer Controller",
            f"aws ec2 delete-security-group --group-id {group['GroupId']} --region {region}",
        )
        for group in security_groups["SecurityGroups"]
    ]


def _exists(call: Callable[[], Any], missing: tuple[str, ...]) -> Any | None:
    try:
        return call()
    except ClientError as err:
        error = err.response["Error"]
        if error["Code"] in missing or "Could not find" in error.get("Message", ""):
            return None
        raise


def _cluster_leftovers(
    client: Callable[[str], Any], cluster: str, hyperpod_cluster: str, region: str, sagemaker_endpoints: Sequence[str]
) -> list[Leftover]:
    """The HyperPod cluster, the inference operator's SageMaker endpoints and the EKS cluster, if still there."""
    found: list[Leftover] = []
    sagemaker, eks = client("sagemaker"), client("eks")
    hyperpod = _exists(lambda: sagemaker.describe_cluster(ClusterName=hyperpod_cluster), ("ResourceNotFound",))
    if hyperpod is not None:
        found.append(Leftover("hyperpod-cluster", hyperpod_cluster, f"status {hyperpod.get('ClusterStatus', '?')}",
                              f"aws sagemaker delete-cluster --cluster-name {hyperpod_cluster} --region {region}"))  # fmt: skip
    for name in sagemaker_endpoints:  # a missing endpoint: ValidationException "Could not find endpoint …"
        endpoint = _exists(functools.partial(sagemaker.describe_endpoint, EndpointName=name), ())
        if endpoint is not None:
            found.append(Leftover("sagemaker-endpoint", name, f"status {endpoint.get('EndpointStatus', '?')}, "
                                  "registered by the HyperPod inference operator",
                                  f"aws sagemaker delete-endpoint --endpoint-name {name} --region {region}"))  # fmt: skip
    control_plane = _exists(lambda: eks.describe_cluster(name=cluster), ("ResourceNotFoundException",))
    if control_plane is not None:
        found.append(Leftover("eks-cluster", cluster, f"status {control_plane['cluster'].get('status', '?')}",
                              f"aws eks delete-cluster --name {cluster} --region {region}"))  # fmt: skip
    return found


def billing_leftovers(
    client: Callable[[str], Any],
    project_tag: tuple[str, str],
    cluster: str,
    hyperpod_cluster: str,
    region: str,
    sagemaker_endpoints: Sequence[str] = (),
) -> list[Leftover]:
    """What of the deployment still bills by the hour (or blocks the VPC) after the stacks are deleted.

    Args:
        client: boto3 client factory by service name, in the deployment's region.
        project_tag: ``(key, value)`` every resource of the deployment carries (``project``, project name).
        cluster: EKS cluster name.
        hyperpod_cluster: HyperPod cluster name.
        region: for the delete commands.
        sagemaker_endpoints: SageMaker endpoints the HyperPod inference operator registered
            (``serving.target: inference_operator``; ``settings.names.sagemaker_endpoint_names``).

    Raises:
        botocore.exceptions.ClientError: an AWS call failed other than with "not found" (e.g. access denied).
        botocore.exceptions.BotoCoreError: no credentials or no connection.
    """
    ec2 = client("ec2")
    found = _cluster_leftovers(client, cluster, hyperpod_cluster, region, sagemaker_endpoints)
    tagged = [{"Name": f"tag:{project_tag[0]}", "Values": [project_tag[1]]}]
    for gateway in ec2.describe_nat_gateways(Filter=tagged)["NatGateways"]:
        if gateway["State"] not in ("deleted", "deleting", "failed"):
            found.append(Leftover("nat-gateway", gateway["NatGatewayId"], f"state {gateway['State']}",
                                  f"aws ec2 delete-nat-gateway --nat-gateway-id {gateway['NatGatewayId']} "
                                  f"--region {region}"))  # fmt: skip
    for address in ec2.describe_addresses(Filters=tagged)["Addresses"]:
        found.append(Leftover("elastic-ip", address["AllocationId"], address.get("PublicIp", ""),
                              f"aws ec2 release-address --allocation-id {address['AllocationId']} --region {region}"))  # fmt: skip
    found += controller_load_balancers(client("resourcegroupstaggingapi"), client("elbv2"), ec2, cluster, region)
    volumes = ec2.describe_volumes(Filters=[*tagged, {"Name": "status", "Values": ["available"]}])
    for volume in volumes["Volumes"]:
        found.append(Leftover("ebs-volume", volume["VolumeId"], f"{volume['Size']} GiB, unattached",
                              f"aws ec2 delete-volume --volume-id {volume['VolumeId']} --region {region}"))  # fmt: skip
    for tag_key, tag_value in ((project_tag[0], project_tag[1]), (VPC_CNI_CLUSTER_TAG, cluster)):
        interfaces = ec2.describe_network_interfaces(Filters=[{"Name": f"tag:{tag_key}", "Values": [tag_value]}])
        for interface in interfaces["NetworkInterfaces"]:
            found.append(Leftover("network-interface", interface["NetworkInterfaceId"],
                                  f"{interface.get('Status', '?')}: {interface.get('Description', '')}",
                                  f"aws ec2 delete-network-interface --network-interface-id "
                                  f"{interface['NetworkInterfaceId']} --region {region}"))  # fmt: skip
    unique: dict[tuple[str, str], Leftover] = {(item.kind, item.id): item for item in found}
    return list(unique.values())


def billing_check_commands(
    project: str, cluster: str, hyperpod_cluster: str, region: str, sagemaker_endpoints: Sequence[str] = ()
) -> list[str]:
    """The AWS CLI listing that :func:`billing_leftovers` does with boto3 (docs/deploy.md, Tear down)."""
    tag = f"Name=tag:project,Values={project}"
    return [
        f"aws sagemaker describe-cluster --cluster-name {hyperpod_cluster} --region {region}   # expect ResourceNotFound",
        *(
            f"aws sagemaker describe-endpoint --endpoint-name {name} --region {region}   # expect Could not find endpoint"
            for name in sagemaker_endpoints
        ),  # fmt: skip
        f"aws eks describe-cluster --name {cluster} --region {region}                           # expect ResourceNotFoundException",
        f"aws ec2 describe-nat-gateways --filter {tag} --region {region} --query 'NatGateways[?State!=`deleted`]'",
        f"aws ec2 describe-addresses --filters {tag} --region {region}",
        f"aws resourcegroupstaggingapi get-resources --tag-filters Key={LBC_CLUSTER_TAG},Values={cluster} "
        f"--region {region}   # load balancers, target groups, security groups of the LB controller",
        f"aws ec2 describe-volumes --filters {tag} Name=status,Values=available --region {region}",
        f"aws ec2 describe-network-interfaces --filters Name=tag:{VPC_CNI_CLUSTER_TAG},Values={cluster} --region {region}",
    ]


def wait_for_no_load_balancers(
    tagging: Any,
    elbv2: Any,
    ec2: Any,
    cluster: str,
    region: str,
    report: Callable[[str], None],
    poll_s: float = 15.0,
    timeout_s: float = 600.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Leftover]:
    """Poll until the controller's load balancers of ``cluster`` are gone; returns what is left after ``timeout_s``.

    Only load balancers are waited for: the controller deletes their target groups and security
    groups right after, and the caller lists those too.

    Raises:
        botocore.exceptions.ClientError: an AWS call failed other than with "not found".
    """
    waited = 0.0
    while True:
        left = controller_load_balancers(tagging, elbv2, ec2, cluster, region, ["elasticloadbalancing:loadbalancer"])
        if not left or waited >= timeout_s:
            return left
        report(f"waiting for the AWS Load Balancer Controller to delete {len(left)} load balancer(s)")
        sleep(poll_s)
        waited += poll_s
