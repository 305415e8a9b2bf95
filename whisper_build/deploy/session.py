"""What a deploy or destroy step may ask of AWS: the seam between the plan and the runner's session.

The plan (:mod:`.deploy_plan`, :mod:`.destroy_plan`, :mod:`.ctranslate2_plan`) builds steps whose
AWS actions, skip checks and diagnoses are functions of a :class:`DeploySession`; planning calls
none of them. The runner passes :class:`whisper_build.deploy.aws_session.AwsSession` (boto3) in a
real run and nothing in a dry run; tests pass recording stand-ins.
Docs: docs/deploy.md, "Deploy".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class DeploySession(Protocol):
    """The calls steps make.

    Each raises :class:`whisper_build.deploy.aws.DeployError` (or a botocore error, which the runner
    reports with how to resume) when AWS says no.
    """

    def image_exists(self, repository: str, tag: str) -> bool:
        """Whether ``repository:tag`` is in ECR (skip check of the chart and serving-image steps)."""
        ...

    def run_builds(self, projects: Sequence[str]) -> None:
        """Start the CodeBuild projects (or wait on builds already running) until all finish."""
        ...

    def grant_kubectl(self, cluster: str, namespace: str) -> None:
        """Wait for the EKS cluster, then give the caller an access entry on ``namespace``."""
        ...

    def mig_layout_changes(self) -> dict[str, str]:
        """GPU group → ``<deployed>-><new>`` MIG layout, for each group step ``stacks`` would repartition."""
        ...

    def drain_mig_changes(self) -> None:
        """Drain every group of :meth:`mig_layout_changes` (pods gone before its nodes repartition)."""
        ...

    def drained_groups(self) -> list[str]:
        """Groups an earlier drain left at 0 (their Deployments carry the drain marker)."""
        ...

    def resume_drained_groups(self) -> None:
        """Scale every drained group back and let KEDA autoscale it again."""
        ...

    def check_capacity(self) -> None:
        """Step ``capacity``: raise listing every instance type not offered and every quota too small."""
        ...

    def object_exists(self, bucket: str, key: str) -> bool:
        """Whether ``s3://bucket/key`` exists (skip check of ``make publish-ctranslate2``)."""
        ...

    def storage_failure_report(self) -> list[str]:
        """Why step ``storage`` failed and the ways out, one line each."""
        ...

    def pod_report(self) -> list[str]:
        """Why the serving pods are not ready, one line per pod."""
        ...

    def capacity_progress(self) -> list[str]:
        """HyperPod's nodes per instance group and type with each group's newest error (the serving wait)."""
        ...

    def cluster_active(self) -> bool:
        """Whether the EKS cluster exists and is ``ACTIVE``."""
        ...

    def wait_load_balancers_gone(self) -> None:
        """Wait for the AWS Load Balancer Controller's load balancers to go; raise naming any left."""
        ...

    def stacks_gone(self) -> bool:
        """Whether no stack of the config exists."""
        ...

    def wait_stack_deletes(self) -> None:
        """Wait for stack deletions an earlier run started (``DELETE_IN_PROGRESS``)."""
        ...

    def stack_failure_report(self) -> list[str]:
        """Each remaining stack's status and the resources that blocked its deletion, one line each."""
        ...

    def check_stacks_gone(self) -> None:
        """Raise naming every stack still there after ``cdk destroy``."""
        ...

    def check_billing(self) -> None:
        """Step ``billing``: raise listing whatever still bills by the hour, with its delete command."""
        ...

    def report_retained(self, purge: bool) -> None:
        """Print what outlives the stacks and how to delete it; delete it when ``purge``."""
        ...
