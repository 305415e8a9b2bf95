"""The EC2 instance type of the EKS managed system node group, checked like the GPU types.

Same catalog as :func:`settings.gpu_catalog.hyperpod_instance_types`: the instance-type enum of a
service model bundled with botocore (here EC2's ``InstanceType``), read offline. A typo such as
``m6i.larg`` is refused with "did you mean" instead of failing the node group at deploy time.

The node group runs the ``AL2023_X86_64_STANDARD`` AMI (``stacks/cluster_stack.py``), so Arm types
are refused too: AWS Graviton families carry ``g`` among the attributes after the generation digit
(``m7g``, ``c7gn``, ``im4gn``), plus the first-generation ``a1`` (Amazon EC2 "Instance type naming
conventions", https://docs.aws.amazon.com/ec2/latest/instancetypes/instance-type-names.html).
Docs: docs/deploy.md, "Stacks".
"""

from __future__ import annotations

import difflib
import functools
import re

from settings import regions
from settings.gpu_catalog import ec2_instance_type

FIELD = "cluster.system_node_instance_type"
_FAMILY = re.compile(r"^(?P<series>[a-z]+)(?P<generation>\d+)(?P<attributes>[a-z-]*)$")


@functools.lru_cache(maxsize=1)
def ec2_instance_types() -> frozenset[str]:
    """EC2 instance types botocore's EC2 service model lists (``InstanceType`` enum), e.g. ``m6i.large``."""
    from botocore.model import StringShape

    shape = regions.service_model("ec2").shape_for("InstanceType")
    assert isinstance(shape, StringShape), "botocore's EC2 InstanceType is a string enum"
    return frozenset(shape.enum)


def is_arm(instance_type: str) -> bool:
    """True for AWS Graviton (Arm64) types: ``m7g.large``, ``c6gn.xlarge``, ``a1.large``."""
    family = instance_type.split(".", 1)[0]
    if family == "a1":
        return True
    match = _FAMILY.match(family)
    return bool(match and "g" in match.group("attributes"))


def check_system_node_type(value: str) -> str:
    """Return ``value`` when it is an x86_64 EC2 type botocore knows.

    Raises:
        ValueError: a SageMaker ``ml.`` type, an unknown type (with close matches), or an Arm type.
    """
    if (ec2 := ec2_instance_type(value)) != value:
        raise ValueError(
            f"'{value}' is a SageMaker type; the system nodes are an EKS managed node group of EC2 instances: "
            f"write the EC2 type, e.g. {ec2}"
        )
    known = ec2_instance_types()
    if value not in known:
        close = difflib.get_close_matches(value, sorted(known), n=3, cutoff=0.8)
        hint = f"; did you mean {' or '.join(close)}?" if close else " (e.g. m6i.large)"
        raise ValueError(f"unknown EC2 instance type '{value}' (botocore's EC2 instance type list){hint}")
    if is_arm(value):
        raise ValueError(
            f"'{value}' is an Arm (AWS Graviton) type, but the system node group runs the x86_64 AL2023 AMI; "
            "use an x86_64 type such as m6i.large or m7i.large"
        )
    return value
