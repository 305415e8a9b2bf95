"""The ``bulk:`` section of the deployment config: S3-in/S3-out transcription jobs on an SQS queue.

Off by default (``enabled: false``); ``config/examples/bulk.yaml`` turns it on. With it on, the
bulk stack (``stacks/bulk_stack.py``) creates the job bucket, the queue, its dead-letter queue and
the workers' Pod Identity role, and the ``whisper-bulk`` chart (``k8s_charts/bulk.py``) one worker
Deployment + KEDA ``ScaledObject`` per GPU group it names. Message, output and limits: docs/bulk.md.

SQS facts used as bounds (Amazon SQS Developer Guide, "Amazon SQS visibility timeout" and
"Amazon SQS message quotas"): the visibility timeout is 0 s – 12 h and a message's total visibility,
extended by ``ChangeMessageVisibility``, may not pass 12 h after its receipt; retention is
60 s – 14 days; ``maxReceiveCount`` is 1 – 1000 (``RedrivePolicy``, "Using dead-letter queues").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SQS_MAX_VISIBILITY_SECONDS = 12 * 3600
"""A received message's visibility may be extended to at most 12 h after its receipt (SQS quotas)."""
SQS_MAX_RETENTION_DAYS = 14
SQS_MAX_WAIT_SECONDS = 20
"""The longest ReceiveMessage long poll, the workers' ``receive_wait_seconds`` (SQS API Reference, ReceiveMessage
``WaitTimeSeconds``); a draining worker waits for the poll it has out."""
SQS_MAX_RECEIVE_COUNT = 1000
S3_EVENT_MAX_BYTES = 64 * 1024
"""An S3 event notification is at most 64 KB (S3 user guide, "Event message structure")."""
PREFIX_PATTERN = r"^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*/$"
"""An S3 key prefix of "safe" characters (S3 user guide, "Object key naming") ending in ``/``."""


