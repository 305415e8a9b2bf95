"""CloudWatch metric queries of the dashboard: the bulk job queue as SQS itself reports it (``AWS/SQS``).

The workers' own gauges (:mod:`observability.bulk_queries`) vanish when they scale to zero, exactly
when the age of the oldest waiting job matters, and SQS gives that age only as a CloudWatch metric.
These queries read it and the queue's counts through the Grafana CloudWatch data source: namespace
``AWS/SQS``, dimension ``QueueName``; ``ApproximateAgeOfOldestMessage`` (s; a message received three
times is moved to the back and the next oldest shows), ``ApproximateNumberOfMessagesVisible`` /
``…NotVisible``; values only while the queue is active, so "no data" reads as 0 (SQS Developer
Guide, "Available CloudWatch metrics for Amazon SQS"). Statistic ``Maximum`` as the bulk alarms;
period ``auto``. Entry points: :func:`bulk_queue`, :class:`BulkQueue`. Docs: docs/observability.md.
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
