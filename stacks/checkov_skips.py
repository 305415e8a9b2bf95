"""checkov skips, each on one resource with its reason (the checkov twin of :mod:`stacks.nag`).

checkov reads a CloudFormation resource's ``Metadata.checkov.skip`` list of ``{"id", "comment"}``
and reports the check as skipped with that comment (checkov docs, "Suppressing/Skipping",
CloudFormation). Checks skipped for every template are in :data:`GLOBAL_SKIPS` with their reasons;
everything else is skipped per resource with :func:`skip_check`, next to the code that creates it.
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

from aws_cdk import CfnResource
from constructs import IConstruct

MIN_REASON_LENGTH = 20

GLOBAL_SKIPS: dict[str, str] = {
    "CKV_AWS_115": "every Lambda function in the templates is a CloudFormation custom-resource handler "
    "(aws-cdk-lib's kubectl/OIDC/BucketDeployment/CfnUtils providers, the Grafana provisioner) that runs "
    "only during deployments, once per resource change; reserved concurrency would only take capacity "
    "from the account's pool",
    "CKV_AWS_116": "custom-resource handlers are invoked synchronously by CloudFormation, which reports a "
    "failure as a failed deployment; a dead-letter queue only receives asynchronous invocations",
    "CKV_AWS_117": "aws-cdk-lib's custom-resource handlers (OIDC provider, BucketDeployment, CfnUtils, "
    "Provider framework) and the Grafana provisioner call only public AWS/Grafana APIs; the kubectl "
    "handler, which talks to the private EKS endpoint, is in the VPC",
    "CKV_AWS_173": "the custom-resource handlers' environment holds ARNs and flags written by aws-cdk-lib, "
    "no secrets; Lambda encrypts environment variables at rest with an AWS-managed key",
    "CKV_AWS_45": "false positive on aws-cdk-lib's Provider framework handler: its environment holds the "
    "user handler's function ARN (USER_ON_EVENT_FUNCTION_ARN), not a secret",
}
"""Check id → why it does not apply to any resource this project synthesizes."""


def skip_check(construct: IConstruct, check_id: str, reason: str) -> None:
    """Skip one checkov check on the CloudFormation resource of ``construct``.

    Args:
        construct: A ``CfnResource`` or an L2 construct whose ``default_child`` is one.
        check_id: e.g. ``CKV_AWS_111``.
        reason: Why the finding is accepted, specific to this resource.

    Raises:
        ValueError: ``reason`` is shorter than :data:`MIN_REASON_LENGTH` characters, or ``construct``
            has no CloudFormation resource.
    """
    if len(reason.strip()) < MIN_REASON_LENGTH:
        raise ValueError(f"checkov skip of {check_id} needs a specific reason, got '{reason}'")
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise ValueError(f"{construct.node.path} has no CloudFormation resource to skip {check_id} on")
    metadata = resource.get_metadata("checkov") or {}
    skips = [*metadata.get("skip", []), {"id": check_id, "comment": reason}]
    resource.add_metadata("checkov", {**metadata, "skip": skips})
