"""The boto3 side of ``make deploy`` / ``make destroy``: :class:`AwsSession`, the runner's session.

It implements :class:`whisper_build.deploy.session.DeploySession` (what the steps may call) with
the clients of the config's region; the AWS calls themselves are :mod:`.aws`, :mod:`.capacity`,
:mod:`.retained` and :mod:`.teardown`, each tested against moto or botocore's Stubber.
Docs: docs/deploy.md, "Deploy".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from settings import DeploymentConfig, names
from whisper_build.deploy import aws, capacity, cluster_progress, mig_drain, pods, retained, teardown
from whisper_build.deploy.kube import kubectl_output
from whisper_build.deploy.retained import ACCESS_LOG_WHY


class AwsSession:
    """The boto3 side of the journey: clients for the config's region and the caller's identity.

    Args:
        config: The deployment config (region, names).
        account: The caller's account id.
        caller_arn: The caller's ARN (``sts:GetCallerIdentity``).
        client: ``boto3.client``-like factory ``client(service_name, region_name=...)``.
        resource: ``boto3.resource``-like factory (S3 bucket deletion).
        log: progress line printer.
        kubectl: runs a kubectl argv and returns its stdout (pod diagnosis); raises on failure.
    """

    def __init__(
        self,
        config: DeploymentConfig,
        account: str,
        caller_arn: str,
        client: Callable[..., Any],
        resource: Callable[..., Any],
        log: Callable[[str], None],
        kubectl: Callable[[Sequence[str]], str] | None = None,
    ) -> None:
        self.config = config
        self.account = account
        self.caller_arn = caller_arn
        self._client = client
        self._resource = resource
        self.log = log
        self.kubectl = kubectl or kubectl_output

    def client(self, service: str) -> Any:
        """A boto3 client of ``service`` in the config's region."""
        return self._client(service, region_name=self.config.region)

    def image_exists(self, repository: str, tag: str) -> bool:
        """Whether ``repository:tag`` is in ECR."""
        return aws.image_exists(self.client("ecr"), repository, tag)

    def run_builds(self, projects: Sequence[str]) -> None:
        """Start the CodeBuild projects and wait for all (progress lines as phases change)."""
        aws.run_builds(self.client("codebuild"), projects, lambda line: self.log(f"    {line}"))

    def grant_kubectl(self, cluster: str, namespace: str) -> None:
        """Wait for the cluster, then give the caller's IAM principal admin rights in ``namespace``."""
        eks = self.client("eks")
        aws.wait_cluster_active(eks, cluster)
        principal = aws.access_entry_principal(self.caller_arn, self.client("iam"))
        created = aws.ensure_access_entry(eks, cluster, principal, namespace)
        self.log(f"    access entry for {principal}: {'created' if created else 'already there'}")

    def mig_layout_changes(self) -> dict[str, str]:
        """Groups whose deployed ``nvidia.com/mig.config`` differs from the config's; none before the first create."""
        try:
            described = self.client("sagemaker").describe_cluster(ClusterName=names.hyperpod_cluster_name(self.config))
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ResourceNotFound":
                return {}
            raise
        return mig_drain.layout_changes(self.config, described.get("InstanceGroups", []))

    def drain_mig_changes(self) -> None:
        """Pause, scale to 0 and wait out the pods of every group whose MIG layout step ``stacks`` changes."""
        groups = {group.name: group for group in self.config.gpu_groups}
        for name, change in self.mig_layout_changes().items():
            for argv in mig_drain.drain_argvs(self.config, self.account, groups[name], change):
                self.kubectl(argv)
            self.log(f"    {name}: no pods left, MIG layout {change} can be applied")

    def drained_groups(self) -> list[str]:
        """Groups whose Deployment carries the drain marker."""
        return mig_drain.drained_groups(self.kubectl(mig_drain.list_deployments_argv(self.config, self.account)))

    def resume_drained_groups(self) -> None:
        """Scale every drained group back to its baseline and un-pause its ScaledObject."""
        groups = {group.name: group for group in self.config.gpu_groups}
        for name in self.drained_groups():
            if name not in groups:
                continue  # a group removed from the config: step stacks deleted its Deployment
            for argv in mig_drain.resume_argvs(self.config, self.account, groups[name]):
                self.kubectl(argv)
            self.log(f"    {name}: resumed ({groups[name].baseline_replicas} pod(s), then autoscaled)")

    def check_capacity(self) -> None:
        """Step ``capacity``: raise :class:`aws.DeployError` listing every missing offering or quota.

        Quotas are compared with this config's needs alone (account-wide quotas: :mod:`.capacity`).

        Raises:
            aws.DeployError: an instance type is not offered or a quota is too small.
        """
        problems = capacity.capacity_problems(self.client("ec2"), self.client("service-quotas"), self.config)
        if problems:
            raise aws.DeployError(
                f"this account cannot run the config in {self.config.region} yet:\n  - " + "\n  - ".join(problems)
            )
        self.log(
            "    instance types offered and quotas sufficient for this config alone (the SageMaker 'for cluster "
            "usage' quotas are account-wide: instances other HyperPod clusters of the account use are not "
            "subtracted)"
        )

    def object_exists(self, bucket: str, key: str) -> bool:
        """Whether ``s3://bucket/key`` exists (``HeadObject``; 404 or a missing bucket → ``False``)."""
        try:
            self.client("s3").head_object(Bucket=bucket, Key=key)
        except ClientError as err:
            if err.response["Error"]["Code"] in ("404", "NoSuchKey", "NoSuchBucket", "NotFound"):
                return False
            raise
        return True

    def storage_failure_report(self) -> list[str]:
        """Why step ``storage`` failed (the stack's status and failed events) and the ways out.

        A failed import of the retained buckets/repositories (``--import-existing-resources``, not
        verified against AWS) is the case this is for; docs/deploy.md, "If the storage import fails".
        """
        config, region = self.config, self.config.region
        stack = names.stack_name(config, "Storage")
        cloudformation = self.client("cloudformation")
        status = teardown.stack_status(cloudformation, stack)
        lines = [f"{stack}: {status or 'does not exist'}"]
        lines += [f"  {event}" for event in aws.failed_events(cloudformation, stack)]
        kept = [item for item in self.retained() if item.kind in ("s3-bucket", "ecr-repository")]
        kept = [item for item in kept if item.why != ACCESS_LOG_WHY]
        if status is not None and status.endswith(("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "CREATE_FAILED")):
            lines.append(
                f"first clean the failed stack (its buckets and repositories are retained, nothing is lost): "
                f"aws cloudformation delete-stack --stack-name {stack} --region {region} && "
                f"aws cloudformation wait stack-delete-complete --stack-name {stack} --region {region}"
            )
        if kept:
            lines.append("then one of (docs/deploy.md, 'If the storage import fails'; what each loses is said there):")
            lines.append("  a) keep everything: fix the cause the events name and run make deploy again")
            lines.append(
                "  b) delete only the retained buckets and repositories below (loses the engines, the CTranslate2 "
                "conversion, images and chart; the next deploy rebuilds them), then make deploy:"
            )
            lines += [f"       {command}" for item in kept for command in aws.delete_commands(item, region)]
            lines.append(
                "  c) deploy under a new project_name in the config: nothing is deleted, everything is built again "
                "under new names; the old resources bill for storage until make destroy PURGE=1 with the old config"
            )
        return lines

    def pod_report(self) -> list[str]:
        """Why the serving pods are not ready (:mod:`.pods`), one line per pod, after HyperPod's side.

        HyperPod's side (:mod:`.cluster_progress`): each instance group's nodes per instance type and the
        cluster's error events, so a capacity shortage is named; a failed read is one line, never an error.
        """
        nodes = cluster_progress.safe_progress(self.client("sagemaker"), names.hyperpod_cluster_name(self.config))
        return [*nodes, *pods.report(self.config, self.account, self.kubectl)]

    def capacity_progress(self) -> list[str]:
        """:func:`.cluster_progress.wait_progress` of this config's HyperPod cluster (never raises an AWS error)."""
        return cluster_progress.wait_progress(self.client("sagemaker"), names.hyperpod_cluster_name(self.config))

    def _stacks(self) -> list[str]:
        return [names.stack_name(self.config, stack) for stack in names.stacks(self.config)]

    def cluster_active(self) -> bool:
        """Whether the EKS cluster exists and is ``ACTIVE`` (destroy's endpoint step needs kubectl access).

        Raises:
            botocore.exceptions.ClientError: ``DescribeCluster`` failed other than with
                ``ResourceNotFoundException`` (e.g. expired credentials; the runner turns it into a
                :class:`aws.DeployError`).
        """
        try:
            status: str = self.client("eks").describe_cluster(name=names.cluster_name(self.config))["cluster"]["status"]
        except ClientError as err:
            if err.response["Error"]["Code"] == "ResourceNotFoundException":
                return False
            raise
        return status == "ACTIVE"

    def wait_load_balancers_gone(self) -> None:
        """Wait for the controller's load balancers to go; raise naming any left after 10 min.

        Raises:
            aws.DeployError: load balancers still there after 10 min, each with its delete command.
        """
        left = teardown.wait_for_no_load_balancers(
            self.client("resourcegroupstaggingapi"), self.client("elbv2"), self.client("ec2"),
            names.cluster_name(self.config), self.config.region, lambda line: self.log(f"    {line}"),
        )  # fmt: skip
        if left:
            raise aws.DeployError(
                "the AWS Load Balancer Controller did not delete these within 10 min (they would block the VPC's "
                "deletion): " + "; ".join(f"{item.id}: {item.delete}" for item in left)
            )

    def stacks_gone(self) -> bool:
        """Whether no stack of the config exists."""
        cloudformation = self.client("cloudformation")
        return all(teardown.stack_status(cloudformation, stack) is None for stack in self._stacks())

    def wait_stack_deletes(self) -> None:
        """Wait for deletions an earlier run started (``DELETE_IN_PROGRESS``).

        Raises:
            aws.DeployError: a deletion still runs after an hour (:func:`teardown.wait_for_deletes`).
        """
        states = teardown.wait_for_deletes(self.client("cloudformation"), self._stacks(),
                                           lambda line: self.log(f"    {line}"))  # fmt: skip
        left = {stack: status for stack, status in states.items() if status}
        self.log("    stacks: " + (", ".join(f"{k} {v}" for k, v in left.items()) or "none left"))

    def stack_failure_report(self) -> list[str]:
        """Each remaining stack's status and the resources that blocked its deletion, with what to do."""
        cloudformation = self.client("cloudformation")
        lines = []
        for stack in self._stacks():
            status = teardown.stack_status(cloudformation, stack)
            if status is None:
                continue
            lines.append(f"{stack}: {status}")
            lines += [f"  blocked by {blocked}" for blocked in teardown.delete_failures(cloudformation, stack)]
        if any("AWS::EC2::" in line for line in lines):
            lines.append(
                "a VPC, subnet or security group that will not delete is usually held by a load balancer or network "
                "interface outside CloudFormation: the billing step's commands list them (docs/deploy.md, Tear down)"
            )
            lines += [
                "  " + item.delete
                for item in teardown.controller_load_balancers(
                    self.client("resourcegroupstaggingapi"),
                    self.client("elbv2"),
                    self.client("ec2"),
                    names.cluster_name(self.config),
                    self.config.region,
                )
            ]
        return lines

    def check_stacks_gone(self) -> None:
        """Raise naming every stack still there after ``cdk destroy`` (and what blocked it)."""
        cloudformation = self.client("cloudformation")
        left = [stack for stack in self._stacks() if teardown.stack_status(cloudformation, stack) is not None]
        if left:
            raise aws.DeployError(f"stacks left after cdk destroy: {', '.join(left)} (why: the lines above)")

    def check_billing(self) -> None:
        """Step ``billing``: raise listing whatever still bills by the hour, with the command that deletes it."""
        config = self.config
        found = teardown.billing_leftovers(
            self.client, (names.PROJECT_TAG, config.project_name), names.cluster_name(config),
            names.hyperpod_cluster_name(config), config.region, names.operator_endpoint_names(config),
        )  # fmt: skip
        if found:
            raise aws.DeployError(
                "these outlived the stacks and bill (or block the VPC):\n  "
                + "\n  ".join(f"{item.kind} {item.id} ({item.detail}): {item.delete}" for item in found)
            )
        self.log(f"    nothing of {config.project_name} bills by the hour in {config.region}")

    def retained(self) -> list[aws.Retained]:
        """Everything of this config that outlives ``cdk destroy`` (docs/deploy.md, Teardown).

        Buckets and ECR repositories (retained on purpose), any KMS key or secret still tagged with
        the project (none with the current stacks; keys from replacements or older versions), and
        the log groups AWS services create outside CloudFormation.
        """
        return retained.find(self.config, self.account, self.client)

    def report_retained(self, purge: bool) -> None:
        """Print what was retained, why, and how to delete it; delete it when ``purge``."""
        found = self.retained()
        if not found:
            self.log("    nothing retained")
            return
        for item in found:
            self.log(f"    {item.kind} {item.name}: {item.why}")
        for line in retained.cycle_summary(found, self.config):
            self.log(f"    {line}")
        if purge:
            aws.delete_retained(self.client, self._resource("s3", region_name=self.config.region), found)
            self.log(
                f"    deleted {len(found)} retained resources (KMS keys after a {aws.KEY_PENDING_WINDOW_DAYS}-day waiting period)"
            )
            return
        self.log("    kept on purpose or left by AWS services; `make deploy` with this config reuses the buckets")
        self.log("    and repositories and collides with none of them. To delete them:")
        self.log("      make destroy CONFIG=<this config> PURGE=1     (irreversible), or by hand:")
        for item in found:
            for command in aws.delete_commands(item, self.config.region):
                self.log(f"      {command}")
