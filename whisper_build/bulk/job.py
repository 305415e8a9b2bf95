"""One job, from its message to its outputs, and what to tell the queue.

Identity, duplicate checks, download, transcription with checkpoints, continuation, outputs.

:meth:`JobRunner.run` returns an :class:`Outcome`; the worker (:mod:`whisper_build.bulk.worker`) acts on
it: delete the message (``completed``, ``failed``, ``duplicate``, ``continued``), return it at once
(``returned``: drain) or after a back-off (``retried``: transient failure; SQS dead-letters it after
``maxReceiveCount`` receives).

Failure classes (docs/bulk.md, Failures):

* bad input — not audio, empty, over-size, a model that refuses the options — ``failed`` with the
  reason in ``status.json``; never retried;
* transient — Triton unreachable or failing, S3 errors botocore's retries did not absorb —
  ``retrying`` with the last error in ``status.json``; progress is checkpointed first.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import ParamSpec, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from whisper_build.bulk import metrics
from whisper_build.bulk.admission import ActiveJobs
from whisper_build.bulk.aws import JobQueue, JobStore, ObjectInfo
from whisper_build.bulk.messages import JobMessage, JobOptions
from whisper_build.bulk.outcome import InputProblem, Lifeline, Outcome
from whisper_build.bulk.outputs import diarize_file, render_outputs
from whisper_build.bulk.records import (
    CHECKPOINT_FILE,
    LEASE_FILE,
    STATUS_FILE,
    Checkpoint,
    JobError,
    JobStatus,
    Lease,
    job_id,
    job_prefix,
    output_files,
)
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.serving.audio import (
    AudioError,
    AudioStream,
    AudioTooLongError,
    EmptyAudioError,
    NotAudioError,
    open_audio_file,
)
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.diarization.speakers import Turn
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.transcription.backend import BackendError, BackendRejected
from whisper_build.serving.transcription.windows import Transcriber, WindowRequest

log = logging.getLogger("whisper.bulk")
P = ParamSpec("P")
T = TypeVar("T")


def audio_reason(exc: AudioError) -> str:
    """The failure reason of an audio error: ``not_audio``, ``empty_audio``, ``too_long`` or ``invalid_audio``."""
    if isinstance(exc, EmptyAudioError):
        return "empty_audio"
    if isinstance(exc, NotAudioError):
        return "not_audio"
    if isinstance(exc, AudioTooLongError):
        return "too_long"
    return "invalid_audio"


def backoff_seconds(settings: WorkerSettings, receive_count: int) -> int:
    """Delay before a failed message is visible again: base × 2^(receives − 1), at most the maximum."""
    queue = settings.queue
    return int(min(queue.retry_max_seconds, queue.retry_base_seconds * 2 ** max(0, receive_count - 1)))


def decode_options(options: JobOptions, engine_words: bool = True) -> DecodeOptions:
    """What every window of a job asks the model for: the gateway's options (:meth:`DecodeOptions.transcript`).

    ``engine_words``: the served engine gives word timings (``ServedModel.word_timings``); speakers
    are then given word by word, else segment by segment.
    """
    words = options.word_timestamps or (options.speakers is not None and engine_words)
    return DecodeOptions.transcript(word_timestamps=words, temperature=options.temperature)


class JobRunner:
    """Runs jobs against one store, queue and transcriber (one per worker process)."""

    def __init__(
        self,
        settings: WorkerSettings,
        store: JobStore,
        queue: JobQueue,
        transcriber: Transcriber,
        active: ActiveJobs | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.queue = queue
        self.transcriber = transcriber
        self.active = active or ActiveJobs()
        """The jobs in :meth:`run` now (the worker's :class:`~whisper_build.bulk.admission.BulkAdmission` reads it;
        ``whisper_bulk_files_in_progress`` follows it)."""

    async def _io(self, function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """A blocking boto3 call in a thread."""
        return await asyncio.to_thread(function, *args, **kwargs)

    def continuation_due(self, life: Lifeline) -> bool:
        """True once the receipt is within the continuation margin of SQS's total visibility limit."""
        queue = self.settings.queue
        return life.elapsed() >= queue.max_total_visibility_seconds - queue.continuation_margin_seconds

    async def run(self, job: JobMessage, life: Lifeline) -> Outcome:
        """Work one job of a received message (module docstring); never raises for a job's own failure.

        An S3 error outside the transcription (HeadObject, the status record, the lease, writing a
        failure) is a ``storage_error``: the message is retried after its back-off, like a failed download.
        """
        self.active.count += 1
        metrics.IN_PROGRESS.inc()
        try:
            return await self._run(job, life)
        except (ClientError, BotoCoreError) as exc:
            log.warning("the job store failed for %s (%s); retrying later", job.key, exc)
            metrics.FAILURES.labels(reason="storage_error").inc()
            return Outcome.RETRIED
        finally:
            self.active.count -= 1
            metrics.IN_PROGRESS.dec()

    async def _run(self, job: JobMessage, life: Lifeline) -> Outcome:
        settings = self.settings
        info = await self._io(self.store.head, job.key, job.version_id)
        if info is None:
            log.warning("%s (version %s) does not exist; message dropped", job.key, job.version_id)
            metrics.FAILURES.labels(reason="not_found").inc()
            return Outcome.FAILED
        jid = job_id(self.store.bucket, job.key, info.identity, settings.model, job.options)
        prefix = job_prefix(job.key, settings.input_prefix, settings.output_prefix, jid)
        status = await self._io(self.store.read_model, prefix + STATUS_FILE, JobStatus)
        if status is not None and status.final:
            return Outcome.DUPLICATE  # finished before: acknowledged, not recomputed
        fresh = status is None
        if not await self.claim(prefix, life, fresh=fresh):
            return Outcome.DUPLICATE  # another message of the same job is being worked on
        status = status or JobStatus(
            state="running", bucket=self.store.bucket, key=job.key, job_id=jid, model=settings.model
        )
        status.state, status.attempts, status.error = "running", status.attempts + 1, None
        status.started_at = status.started_at or time.time()
        status.version_id, status.etag, status.engine, status.options = (
            info.version_id, info.etag, settings.engine, job.options,
        )  # fmt: skip
        status.continuations = max(status.continuations, job.continuation)
        try:
            return await self._transcribe(job, info, prefix, status, life, fresh)
        except InputProblem as exc:
            return await self._fail(prefix, status, JobError(reason=exc.reason, message=str(exc), retryable=False))
        except AudioError as exc:
            return await self._fail(
                prefix, status, JobError(reason=audio_reason(exc), message=str(exc), retryable=False)
            )
        except BackendRejected as exc:
            return await self._fail(
                prefix, status, JobError(reason="invalid_options", message=str(exc), retryable=False)
            )
        except (BackendError, ClientError, BotoCoreError, OSError) as exc:
            reason = "backend_error" if isinstance(exc, BackendError) else "storage_error"
            return await self._retry(prefix, status, JobError(reason=reason, message=str(exc), retryable=True), life)

    def _lease(self, life: Lifeline, seconds: float | None = None) -> Lease:
        ttl = self.settings.queue.visibility_timeout_seconds if seconds is None else seconds
        return Lease(owner=life.received.message_id, expires_at=time.time() + ttl)

    async def claim(self, prefix: str, life: Lifeline, fresh: bool = False) -> bool:
        """Take the job's lease for this message: absent, expired or already this message's.

        Conditional writes make two messages of one job received at once race safely: one wins,
        the other sees the winner's lease (a duplicate). False when another message holds it.
        ``fresh`` (the job has no status record yet, so most likely no lease): try the create first
        and read the lease only when one exists.
        """
        key = prefix + LEASE_FILE
        if fresh:
            etag = await self._io(self.store.put_conditional, key, self._lease(life), if_match=None)
            if etag is not None:
                life.lease_prefix, life.lease_etag = prefix, etag
                return True
        current = await self._io(self.store.read_model_etag, key, Lease)
        if current is not None and current[0].live() and current[0].owner != life.received.message_id:
            return False
        etag = await self._io(
            self.store.put_conditional, key, self._lease(life), if_match=None if current is None else current[1]
        )
        if etag is None:
            return False
        life.lease_prefix, life.lease_etag = prefix, etag
        return True

    async def renew(self, life: Lifeline, seconds: float | None = None) -> None:
        """Extend (or with ``seconds=0`` release) this message's lease; logged if another took it over."""
        if life.lease_prefix is None or life.lease_etag is None:
            return
        key = life.lease_prefix + LEASE_FILE
        etag = await self._io(self.store.put_conditional, key, self._lease(life, seconds), if_match=life.lease_etag)
        if etag is None:
            log.warning("the lease of %s was taken over: another worker has the job", life.lease_prefix)
            life.lease_prefix = None
        life.lease_etag = etag

    async def _transcribe(
        self, job: JobMessage, info: ObjectInfo, prefix: str, status: JobStatus, life: Lifeline, fresh: bool
    ) -> Outcome:
        """Download, transcribe from the checkpoint on, complete; ``fresh``: no status record existed, so no checkpoint."""
        settings = self.settings
        if info.size == 0:
            raise InputProblem("empty_audio", "the input object is empty (0 bytes)")
        if info.size > settings.max_file_bytes:
            raise InputProblem(
                "too_large", f"the input is {info.size} bytes, over the limit of {settings.max_file_bytes} bytes"
            )
        # the status record is written before the first checkpoint, so a job without one has none
        checkpoint = None if fresh else await self._io(self.store.read_model, prefix + CHECKPOINT_FILE, Checkpoint)
        checkpoint = checkpoint or Checkpoint(job_id=status.job_id)
        status.progress_seconds = checkpoint.start_sample / 16_000
        await self._io(self.store.write_model, prefix + STATUS_FILE, status)
        path = Path(settings.scratch_dir) / f"{status.job_id}.input"
        started = time.monotonic()
        try:
            await self._io(self.store.download, job.key, info, path)
            stream: AudioStream = await self._io(open_audio_file, path)
            status.audio_seconds = stream.declared_seconds  # make jobs' percent and estimate
            await self._io(self.store.write_model, prefix + STATUS_FILE, status)  # the length, before the 1st group
            diarized = None
            if job.options.speakers is not None:  # the speaker model runs beside the windows' transcription
                timeout = settings.calls.diarization_timeout_seconds
                backend = self.transcriber.backend
                diarized = asyncio.create_task(diarize_file(backend, path, job.options.speakers, timeout))
            try:
                stopped = await self._groups(stream, job, checkpoint, prefix, status, life, started)
                turns = None if diarized is None or stopped is not None else await diarized
            except BackendError as exc:
                if not isinstance(exc, BackendRejected) and checkpoint.groups:
                    await self._save_progress(prefix, status, checkpoint)  # the retry resumes here
                raise
            finally:
                if diarized is not None:
                    diarized.cancel()
                stream.close()
        finally:
            path.unlink(missing_ok=True)
        if stopped is not None:
            return stopped
        return await self._complete(prefix, status, checkpoint, stream.seconds, job, started, turns)

    async def _groups(
        self,
        stream: AudioStream,
        job: JobMessage,
        checkpoint: Checkpoint,
        prefix: str,
        status: JobStatus,
        life: Lifeline,
        started: float,
    ) -> Outcome | None:
        """Send the windows after the checkpoint; ``None`` at the end, else why it stopped early."""
        options = job.options
        # a resumed job keeps the language its first attempt detected: one language for the whole file
        language = options.language or checkpoint.language
        prompt = DecodePrompt(previous_text=options.prompt, language=language, task=options.task)
        engine_words = options.speakers is None or (await self.transcriber.backend.served_model(10.0)).word_timings
        request = WindowRequest(prompt=prompt, options=decode_options(options, engine_words))
        since_checkpoint = 0
        base_wall = checkpoint.wall_seconds
        async with aclosing(self.transcriber.results(stream, request, checkpoint.start_sample)) as results:
            async for group in results:
                checkpoint.add(group.segments)
                checkpoint.start_sample = group.end_sample
                checkpoint.groups += 1
                checkpoint.windows += len(group.windows)
                checkpoint.language = checkpoint.language or group.language
                checkpoint.wall_seconds = base_wall + time.monotonic() - started
                metrics.WINDOWS.inc(len(group.windows))
                since_checkpoint += 1
                stop = Outcome.RETURNED if life.draining.is_set() else None
                stop = Outcome.CONTINUED if stop is None and self.continuation_due(life) else stop
                if stop is not None or since_checkpoint >= self.settings.calls.checkpoint_every_groups:
                    await self._save_progress(prefix, status, checkpoint)
                    since_checkpoint = 0
                else:
                    await self._report_progress(prefix, status, checkpoint)
                if stop is not None:
                    # released: the returned message, or the continuation (a new message), is taken at once
                    await self.renew(life, 0)
                    life.lease_prefix = None
                    if stop is Outcome.CONTINUED:
                        await self._continue(job, checkpoint, status)
                    return stop
        return None

    async def _save_progress(self, prefix: str, status: JobStatus, checkpoint: Checkpoint) -> None:
        """Write the checkpoint, then the status record with its progress."""
        await self._io(self.store.write_model, prefix + CHECKPOINT_FILE, checkpoint)
        self._progress(status, checkpoint)
        await self._io(self.store.write_model, prefix + STATUS_FILE, status)

    @staticmethod
    def _progress(status: JobStatus, checkpoint: Checkpoint) -> None:
        status.progress_seconds = checkpoint.start_sample / 16_000
        status.windows, status.wall_seconds = checkpoint.windows, checkpoint.wall_seconds
        status.updated_at = time.time()

    async def _report_progress(self, prefix: str, status: JobStatus, checkpoint: Checkpoint) -> None:
        """The status record's progress after a window group between checkpoints: one small PUT.

        A failed write is logged, not retried: the next group (or checkpoint) writes it again.
        """
        self._progress(status, checkpoint)
        try:
            await self._io(self.store.write_model, prefix + STATUS_FILE, status)
        except (ClientError, BotoCoreError) as exc:
            log.warning("could not write the progress of %s: %s", status.job_id, exc)

    async def _continue(self, job: JobMessage, checkpoint: Checkpoint, status: JobStatus) -> None:
        """Send the job again (next continuation, resume point) before the receipt's 12 hours run out."""
        status.continuations = job.continuation + 1
        follow = job.model_copy(update={"continuation": job.continuation + 1, "start_sample": checkpoint.start_sample})
        await self._io(self.queue.send, follow.to_body())

    async def _complete(
        self,
        prefix: str,
        status: JobStatus,
        checkpoint: Checkpoint,
        duration: float,
        job: JobMessage,
        started: float,
        turns: list[Turn] | None = None,
    ) -> Outcome:
        segments = checkpoint.typed_segments()
        rendered = render_outputs(segments, duration, checkpoint.language, job.options, turns, job.key)
        files = {name: file for name, file in output_files().items() if name in rendered}
        for name, (body, content_type) in rendered.items():
            await self._io(self.store.put, prefix + files[name], body, content_type)
        status.state, status.audio_seconds, status.progress_seconds = "completed", duration, duration
        status.windows, status.wall_seconds = checkpoint.windows, checkpoint.wall_seconds
        status.outputs = {name: prefix + file for name, file in files.items()}
        status.updated_at = time.time()
        await self._io(self.store.write_model, prefix + CHECKPOINT_FILE, checkpoint)
        await self._io(self.store.write_model, prefix + STATUS_FILE, status)
        metrics.AUDIO_SECONDS.inc(duration)
        if duration > 0:
            metrics.WALL_PER_AUDIO.observe((time.monotonic() - started) / duration)
        return Outcome.COMPLETED

    async def _fail(self, prefix: str, status: JobStatus, error: JobError) -> Outcome:
        log.warning("job %s (%s) failed: %s: %s", status.job_id, status.key, error.reason, error.message)
        status.state, status.error, status.updated_at = "failed", error, time.time()
        await self._io(self.store.write_model, prefix + STATUS_FILE, status)
        metrics.FAILURES.labels(reason=error.reason).inc()
        return Outcome.FAILED

    async def _retry(self, prefix: str, status: JobStatus, error: JobError, life: Lifeline) -> Outcome:
        log.warning("job %s (%s) will be retried: %s: %s", status.job_id, status.key, error.reason, error.message)
        status.state, status.error, status.updated_at = "retrying", error, time.time()
        try:
            await self._io(self.store.write_model, prefix + STATUS_FILE, status)
            await self.renew(life, 0)  # released: the retry after the back-off is not a duplicate
        except (ClientError, BotoCoreError) as exc:
            log.warning("could not record the retry of %s: %s", status.job_id, exc)
        metrics.FAILURES.labels(reason=error.reason).inc()
        return Outcome.RETRIED
