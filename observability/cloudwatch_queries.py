"""CloudWatch metric queries of the dashboard: the bulk job queue as SQS itself reports it (``AWS/SQS``).

The workers' own gauges (:mod:`observability.bulk_queries`) vanish when they scale to zero, exactly when
the age of the oldest waiting job matters, and SQS gives that age only as a CloudWatch metric
(``GetQueueAttributes`` has no such attribute). These queries read it, and the queue's counts, from
CloudWatch through the Grafana CloudWatch data source (``dashboard.CLOUDWATCH_DATASOURCE_UID``).

SQS facts (Amazon SQS Developer Guide, "Available CloudWatch metrics for Amazon SQS",
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html):

* namespace ``AWS/SQS``, one dimension ``QueueName``; values are emitted only while the queue is active,
  so on an idle, empty queue "no data" reads as 0;
* ``ApproximateAgeOfOldestMessage`` (seconds), reported while the queue holds a message: a message
  received three times or more without being deleted is moved to the back, and the metric then shows the
  next oldest; in the dead-letter queue the age counts from the move there;
* ``ApproximateNumberOfMessagesVisible`` (waiting), ``ApproximateNumberOfMessagesNotVisible`` (received,
  in flight, not yet deleted).

Statistic ``Maximum``, as the bulk stack's alarms use; the period is left to Grafana (``auto``: from the
time range, never below the metric's one-minute resolution), the region to the data source's default
(the stack's region).
"""

from __future__ import annotations

from dataclasses import dataclass

from settings import DeploymentConfig, names

SQS_NAMESPACE = "AWS/SQS"
QUEUE_DIMENSION = "QueueName"
STATISTIC = "Maximum"
DEFAULT_REGION = "default"
"""Grafana CloudWatch query region ``default``: the data source's ``defaultRegion``."""


@dataclass(frozen=True)
class MetricQuery:
    """One CloudWatch metric (namespace, name, dimensions) with a statistic, for a panel target.

    Attributes:
        key: stable identifier, unique among the dashboard's queries.
        namespace / metric_name: the CloudWatch metric, e.g. ``AWS/SQS`` / ``ApproximateAgeOfOldestMessage``.
        dimensions: ``(name, value)`` pairs, e.g. ``(("QueueName", "whisper-hyperpod-bulk-jobs"),)``.
        statistic: CloudWatch statistic (``Maximum``, ``Average``, ``Sum``…).
        unit: Grafana unit id of the result (``s``, ``short``).
        description: one line for humans (panel description).
    """

    key: str
    namespace: str
    metric_name: str
    dimensions: tuple[tuple[str, str], ...]
    statistic: str
    unit: str
    description: str


def _sqs(key: str, metric: str, queue: str, unit: str, description: str) -> MetricQuery:
    return MetricQuery(key, SQS_NAMESPACE, metric, ((QUEUE_DIMENSION, queue),), STATISTIC, unit, description)


@dataclass(frozen=True)
class BulkQueue:
    """The bulk row's CloudWatch queries for one deployment (queue names from :mod:`settings.names`)."""

    oldest_age: MetricQuery
    visible: MetricQuery
    in_flight: MetricQuery
    dead_letter: MetricQuery

    def all(self) -> tuple[MetricQuery, ...]:
        """Every query, in panel order."""
        return (self.oldest_age, self.visible, self.in_flight, self.dead_letter)


def bulk_queue(config: DeploymentConfig) -> BulkQueue:
    """The job queue's oldest-message age, waiting and in-flight counts, and the dead-letter queue's depth."""
    jobs, dead = names.bulk_queue_name(config), names.bulk_dead_letter_queue_name(config)
    return BulkQueue(
        oldest_age=_sqs(
            "sqs_oldest_message_age",
            "ApproximateAgeOfOldestMessage",
            jobs,
            "s",
            "Age of the oldest job message waiting in the queue (SQS, also while no worker runs)",
        ),
        visible=_sqs(
            "sqs_messages_visible",
            "ApproximateNumberOfMessagesVisible",
            jobs,
            "short",
            "Job messages waiting in the queue (SQS)",
        ),
        in_flight=_sqs(
            "sqs_messages_not_visible",
            "ApproximateNumberOfMessagesNotVisible",
            jobs,
            "short",
            "Job messages received by a worker and not yet deleted (SQS)",
        ),
        dead_letter=_sqs(
            "sqs_dead_letter_visible",
            "ApproximateNumberOfMessagesVisible",
            dead,
            "short",
            "Jobs that failed maxReceiveCount times, waiting in the dead-letter queue (SQS; docs/bulk.md)",
        ),
    )
