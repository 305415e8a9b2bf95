"""The job-message schema: one :class:`JobMessage`, whether S3 or ``make submit`` sent it.

An SQS body is one of:

* an S3 event notification (S3 user guide, "Event message structure", version 2.x): ``Records[]``
  with ``eventName`` ``ObjectCreated:*``, ``s3.bucket.name`` and ``s3.object.key`` — the key
  URL-encoded (``+`` for spaces), no version unless the bucket is versioned — each record one job;
* ``{"Event": "s3:TestEvent", ...}``, which S3 sends when a notification is configured: no job;
* a job written by :meth:`JobMessage.to_body` (``make submit`` for objects that already exist —
  they produce no event — and the worker's continuation message), marked ``"whisper_bulk": 1``.

Anything else raises :class:`BadMessage` (the worker deletes it and counts ``bad_message``).
Docs: docs/bulk.md, "Messages and outputs".
"""

from __future__ import annotations

import json
from typing import Any, Literal
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from whisper_build.serving.prompt import normalize_language

SCHEMA_VERSION = 1
MARKER = "whisper_bulk"
TEST_EVENT = "s3:TestEvent"


class BadMessage(ValueError):
    """The SQS body is not an S3 event, a test event or a job message; the text says what is wrong."""


class SpeakerJob(BaseModel):
    """Speakers for a job (``diarized_json``, speaker-tagged srt/vtt/verbose_json, ``speakers.rttm``).

    Attributes: ``min_speakers``/``max_speakers``: bounds of the clustering's estimate (1-15).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_speakers: int = Field(1, ge=1, le=15)
    max_speakers: int = Field(15, ge=1, le=15)

    @model_validator(mode="after")
    def _ordered(self) -> SpeakerJob:
        if self.max_speakers < self.min_speakers:
            raise ValueError(f"max_speakers ({self.max_speakers}) is below min_speakers ({self.min_speakers})")
        return self


class JobOptions(BaseModel):
    """What changes the result of a job (all of it goes into the job id).

    Attributes:
        language: Whisper language code, or ``None`` to detect (English-only models: ``en`` or ``None``).
        prompt: previous-text prompt for every window.
        task: ``transcribe`` or ``translate`` (to English).
        word_timestamps: word timings in ``verbose_json`` (ctranslate2 and torch engines).
        temperature: first decoding temperature (0-1; the model's fallback goes up from it).
        speakers: diarize the file and write the speaker outputs (``None``: no speakers).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    language: str | None = None
    prompt: str = ""
    task: Literal["transcribe", "translate"] = "transcribe"
    word_timestamps: bool = False
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    speakers: SpeakerJob | None = None

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str | None) -> str | None:
        return normalize_language(value)


class JobMessage(BaseModel):
    """One input object to transcribe.

    Attributes:
        bucket / key: the input object (key decoded, never URL-encoded).
        version_id: the S3 version when known (a versioned bucket's event or ``make submit``);
            the worker's HeadObject fills the identity otherwise.
        options: :class:`JobOptions`.
        continuation: 0 for the first message of a job; n for the n-th continuation the worker sent
            before SQS's 12-hour visibility limit (the checkpoint says where to resume).
        start_sample: where a continuation resumes (informational; the checkpoint is authoritative).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    bucket: str = Field(min_length=3)
    key: str = Field(min_length=1)
    version_id: str | None = None
    options: JobOptions = JobOptions()
    continuation: int = Field(0, ge=0)
    start_sample: int = Field(0, ge=0)

    def to_body(self) -> str:
        """The SQS body of this job (compact JSON, marked as a whisper bulk job)."""
        return json.dumps({MARKER: SCHEMA_VERSION, **self.model_dump(mode="json")}, separators=(",", ":"))


def parse_body(body: str) -> list[JobMessage]:
    """The jobs of one SQS message body (module docstring); ``[]`` for an S3 test event.

    Raises:
        BadMessage: not JSON, or none of the accepted shapes; the message names the problem.
    """
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadMessage(f"the message body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadMessage("the message body is not a JSON object")
    if data.get("Event") == TEST_EVENT:
        return []
    try:
        if MARKER in data:
            if data.pop(MARKER) != SCHEMA_VERSION:
                raise BadMessage(f"unknown {MARKER} schema version; this worker reads version {SCHEMA_VERSION}")
            return [JobMessage.model_validate(data)]
        if isinstance(data.get("Records"), list):
            return [_from_record(record) for record in data["Records"] if _is_object_created(record)]
    except ValidationError as exc:
        raise BadMessage(f"invalid job message: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") from None
    raise BadMessage(f"neither an S3 event, an {TEST_EVENT} nor a {MARKER} job: keys {sorted(data)[:5]}")


def _is_object_created(record: Any) -> bool:
    return isinstance(record, dict) and str(record.get("eventName", "")).startswith("ObjectCreated:")


def _from_record(record: dict[str, Any]) -> JobMessage:
    try:
        s3 = record["s3"]
        obj = s3["object"]
        return JobMessage(bucket=s3["bucket"]["name"], key=unquote_plus(obj["key"]), version_id=obj.get("versionId"))
    except (KeyError, TypeError):
        raise BadMessage("an ObjectCreated record without s3.bucket.name / s3.object.key") from None
