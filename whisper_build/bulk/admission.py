"""When a bulk call may go to Triton: full first batches, and no deeper queue than the batcher needs.

Triton's dynamic batcher forms a batch from the requests queued when a model instance is free
(Triton user guide, "Dynamic Batcher"). Two rules on the worker's side (Triton's own knobs act on
synchronous requests sharing the model too): gather calls after an idle spell, and keep at most
:data:`BATCHES_AT_TRITON` batches at Triton — half a batch when a gateway shares the model.
Entry points: :class:`AdmissionBackend` (a :class:`BulkAdmission` in front of a
:class:`whisper_build.serving.transcription.backend.TranscriptionBackend`; its ``served_model`` sets the
batch size). Docs: docs/bulk.md.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import (
    DelegatingBackend,
    ServedModel,
    TranscriptionBackend,
    WindowRequest,
)

BATCHES_AT_TRITON = 2
"""Most batches' worth of one worker's windows sent and not yet answered (a model of bulk's own): one
executing, one queued."""


@dataclass
class ActiveJobs:
    """How many jobs this worker is working on now (:class:`whisper_build.bulk.job.JobRunner` counts them)."""

    count: int = 0


@dataclass
class _Gathering:
    """The calls waiting together: their windows, their number, when they go at the latest (loop time)."""

    deadline: float
    windows: int = 0
    calls: int = 0
    go: asyncio.Event = field(default_factory=asyncio.Event)


class BulkAdmission:
    """When a bulk call may go to Triton (module docstring).

    Args:
        active: the worker's job count.
        gather_seconds: the longest a call waits for others after an idle spell (0: never gathers).
        batch_windows: the windows of a full batch (the model's ``max_batch_size``; until known, 1).
        shared: a gateway shares the model: half a batch at Triton at most, not two batches.

    * **Gather after an idle spell.** When a worker starts on an idle model, its jobs reach Triton one by one
      as each finishes its downloads and decoding: the first file's windows would be a batch of their own,
      and the model would work on one or two windows for as long as a full batch takes (measured on the CPU
      model: a first batch of 2 windows took 4.7 s, a batch of 14 took 13 s; docs/benchmarks.md, "Bulk jobs").
      So while none of this worker's calls is at Triton, a call waits until the waiting calls hold as many
      windows as may be at Triton (below: the batch executing and the next one ready), or every job in
      progress has a call waiting (no one else is coming), or ``gather_seconds`` have passed since the first
      of them began to wait; then they go together. While a call is at Triton, new calls go at once (room
      permitting): the next batch forms in Triton's queue during the current one.
    * **At most** :data:`BATCHES_AT_TRITON` **batches at Triton**, or **half a batch when a gateway shares
      the model.** One batch executing and one ready keep a model of bulk's own busy; more only lengthen
      Triton's queue. Where a gateway shares the model (``shared``: the worker yields to it,
      :mod:`whisper_build.bulk.yielding`), every bulk window at Triton is work that the first synchronous
      request after a quiet spell may wait for: priority orders the queue, not a batch, and the yield gate
      holds only calls not yet sent. So a shared worker keeps at most ``max_batch_size // 2`` windows there
      (the per-call limit of :func:`whisper_build.bulk.worker.bulk_plan`, now for all its calls together),
      and that request waits for at most one half batch of bulk work. A call that would pass the limit
      waits for answers (a call alone always goes).

    :class:`AdmissionBackend` puts a :class:`BulkAdmission` in front of a
    :class:`whisper_build.serving.transcription.backend.TranscriptionBackend`; its ``served_model`` sets the
    batch size.
    """

    def __init__(self, active: ActiveJobs, gather_seconds: float, batch_windows: int = 1, shared: bool = False) -> None:
        self.active = active
        self.gather_seconds = gather_seconds
        self.batch_windows = batch_windows
        self.shared = shared
        self.calls_at_triton = 0
        self.windows_at_triton = 0
        """Calls (and their windows) of this worker sent and not yet answered."""
        self._open = False
        self._gathering: _Gathering | None = None
        self._answered = asyncio.Condition()

    @property
    def max_windows_at_triton(self) -> int:
        """:data:`BATCHES_AT_TRITON` full batches; half a batch when ``shared``."""
        return max(1, self.batch_windows // 2) if self.shared else BATCHES_AT_TRITON * self.batch_windows

    @contextlib.asynccontextmanager
    async def call(self, windows: int) -> AsyncIterator[None]:
        """Wait until ``windows`` may go (module docstring), then count them at Triton until the block ends."""
        if self.gather_seconds > 0 and not self._open and self.calls_at_triton == 0:
            await self._gather(windows)
        async with self._answered:
            await self._answered.wait_for(lambda: self._room_for(windows))
            self.calls_at_triton += 1
            self.windows_at_triton += windows
        try:
            yield
        finally:
            async with self._answered:
                self.calls_at_triton -= 1
                self.windows_at_triton -= windows
                if self.calls_at_triton == 0:
                    self._open = False  # idle again: the next calls gather
                self._answered.notify_all()

    def _room_for(self, windows: int) -> bool:
        return self.calls_at_triton == 0 or self.windows_at_triton + windows <= self.max_windows_at_triton

    async def _gather(self, windows: int) -> None:
        loop = asyncio.get_running_loop()
        if self._gathering is None:
            self._gathering = _Gathering(deadline=loop.time() + self.gather_seconds)
        gathering = self._gathering
        gathering.windows += windows
        gathering.calls += 1
        try:
            if gathering.windows < self.max_windows_at_triton and gathering.calls < max(1, self.active.count):
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout_at(gathering.deadline):
                        await gathering.go.wait()
        except BaseException:  # cancelled while waiting: no longer part of the batch
            gathering.windows -= windows
            gathering.calls -= 1
            raise
        if self._gathering is gathering:  # the first to go lets every other waiting call go with it
            self._gathering = None
            self._open = True
            gathering.go.set()


class AdmissionBackend(DelegatingBackend):
    """A :class:`TranscriptionBackend` whose ``infer`` goes through a :class:`BulkAdmission`."""

    def __init__(self, backend: TranscriptionBackend, admission: BulkAdmission) -> None:
        super().__init__(backend)
        self.admission = admission

    async def served_model(self, timeout: float) -> ServedModel:
        """The wrapped backend's; its ``max_batch_size`` becomes the admission's full batch."""
        served = await super().served_model(timeout)
        self.admission.batch_windows = max(1, served.max_batch_size)
        return served

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """Through the admission, then the wrapped backend's ``infer``."""
        async with self.admission.call(len(windows)):
            return await super().infer(windows, request, timeout)
