"""What one message's run ends in, the clock it runs against, and the bad-input failure.

:class:`whisper_build.bulk.job.JobRunner` returns an :class:`Outcome`; the worker
(:mod:`whisper_build.bulk.worker`) acts on it. Docs: docs/bulk.md, "Failures".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from enum import Enum

from whisper_build.bulk.aws import Received


class Outcome(Enum):
    """What became of one message (the ``outcome`` label of ``whisper_bulk_jobs_total``)."""

    COMPLETED = "completed"
    FAILED = "failed"
    DUPLICATE = "duplicate"
    RETRIED = "retried"
    CONTINUED = "continued"
    RETURNED = "returned"


@dataclass
class Lifeline:
    """The message's clock and the worker's stop signal, shared with the heartbeat.

    Attributes:
        received: the message.
        received_at: ``time.monotonic()`` at receipt (SQS's 12-hour limit counts from it).
        draining: set on SIGTERM: stop at the next window group boundary.
        lease_prefix: the job's folder while this message holds its lease (the heartbeat renews it).
        lease_etag: the ETag of the lease this message last wrote (renewals are conditional on it).
    """

    received: Received
    received_at: float = field(default_factory=time.monotonic)
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    lease_prefix: str | None = None
    lease_etag: str | None = None

    def elapsed(self) -> float:
        """Seconds since receipt."""
        return time.monotonic() - self.received_at


class InputProblem(Exception):
    """The input cannot be transcribed (a bad-input failure); ``reason`` is the metrics label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
