"""cdk-nag (v3) registration and acknowledgements.

cdk-nag 3 plugs into CDK's policy-validation framework: packs are registered with
``Validations.of(scope).add_plugins(...)``; a finding is acknowledged with
``Validations.of(construct).acknowledge(Acknowledgment(id=..., reason=...))``, one finding id at a
time (cdk-nag 3.0.2 README, "Migrating from v2"). Unacknowledged findings make ``app.synth()`` fail
with ``ValidationFailed``; all findings are in ``policy-validation-report.json`` of the cloud assembly.

Finding ids embed the offending value the way cdk-nag prints it (``Ref`` → ``<AWS::AccountId>``,
``Fn::GetAtt`` → ``<Logical.Attr>``, ``Fn::Join`` concatenated, ``Fn::Sub`` ``${X}`` → ``<X>``, anything else compact JSON);
:func:`nag_string` renders a value the same way so acknowledgements follow the code instead of
being copied from a report.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from cdk_nag import AwsSolutionsChecks
from constructs import Construct, IConstruct

MIN_REASON_LENGTH = 20
"""Acknowledgements must explain themselves; a one-word reason is rejected."""


def enable_nag(scope: Construct) -> None:
    """Run the AwsSolutions pack over every stack under ``scope`` (an ``App`` or a ``Stage``)."""
    Validations.of(scope).add_plugins(AwsSolutionsChecks(scope))


def acknowledge(construct: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge one cdk-nag finding on ``construct`` (and its children).

    Args:
        construct: The resource (or a construct containing it) the finding is reported on.
        rule_id: Finding id, e.g. ``AwsSolutions-L1`` or ``AwsSolutions-IAM5[Resource::*]``.
        reason: Why the finding is accepted, specific to this resource.

    Raises:
        ValueError: ``reason`` is shorter than :data:`MIN_REASON_LENGTH` characters.
    """
    if len(reason.strip()) < MIN_REASON_LENGTH:
        raise ValueError(f"cdk-nag acknowledgement of {rule_id} needs a specific reason, got '{reason}'")
    Validations.of(construct).acknowledge(Acknowledgment(id=rule_id, reason=reason))


def nag_string(value: Any) -> str:
    """Render a resolved CloudFormation value as cdk-nag prints it inside a finding id."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return f"<{argument}>"
        if function == "Fn::GetAtt":
            return f"<{argument[0]}.{argument[1]}>"
        if function == "Fn::Join":
            return argument[0].join(nag_string(part) for part in argument[1])
        if function == "Fn::ImportValue":
            return nag_string(argument)
        if function == "Fn::Sub" and isinstance(argument, str):
            return re.sub(r"\$\{([^}!]+)\}", r"<\1>", argument)
    return json.dumps(value, separators=(",", ":"))


def acknowledge_resource(policy: IConstruct, resource: str, reason: str) -> None:
    """Acknowledge the wildcard finding (AwsSolutions-IAM5) of one resource ARN of ``policy``.

    Args:
        policy: The ``iam.Policy`` (or role) whose statement lists ``resource``.
        resource: The ARN exactly as passed to the ``PolicyStatement`` (tokens allowed).
        reason: Why a wildcard is needed there.
    """
    rendered = nag_string(Stack.of(policy).resolve(resource))
    acknowledge(policy, f"AwsSolutions-IAM5[Resource::{rendered}]", reason)


def acknowledge_managed_policies(role: iam.IRole, reason: str) -> None:
    """Acknowledge AwsSolutions-IAM4 for every AWS managed policy attached to ``role`` now.

    Use for roles whose managed policies are prescribed by AWS (EKS cluster and node roles,
    CDK-internal Lambda roles); ``reason`` says who prescribes them.
    """
    cfn_role = role.node.default_child
    assert isinstance(cfn_role, iam.CfnRole), f"{role.node.path} has no CfnRole"
    arns = Stack.of(role).resolve(cfn_role.managed_policy_arns) or []
    for arn in arns:
        acknowledge(role, f"AwsSolutions-IAM4[Policy::{nag_string(arn)}]", reason)


def acknowledge_policy_wildcards(role: iam.IRole, reason: str) -> None:
    """Acknowledge every wildcard action and resource (AwsSolutions-IAM5) of ``role``'s default policy.

    Only for roles of CDK-internal handlers (custom-resource Lambdas) whose statements aws-cdk-lib
    writes; our own policies acknowledge each resource with its own reason (:func:`acknowledge_resource`).
    """
    policy = role.node.try_find_child("DefaultPolicy")
    if policy is None:
        return
    acknowledge_document_wildcards(policy, reason)


def acknowledge_document_wildcards(policy: IConstruct, reason: str) -> None:
    """Acknowledge every wildcard action and resource (AwsSolutions-IAM5) of one ``iam.Policy`` construct.

    For policies aws-cdk-lib writes itself, e.g. the ``PolicyDocument`` a CodeBuild project in a VPC
    gets for its network interfaces; ``reason`` says which.
    """
    cfn_policy = policy.node.default_child
    assert isinstance(cfn_policy, iam.CfnPolicy), f"{policy.node.path} has no CfnPolicy"
    document = Stack.of(policy).resolve(cfn_policy.policy_document)
    for finding in sorted(_wildcard_findings(document.get("Statement", []))):
        acknowledge(policy, f"AwsSolutions-IAM5[{finding}]", reason)


def _wildcard_findings(statements: Iterable[dict[str, Any]]) -> set[str]:
    findings: set[str] = set()
    for statement in statements:
        for key, kind in (("Action", "Action"), ("Resource", "Resource")):
            values = statement.get(key, [])
            for value in values if isinstance(values, list) else [values]:
                rendered = nag_string(value)
                if "*" in rendered:
                    findings.add(f"{kind}::{rendered}")
    return findings