class BulkSettings(BaseModel):
    """Bulk transcription jobs (docs/bulk.md): one queue, one job bucket, workers that scale to zero.

    Each field's bound is the SQS/S3 limit it maps to (module docstring).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(False, description="Create the job bucket, queue, dead-letter queue and workers.")
    input_prefix: str = Field("input/", description="Objects created under it become jobs (S3 event).")
    output_prefix: str = Field("output/", description="Results and status records are written under it.")
    gpu_groups: list[str] | None = Field(
        None,
        min_length=1,
        description="GPU groups that run bulk workers (their own Deployment + Triton each); default: all.",
    )
    max_replicas: int = Field(2, ge=1, description="Most bulk worker pods per GPU group (KEDA maxReplicaCount).")
    window_group_size: int = Field(
        8, ge=1, le=256, description="Non-silent 30 s windows a worker sends to Triton per call for one file."
    )
    checkpoint_every_groups: int = Field(
        4, ge=1, description="A file's progress is written to S3 after this many window groups."
    )
    visibility_timeout_seconds: int = Field(
        600, ge=60, le=SQS_MAX_VISIBILITY_SECONDS, description="Queue visibility timeout; the heartbeat extends it."
    )
    heartbeat_seconds: int = Field(
        120, ge=5, description="How often a worker extends the visibility of the message it works on."
    )
    max_receive_count: int = Field(
        3, ge=1, le=SQS_MAX_RECEIVE_COUNT, description="Receives before a message moves to the dead-letter queue."
    )
    retention_days: int = Field(14, ge=1, le=SQS_MAX_RETENTION_DAYS, description="Queue and DLQ retention.")
    max_file_gb: int = Field(
        20, ge=1, le=5000, description="Largest input object (the worker's scratch volume is sized for it)."
    )
    drain_seconds: int = Field(
        120,
        ge=10,
        description="After SIGTERM: time to finish the window group in flight, checkpoint and return the message.",
    )
    oldest_message_alarm_seconds: int = Field(
        6 * 3600, ge=60, description="Alarm when the oldest waiting message is older than this."
    )
    polling_interval_seconds: int = Field(30, ge=5, description="KEDA polls the queue length this often.")
    cooldown_seconds: int = Field(300, ge=0, description="Idle time before KEDA scales a worker group to zero.")

    @field_validator("input_prefix", "output_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not re.match(PREFIX_PATTERN, value):
            raise ValueError(
                f"'{value}' is not a key prefix of letters, digits and !_.*'()- in /-separated parts ending "
                "in '/', e.g. input/ or jobs/in/"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> BulkSettings:
        if self.input_prefix.startswith(self.output_prefix) or self.output_prefix.startswith(self.input_prefix):
            raise ValueError(
                f"input_prefix '{self.input_prefix}' and output_prefix '{self.output_prefix}' must not contain "
                "each other: results written under the input prefix would become jobs themselves"
            )
        if self.heartbeat_seconds * 3 > self.visibility_timeout_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds}) must be at most a third of "
                f"visibility_timeout_seconds ({self.visibility_timeout_seconds}): two missed heartbeats "
                "must not let a second worker receive the file"
            )
        return self


class WorkerGroup(Protocol):
    """What the bulk checks read of a GPU group (``settings.schema.GpuGroup``, which imports this module)."""

    @property
    def name(self) -> str: ...  # noqa: D102
    @property
    def instance_count(self) -> int: ...  # noqa: D102
    @property
    def max_replicas(self) -> int: ...  # noqa: D102
    @property
    def pods_per_node(self) -> int: ...  # noqa: D102


Group = TypeVar("Group", bound=WorkerGroup)


def check_groups(
    bulk: BulkSettings, groups: Sequence[WorkerGroup], node_autoscaling: bool, serving_target: str
) -> None:
    """Refuse ``bulk.gpu_groups`` entries that name no GPU group, and bulk pods that have no GPU to run on.

    Without node autoscaling a group's instances are fixed: its serving pods (``max_replicas``) and its
    bulk workers (``bulk.max_replicas``, one GPU or MIG slice each) must fit its GPUs together.

    Raises:
        ValueError: names the field, the group and what to change.
    """
    names = [group.name for group in groups]
    for index, name in enumerate(bulk.gpu_groups or []):
        if name not in names:
            raise ValueError(f"bulk.gpu_groups.{index}: '{name}' is not a GPU group; known: {', '.join(names)}")
    if bulk.enabled and serving_target != "deployments":
        raise ValueError(
            f"bulk.enabled: bulk workers run beside serving.target deployments only, not {serving_target} "
            "(their KEDA objects need this project's KEDA); set serving.target: deployments or bulk.enabled: false"
        )
    if not bulk.enabled or node_autoscaling:
        return
    for group in worker_groups(bulk, groups):
        slots = group.instance_count * group.pods_per_node
        if group.max_replicas + bulk.max_replicas > slots:
            raise ValueError(
                f"bulk.max_replicas: {bulk.max_replicas} bulk workers + {group.max_replicas} serving pods of group "
                f"'{group.name}' need {group.max_replicas + bulk.max_replicas} GPUs (or MIG slices) but it has "
                f"{slots}; set cluster.node_autoscaling: true (workers' nodes then come and go with the queue), "
                "raise instance_count or lower bulk.max_replicas"
            )


def worker_groups(bulk: BulkSettings, groups: Sequence[Group]) -> list[Group]:
    """The GPU groups that run bulk workers (``bulk.gpu_groups``, default all), in config order; [] when off."""
    if not bulk.enabled:
        return []
    return [group for group in groups if bulk.gpu_groups is None or group.name in bulk.gpu_groups]


def files_in_flight(best_batch: float, window_group_size: int) -> int:
    """Files one worker transcribes at once so its Triton sees its best batch: ``ceil(best_batch / group)``.

    Each file keeps one window group of ``window_group_size`` windows with Triton at a time (the next
    one is decoded meanwhile), so ``n`` files offer ``n × window_group_size`` windows to the dynamic
    batcher. This is also the ScaledObject's ``queueLength`` (messages one replica takes);
    ``best_batch`` comes from the throughput table (``k8s_charts.bulk.best_batch``).
    """
    return max(1, math.ceil(best_batch / window_group_size))


def worker_name(group_name: str) -> str:
    """Deployment / ScaledObject name of a group's bulk workers, e.g. ``whisper-bulk-g5``."""
    return f"whisper-bulk-{group_name}"


BULK_BUCKET_PURPOSE = "bulk"
"""Job bucket ``<project>-bulk-<account>-<region>`` (``settings.names.bucket_name``)."""
WORKER_SERVICE_ACCOUNT = "whisper-bulk"
"""ServiceAccount of the bulk workers (EKS Pod Identity: the bulk stack's worker role)."""
