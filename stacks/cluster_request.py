"""A synthesized ``AWS::SageMaker::Cluster`` checked as the ``CreateCluster`` request it becomes, offline.

Each cluster resource is translated into ``CreateCluster`` parameters (CloudFormation intrinsics such as
``Fn::GetAtt`` become placeholders of the member's type) and put through botocore's own parameter
validation with the pinned SageMaker service model: required members, unknown members, types and
minimums. botocore checks neither maximums nor enums nor the mutual exclusion of ``InstanceType`` and
``InstanceRequirements``, so those rules are read from the same model here: the ``ClusterInstanceTypes``
length bounds, no duplicates, the ``ClusterInstanceType`` enum, the XOR, and ``NodeProvisioningMode:
Continuous`` for a flexible group. No credentials, no network. docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

import functools
from typing import Any

import botocore.loaders
from botocore.exceptions import ParamValidationError
from botocore.model import ListShape, MapShape, OperationModel, ServiceModel, Shape, StringShape, StructureShape
from botocore.validate import validate_parameters

PLACEHOLDER = "arn:aws:sagemaker:us-east-1:123456789012:cloudformation-intrinsic-placeholder"
"""What a ``Ref``/``Fn::*`` string becomes: long enough for every string minimum of the model."""


@functools.lru_cache(maxsize=1)
def create_cluster_model() -> OperationModel:
    """``CreateCluster`` of the installed (pinned) botocore's SageMaker model."""
    # the loader alone, not a Session: a Session reads the AWS config, and a missing AWS_PROFILE would fail synthesis
    service = botocore.loaders.create_loader().load_service_model("sagemaker", "service-2")
    return ServiceModel(service, "sagemaker").operation_model("CreateCluster")


def request_shape() -> StructureShape:
    """The ``CreateClusterRequest`` shape."""
    shape = create_cluster_model().input_shape
    assert shape is not None, "CreateCluster has an input shape"
    return shape


def _group_members() -> dict[str, Any]:
    groups = request_shape().members["InstanceGroups"]
    assert isinstance(groups, ListShape)
    member = groups.member
    assert isinstance(member, StructureShape)
    return dict(member.members)


def _is_intrinsic(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and next(iter(value)).startswith(("Fn::", "Ref"))


def to_request(value: Any, shape: Shape) -> Any:
    """CloudFormation property value → API parameter of ``shape`` (intrinsics → placeholders).

    Unknown members are kept, so that botocore reports them.
    """
    if _is_intrinsic(value):
        if isinstance(shape, ListShape):
            return [to_request(value, shape.member)]
        return PLACEHOLDER if isinstance(shape, StringShape) else value
    if isinstance(shape, StructureShape) and isinstance(value, dict):
        return {k: to_request(v, shape.members[k]) if k in shape.members else v for k, v in value.items()}
    if isinstance(shape, ListShape) and isinstance(value, list):
        return [to_request(item, shape.member) for item in value]
    if isinstance(shape, MapShape) and isinstance(value, dict):
        return {k: to_request(v, shape.value) for k, v in value.items()}
    if shape.type_name in ("integer", "long") and isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _group_problems(group: dict[str, Any], index: int, continuous: bool) -> list[str]:
    members = _group_members()
    enum = set(members["InstanceType"].enum)
    types_shape = members["InstanceRequirements"].members["InstanceTypes"]
    low, high = types_shape.metadata.get("min", 0), types_shape.metadata.get("max", 10**6)
    where = f"InstanceGroups[{index}] ({group.get('InstanceGroupName')})"
    problems = []
    has_type, has_list = "InstanceType" in group, "InstanceRequirements" in group
    if has_type == has_list:
        problems.append(f"{where}: exactly one of InstanceType and InstanceRequirements must be set")
    listed = group.get("InstanceRequirements", {}).get("InstanceTypes", [])
    if has_list and not low <= len(listed) <= high:
        problems.append(f"{where}: InstanceRequirements.InstanceTypes has {len(listed)} entries, allowed {low}–{high}")
    if len(set(listed)) != len(listed):
        problems.append(f"{where}: InstanceRequirements.InstanceTypes has duplicates")
    for name in [group.get("InstanceType"), *listed]:
        if name is not None and name not in enum:
            problems.append(f"{where}: {name} is not in the ClusterInstanceType enum")
    if has_list and not continuous:
        problems.append(f"{where}: a flexible instance group needs NodeProvisioningMode Continuous")
    return problems


def request_problems(properties: dict[str, Any]) -> list[str]:
    """Everything wrong with one cluster resource's ``Properties`` as a ``CreateCluster`` request.

    Returns:
        One line per problem: botocore's validation report, then the model-derived rules; empty when valid.
    """
    shape = request_shape()
    request = to_request(properties, shape)
    problems = []
    try:
        validate_parameters(request, shape)
    except ParamValidationError as err:
        problems += [line.strip() for line in str(err).splitlines()[1:] if line.strip()]
    continuous = properties.get("NodeProvisioningMode") == "Continuous"
    for index, group in enumerate(properties.get("InstanceGroups", [])):
        problems += _group_problems(group, index, continuous)
    return problems


def template_problems(template: dict[str, Any]) -> list[str]:
    """:func:`request_problems` of every ``AWS::SageMaker::Cluster`` in a template, each prefixed by its logical id."""
    return [
        f"{logical_id}: {problem}"
        for logical_id, resource in template.get("Resources", {}).items()
        if resource.get("Type") == "AWS::SageMaker::Cluster"
        for problem in request_problems(resource.get("Properties", {}))
    ]
