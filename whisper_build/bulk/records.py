"""Where a job's results go and what its status record and checkpoint hold.

Output keys (exactly one result per input, whatever the deliveries): the job id is a hash of the input's
bucket, key and identity (S3 version id, else ETag, from HeadObject) with the model and the options
that change the result, so a redelivered or duplicated message finds the same folder:

    <output_prefix><input key without input_prefix>/<job id>/
        transcript.json   verbose_json (OpenAI shape: segments, words when asked)
        transcript.srt    SubRip
        transcript.vtt    WebVTT
        transcript.txt    the text
        status.json       :class:`JobStatus`
        checkpoint.json   :class:`Checkpoint` while the job runs (kept after, small)
        lease.json        :class:`Lease`: who works on it until when
Docs: docs/bulk.md, "Exactly one result per input".
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from whisper_build.bulk.messages import JobOptions
from whisper_build.serving.results import Segment, Word
from whisper_build.serving.transcription.formats import bulk_files

State = Literal["queued", "running", "retrying", "completed", "failed"]
FINAL_STATES: frozenset[str] = frozenset({"completed", "failed"})


def output_files() -> dict[str, str]:
    """Output key → file name in the job folder, read from the formats table.

    ``make fetch`` renames them to ``<name>.json`` etc.
    """
    return {key: f.bulk.name for key, f in bulk_files().items() if f.bulk is not None}


OUTPUT_FILES = output_files()
"""The table's output files when this module was imported (:func:`output_files`)."""
STATUS_FILE = "status.json"
CHECKPOINT_FILE = "checkpoint.json"
LEASE_FILE = "lease.json"
JOB_ID_LENGTH = 16


def job_id(bucket: str, key: str, identity: str, model: str, options: JobOptions) -> str:
    """Hex digest (16 characters) of everything that makes the result: input, its version, model, options.

    ``speakers`` counts only when set, so jobs without speakers keep the ids they had before it existed.
    """
    dumped = options.model_dump()
    if dumped.get("speakers") is None:
        dumped.pop("speakers", None)
    material = json.dumps(
        {"bucket": bucket, "key": key, "identity": identity, "model": model, "options": dumped}, sort_keys=True
    )
    return hashlib.sha256(material.encode()).hexdigest()[:JOB_ID_LENGTH]


def job_prefix(input_key: str, input_prefix: str, output_prefix: str, job: str) -> str:
    """``<output_prefix><key without input_prefix>/<job>/`` (the key kept whole when outside the prefix)."""
    relative = input_key[len(input_prefix) :] if input_key.startswith(input_prefix) else input_key
    return f"{output_prefix}{relative}/{job}/"


class JobError(BaseModel):
    """Why a job failed or is retried: a stable ``reason`` (metrics label) and a message for people."""

    model_config = ConfigDict(frozen=True)

    reason: str
    message: str
    retryable: bool


class JobStatus(BaseModel):
    """The status record ``status.json`` of one job.

    Attributes:
        state: ``running`` | ``retrying`` (a transient failure; SQS redelivers, then dead-letters) |
            ``completed`` | ``failed`` (bad input: not retried).
        bucket / key / version_id / etag: the input and the identity the result belongs to.
        job_id: the folder's id (:func:`job_id`).
        model / engine: what transcribed it.
        audio_seconds: the audio's duration in seconds: while running the length the file's header
            declares (``None`` when the format does not state it), once completed the decoded length;
            ``progress_seconds`` how far the transcription is (written after every window group).
        wall_seconds: time spent transcribing, summed over attempts and continuations.
        started_at: Unix time the job's first attempt began (``make jobs``' elapsed time).
        windows: windows sent to the model (silent ones are skipped).
        attempts: receives of the job's messages that started work.
        continuations: continuation messages sent before SQS's 12-hour visibility limit.
        error: the last error.
        updated_at: Unix time of this record.
    """

    model_config = ConfigDict(extra="forbid")

    state: State
    bucket: str
    key: str
    version_id: str | None = None
    etag: str | None = None
    job_id: str
    model: str
    engine: str | None = None
    options: JobOptions = JobOptions()
    audio_seconds: float | None = None
    progress_seconds: float = 0.0
    wall_seconds: float = 0.0
    windows: int = 0
    attempts: int = 0
    continuations: int = 0
    started_at: float | None = None
    error: JobError | None = None
    outputs: dict[str, str] = Field(default_factory=dict)
    updated_at: float = Field(default_factory=time.time)

    @property
    def final(self) -> bool:
        """True for ``completed`` and ``failed``."""
        return self.state in FINAL_STATES


class Checkpoint(BaseModel):
    """A job's progress: resume by decoding from the start and sending only windows after ``start_sample``.

    Attributes:
        start_sample: the last finished window group's end (16 kHz samples; a window boundary).
        groups / windows: window groups and windows finished so far.
        segments: the file-relative segments so far (``Segment`` fields, words included).
        language: the first language the model reported.
        wall_seconds: transcription time so far.
    """

    model_config = ConfigDict(extra="forbid")

    job_id: str
    start_sample: int = 0
    groups: int = 0
    windows: int = 0
    segments: list[dict[str, Any]] = Field(default_factory=list)
    language: str | None = None
    wall_seconds: float = 0.0

    def add(self, segments: list[Segment]) -> None:
        """Append finished segments."""
        self.segments += [asdict(segment) for segment in segments]

    def typed_segments(self) -> list[Segment]:
        """The segments as :class:`Segment` objects."""
        return [Segment(**{**raw, "words": [Word(**word) for word in raw.get("words") or []]}) for raw in self.segments]


class Lease(BaseModel):
    """Who works on a job until when; a live lease held by another message makes a message a duplicate."""

    owner: str
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        """True while ``expires_at`` is in the future."""
        return self.expires_at > (time.time() if now is None else now)
