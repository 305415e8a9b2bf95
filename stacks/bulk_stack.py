"""The bulk job path in AWS: job bucket, SQS queue + dead-letter queue, KMS key, worker role, alarms.

Only with ``bulk.enabled`` (``settings/bulk.py``). A stack of its own with a bucket of its own: an
S3 notification from the storage stack's bucket to a queue in another stack makes the two stacks
reference each other. Here the bucket's ARN is built from its deterministic name, so the queue
policy needs no reference to the bucket. Entry point: :class:`BulkStack` (each resource and why, in
its docstring). Docs: docs/bulk.md.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from settings import names
from settings.bulk import BULK_BUCKET_PURPOSE, S3_EVENT_MAX_BYTES, WORKER_SERVICE_ACCOUNT
from settings.schema import DeploymentConfig
from stacks.buckets import access_log_bucket, logged_bucket
from stacks.nag import acknowledge, acknowledge_resource

WORKER_QUEUE_ACTIONS = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:SendMessage",
    "sqs:GetQueueAttributes",
)
"""What a worker does with the queue (SendMessage: the continuation message; GetQueueAttributes: the
``whisper_bulk_queue_messages`` gauges; docs/bulk.md)."""
KEDA_QUEUE_ACTIONS = ("sqs:GetQueueAttributes",)
"""What KEDA's ``aws-sqs-queue`` scaler calls (keda ``pkg/scalers/aws_sqs_queue_scaler.go``: one
``GetQueueAttributes`` per poll)."""
NONCURRENT_VERSION_DAYS = 30
ABORT_MULTIPART_DAYS = 7


class BulkStack(Stack):
    """Job bucket, queue, dead-letter queue, key, worker role and alarms of ``config.bulk``.

    Args:
        config: The deployment config (``bulk`` enabled).
        cluster_name: EKS cluster of the workers' Pod Identity association (a token is fine).

    Attributes:
        key: The customer-managed key of the queues and the bucket.
        bucket: The job bucket ``<project>-bulk-<account>-<region>``.
        queue / dead_letter_queue: The job queue and its dead-letter queue.
        worker_role: The role the ``whisper-bulk`` ServiceAccount assumes.

    Only with ``bulk.enabled`` (``settings/bulk.py``; docs/bulk.md). A stack of its own with a bucket of
    its own: an S3 notification from the storage stack's bucket to a queue in another stack makes the two
    stacks reference each other (the queue policy names the bucket, the bucket's notification the queue).
    Here the bucket's ARN is built from its deterministic name, so the queue policy needs no reference to
    the bucket and the bucket can depend on the policy (S3 checks that it may send to the queue when the
    notification is created: S3 user guide, "Walkthrough: Configuring a bucket for notifications").

    * **Key**: customer-managed, rotated; its policy lets ``s3.amazonaws.com`` (from this bucket, this
      account) generate data keys, which S3 needs to send to an encrypted queue: the AWS-managed
      ``aws/sqs`` key cannot be used (S3 user guide, "Enabling notifications ... encrypted queue").
    * **Queue**: visibility ``bulk.visibility_timeout_seconds`` (the workers' heartbeat extends it),
      ``RedrivePolicy`` to the dead-letter queue after ``bulk.max_receive_count`` receives, TLS-only
      (``aws:SecureTransport``), at least 64 KB messages (S3 events are up to 64 KB). Both queues are named
      (``settings.names.bulk_queue_name`` / ``bulk_dead_letter_queue_name``) so the dashboard's CloudWatch
      panels can name their ``QueueName`` dimension without a reference to this stack; a named queue cannot
      be replaced in place, and no property set here needs replacement (only ``FifoQueue`` and the name do).
    * **Bucket**: versioned, TLS-only, SSE-KMS with the key, public access blocked, access-logged to a
      log bucket of this stack; objects created under ``bulk.input_prefix`` are sent to the queue.
    * **Worker role** (EKS Pod Identity, ServiceAccount ``whisper-bulk``): read the input prefix, read and
      write the output prefix (results, status, checkpoints), list only the output prefix (so a missing
      status object reads as 404, not 403), receive/delete/change-visibility on the queue, send to it
      (a continuation message before the 12-hour visibility limit) and read its counts (metrics), use the
      key. Nothing else.
    * **Alarms**: a message in the dead-letter queue; the oldest waiting message older than
      ``bulk.oldest_message_alarm_seconds``.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, config: DeploymentConfig, cluster_name: str, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        bulk = config.bulk
        bucket_name = names.bucket_name(config.project_name, BULK_BUCKET_PURPOSE, Aws.ACCOUNT_ID, self.region)
        bucket_arn = f"arn:{Aws.PARTITION}:s3:::{bucket_name}"
        self.key = kms.Key(
            self,
            "Key",
            enable_key_rotation=True,
            description=f"{config.project_name}: encrypts the bulk job queue, its dead-letter queue and job bucket",
            removal_policy=RemovalPolicy.RETAIN,  # the retained bucket's objects stay readable
            pending_window=Duration.days(30),
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="S3EventNotificationsToTheEncryptedQueue",
                principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=["*"],  # a key policy's resource is the key itself
                conditions={
                    "ArnLike": {"aws:SourceArn": bucket_arn},
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                },
            )
        )
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            queue_name=names.bulk_dead_letter_queue_name(config),
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            retention_period=Duration.days(bulk.retention_days),
        )
        acknowledge(
            self.dead_letter_queue,
            "AwsSolutions-SQS3",
            "This is the dead-letter queue of the bulk job queue; its messages are re-driven by an operator (docs/bulk.md)",
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            queue_name=names.bulk_queue_name(config),
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=self.key,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(bulk.visibility_timeout_seconds),
            retention_period=Duration.days(bulk.retention_days),
            max_message_size_bytes=max(S3_EVENT_MAX_BYTES, 256 * 1024),
            dead_letter_queue=sqs.DeadLetterQueue(
                max_receive_count=bulk.max_receive_count, queue=self.dead_letter_queue
            ),
        )
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="S3ObjectCreatedEvents",
                principals=[iam.ServicePrincipal("s3.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={
                    "ArnLike": {"aws:SourceArn": bucket_arn},
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                },
            )
        )
        self.bucket = self._bucket(bucket_name, bulk.input_prefix)
        self._alarms(config)
        self.worker_role = self._worker_role(config, bucket_arn, cluster_name)
        for key, output in names.BULK_STACK_OUTPUTS.items():
            value = {
                "bucket": bucket_name,
                "queue": self.queue.queue_url,
                "dead_letter": self.dead_letter_queue.queue_url,
            }[key]
            CfnOutput(self, output, value=value, description=f"bulk jobs: {key} (make submit / make jobs)")

    def _bucket(self, bucket_name: str, input_prefix: str) -> s3.Bucket:
        logs = access_log_bucket(self, "the bulk job bucket")
        bucket = logged_bucket(
            self,
            "Jobs",
            bucket_name,
            logs=logs,
            log_prefix="jobs/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=Duration.days(NONCURRENT_VERSION_DAYS),
                    abort_incomplete_multipart_upload_after=Duration.days(ABORT_MULTIPART_DAYS),
                )
            ],
            key=self.key,
        )
        cfn_bucket = bucket.node.default_child
        assert isinstance(cfn_bucket, s3.CfnBucket)
        cfn_bucket.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
            queue_configurations=[
                s3.CfnBucket.QueueConfigurationProperty(
                    event="s3:ObjectCreated:*",
                    queue=self.queue.queue_arn,
                    filter=s3.CfnBucket.NotificationFilterProperty(
                        s3_key=s3.CfnBucket.S3KeyFilterProperty(
                            rules=[s3.CfnBucket.FilterRuleProperty(name="prefix", value=input_prefix)]
                        )
                    ),
                )
            ]
        )
        queue_policy = self.queue.node.find_child("Policy").node.default_child
        assert isinstance(queue_policy, sqs.CfnQueuePolicy), "add_to_resource_policy creates the queue's Policy"
        # S3 sends a test event when the notification is created: the queue policy must allow it by then
        cfn_bucket.node.add_dependency(queue_policy)
        return bucket

    def _alarms(self, config: DeploymentConfig) -> None:
        cloudwatch.Alarm(
            self,
            "DeadLetterMessages",
            alarm_description="Bulk jobs failed maxReceiveCount times and wait in the dead-letter queue (docs/bulk.md, Re-running failures)",
            metric=self.dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(1), statistic="Maximum"
            ),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        cloudwatch.Alarm(
            self,
            "OldestMessageAge",
            alarm_description=f"A bulk job has waited longer than {config.bulk.oldest_message_alarm_seconds} s: no worker is taking messages",
            metric=self.queue.metric_approximate_age_of_oldest_message(period=Duration.minutes(5), statistic="Maximum"),
            threshold=config.bulk.oldest_message_alarm_seconds,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def _worker_role(self, config: DeploymentConfig, bucket_arn: str, cluster_name: str) -> iam.Role:
        bulk = config.bulk
        role = iam.Role(
            self,
            "WorkerRole",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com").with_session_tags(),
            description="Bulk workers: read job inputs, write results, work the job queue",
        )
        input_objects = f"{bucket_arn}/{bulk.input_prefix}*"
        output_objects = f"{bucket_arn}/{bulk.output_prefix}*"
        policy = iam.Policy(
            self,
            "WorkerPolicy",
            statements=[
                iam.PolicyStatement(
                    sid="ReadInputs", actions=["s3:GetObject", "s3:GetObjectVersion"], resources=[input_objects]
                ),
                iam.PolicyStatement(
                    sid="WriteOutputs", actions=["s3:GetObject", "s3:PutObject"], resources=[output_objects]
                ),
                iam.PolicyStatement(
                    sid="ListOutputs",
                    actions=["s3:ListBucket"],
                    resources=[bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{bulk.output_prefix}*"]}},
                ),
                iam.PolicyStatement(
                    sid="WorkTheQueue", actions=list(WORKER_QUEUE_ACTIONS), resources=[self.queue.queue_arn]
                ),
                iam.PolicyStatement(
                    sid="UseTheKey", actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self.key.key_arn]
                ),
            ],
        )
        policy.attach_to_role(role)
        acknowledge_resource(
            policy,
            input_objects,
            "Workers read any job object under the input prefix; jobs are named by their uploaders",
        )
        acknowledge_resource(
            policy,
            output_objects,
            "Workers write results under the output prefix, one folder per input key and version",
        )
        eks.CfnPodIdentityAssociation(
            self,
            "WorkerPodIdentity",
            cluster_name=cluster_name,
            namespace=config.serving.namespace,
            service_account=WORKER_SERVICE_ACCOUNT,
            role_arn=role.role_arn,
        )
        return role
