"""The bulk worker's settings, ``WHISPER_BULK_*`` in the environment (pydantic-settings).

The ``whisper-bulk`` chart writes them from the ``bulk:`` config section (``k8s_charts.bulk.worker_env``);
``make bulk-demo`` and the tests set them for the local endpoint. The receipt's timing and the model
calls are groups of their own (:class:`QueueSettings`, :class:`ModelCallSettings`), each field still
``WHISPER_BULK_<FIELD>`` (:mod:`whisper_build.serving.flat_settings`).
Docs: docs/bulk.md, "Turning it on".
"""

from __future__ import annotations

import socket
from typing import Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from whisper_build.serving.flat_settings import route_flat_names

SQS_MAX_VISIBILITY_SECONDS = 12 * 3600


_FLAT = SettingsConfigDict(env_prefix="WHISPER_BULK_", extra="ignore")


class QueueSettings(BaseSettings):
    """One SQS receipt: its visibility, heartbeats and continuation, the receive loop and the back-off."""

    model_config = _FLAT

    visibility_timeout_seconds: int = Field(600, ge=1, le=SQS_MAX_VISIBILITY_SECONDS)
    heartbeat_seconds: float = Field(120.0, gt=0, description="visibility extension interval")
    max_total_visibility_seconds: float = Field(
        SQS_MAX_VISIBILITY_SECONDS, gt=0, description="SQS's limit on one receipt's total visibility (12 h)"
    )
    continuation_margin_seconds: float = Field(
        1800.0, ge=0, description="continue in a new message this long before the visibility limit"
    )
    receive_wait_seconds: int = Field(
        20,
        ge=0,
        le=20,
        description="SQS long-poll wait per receive (0: short polling); the drain waits for the poll in progress",
    )
    idle_poll_seconds: float = Field(0.5, gt=0, description="pause after an empty short-polling receive")
    retry_base_seconds: float = Field(30.0, ge=0, description="first back-off of a transient failure")
    retry_max_seconds: float = Field(900.0, ge=0, description="longest back-off")

    @model_validator(mode="after")
    def _heartbeat_inside_visibility(self) -> QueueSettings:
        if self.heartbeat_seconds * 2 > self.visibility_timeout_seconds:
            raise ValueError(
                f"heartbeat_seconds ({self.heartbeat_seconds:g}) must be at most half of visibility_timeout_seconds "
                f"({self.visibility_timeout_seconds}): a late heartbeat would let another worker take the file"
            )
        return self


class ModelCallSettings(BaseSettings):
    """The calls to the pod's Triton: windows per call, checkpoints, deadlines, yielding and gathering."""

    model_config = _FLAT

    window_group_size: int = Field(8, ge=1, description="non-silent windows per Triton call per file")
    checkpoint_every_groups: int = Field(4, ge=1, description="checkpoint after this many window groups")
    call_timeout_seconds: float = Field(600.0, gt=0, description="deadline of one Triton call (one group)")
    diarization_timeout_seconds: float = Field(
        1800.0, gt=0, description="deadline of the speaker model's call for one whole file (about 150 s per hour)"
    )
    yield_to_metrics_url: str | None = Field(
        None,
        description="a gateway's /metrics sharing this Triton: bulk calls wait while its requests are in flight "
        "(whisper_build.bulk.yielding; unset: the pod's Triton is bulk's own)",
    )
    yield_hold_seconds: float = Field(2.0, ge=0, description="keep yielding this long after the last request")
    yield_max_wait_seconds: float = Field(30.0, gt=0, description="longest wait of one bulk call for the gate")
    gather_seconds: float = Field(
        2.0,
        ge=0,
        description="after an idle spell, the longest a bulk call waits for others to fill the model's batch "
        "(whisper_build.bulk.admission; 0: never gathers)",
    )


GROUPS: dict[str, type[BaseSettings]] = {"queue": QueueSettings, "calls": ModelCallSettings}
"""The groups of :class:`WorkerSettings`, by attribute; each field of each is ``WHISPER_BULK_<FIELD>``."""


class WorkerSettings(BaseSettings):
    """Everything a worker needs; each field, top-level or in a group, is ``WHISPER_BULK_<FIELD>``."""

    model_config = _FLAT

    queue_url: str = Field(description="the job queue")
    bucket: str = Field(description="the job bucket (inputs and outputs)")
    region: str = Field("us-east-1", description="AWS region of queue and bucket")
    endpoint_url: str | None = Field(None, description="S3 + SQS endpoint instead of AWS (local runs)")
    input_prefix: str = "input/"
    output_prefix: str = "output/"
    triton_url: str = Field("127.0.0.1:8001", description="Triton gRPC host:port (the pod's own Triton)")
    triton_model: str = Field("whisper", description="Triton model name (docs/contracts.md §5)")
    model: str = Field("tiny.en", description="Whisper checkpoint served (status records, job ids)")
    engine: str | None = Field(None, description="serving engine (status records)")
    files_in_flight: int = Field(1, ge=1, description="jobs worked on at once (the ScaledObject's queueLength)")
    max_file_bytes: int = Field(20 * 1024**3, gt=0, description="larger inputs fail with too_large")
    drain_seconds: float = Field(120.0, gt=0, description="after SIGTERM: time to stop at a group boundary")
    scratch_dir: str = Field("/tmp", description="where inputs are streamed to")
    http_host: str = Field("127.0.0.1", description="address of /live, /ready, /metrics")
    http_port: int = Field(0, ge=0, le=65535, description="port of /live, /ready, /metrics (0: none)")
    worker_id: str = Field(default_factory=socket.gethostname, description="names this worker in leases and logs")
    queue: QueueSettings = Field(default_factory=QueueSettings)
    calls: ModelCallSettings = Field(default_factory=ModelCallSettings)

    @model_validator(mode="before")
    @classmethod
    def _flat_names_to_groups(cls, data: Any) -> Any:
        """``heartbeat_seconds=60`` means ``queue.heartbeat_seconds``, as ``WHISPER_BULK_HEARTBEAT_SECONDS=60`` does."""
        return route_flat_names(data, GROUPS)
