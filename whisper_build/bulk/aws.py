"""The S3 and SQS calls of the bulk path (boto3, blocking: the worker runs them in threads).

One :class:`JobStore` (job bucket) and one :class:`JobQueue` per process; ``endpoint_url`` points
both at a local S3 + SQS endpoint (:mod:`whisper_build.bulk.local`) instead of AWS.
Docs: docs/bulk.md, "What gets deployed".
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError
from pydantic import BaseModel

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

ModelT = TypeVar("ModelT", bound=BaseModel)
MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchVersion"})
MULTIPART_THRESHOLD = 8 * 1024**2
"""s3transfer's default ``multipart_threshold`` (boto3 docs, ``TransferConfig``): above it, ranged parts."""
CHUNK_BYTES = 1024**2
MAX_RECEIVE = 10
"""SQS's most messages per ReceiveMessage call (API Reference, ReceiveMessage ``MaxNumberOfMessages``)."""
PRECONDITION_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
RETRIES = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=10, read_timeout=60, max_pool_connections=64
)
"""botocore's standard retry mode: throttling and 5xx retried with back-off (botocore docs, "Retries");
a connection pool for every slot's calls at once (botocore's default is 10)."""


def is_missing(exc: ClientError) -> bool:
    """True when S3 answered that the object (or version) does not exist."""
    return str(exc.response.get("Error", {}).get("Code")) in MISSING_CODES


def clients(region: str, endpoint_url: str | None = None) -> tuple[S3Client, SQSClient]:
    """An S3 and an SQS client for ``region`` (at ``endpoint_url`` when given)."""
    session = boto3.session.Session(region_name=region)
    s3 = session.client("s3", endpoint_url=endpoint_url, config=RETRIES)
    sqs = session.client("sqs", endpoint_url=endpoint_url, config=RETRIES)
    return s3, sqs


@dataclass(frozen=True)
class ObjectInfo:
    """HeadObject's answer: ``size`` in bytes, ``etag`` (quotes stripped), ``version_id`` (versioned buckets)."""

    size: int
    etag: str
    version_id: str | None

    @property
    def identity(self) -> str:
        """What names this content: the version id, else the ETag."""
        return self.version_id or self.etag


class JobStore:
    """The job bucket: inputs, results, status records, checkpoints and leases."""

    def __init__(self, s3: S3Client, bucket: str) -> None:
        self.s3 = s3
        self.bucket = bucket

    def head(self, key: str, version_id: str | None = None) -> ObjectInfo | None:
        """HeadObject of ``key`` (at ``version_id``), ``None`` when it does not exist.

        Raises: ``botocore.exceptions.ClientError`` for anything but a missing object.
        """
        try:
            extra = {"VersionId": version_id} if version_id else {}
            head = self.s3.head_object(Bucket=self.bucket, Key=key, **extra)  # type: ignore[arg-type]
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        return ObjectInfo(int(head["ContentLength"]), head["ETag"].strip('"'), head.get("VersionId"))

    def download(self, key: str, info: ObjectInfo, path: Path) -> None:
        """Stream the object (that version) to ``path``: never held in memory.

        Up to :data:`MULTIPART_THRESHOLD` one GetObject read in chunks (``info`` already has the size,
        so no second HeadObject); larger objects through s3transfer's ranged, concurrent parts.
        """
        extra = {"VersionId": info.version_id} if info.version_id else {}
        if info.size > MULTIPART_THRESHOLD:
            self.s3.download_file(self.bucket, key, str(path), ExtraArgs=extra or None)
            return
        body = self.s3.get_object(Bucket=self.bucket, Key=key, **extra)["Body"]  # type: ignore[arg-type]
        with closing(body), open(path, "wb") as out:  # closed on a failed write too: the connection goes back
            for chunk in body.iter_chunks(CHUNK_BYTES):
                out.write(chunk)

    def read_model(self, key: str, model: type[ModelT]) -> ModelT | None:
        """A JSON record parsed as ``model``, ``None`` when absent."""
        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        return model.model_validate_json(body)

    def read_model_etag(self, key: str, model: type[ModelT]) -> tuple[ModelT, str] | None:
        """A JSON record and its ETag, ``None`` when absent."""
        try:
            answer = self.s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if is_missing(exc):
                return None
            raise
        return model.model_validate_json(answer["Body"].read()), answer["ETag"]

    def put_conditional(self, key: str, record: BaseModel, *, if_match: str | None) -> str | None:
        """PutObject only if the object is unchanged (``if_match``: its ETag) or absent (``None``).

        S3 conditional writes (``If-Match`` / ``If-None-Match: *``; S3 user guide, "How to prevent object
        overwrites with conditional writes"). Returns the new ETag, ``None`` when the condition failed.
        """
        condition = {"IfMatch": if_match} if if_match else {"IfNoneMatch": "*"}
        try:
            answer = self.s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=record.model_dump_json().encode(),
                ContentType="application/json",
                **condition,  # type: ignore[arg-type]
            )
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code")) in PRECONDITION_CODES:
                return None
            raise
        return answer["ETag"]

    def write_model(self, key: str, record: BaseModel) -> None:
        """PutObject of a record as JSON."""
        self.put(key, record.model_dump_json(), "application/json")

    def put(self, key: str, body: str | bytes, content_type: str) -> None:
        """PutObject of text or bytes."""
        data = body.encode() if isinstance(body, str) else body
        self.s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)

    def keys(self, prefix: str) -> list[str]:
        """Every key under ``prefix`` (ListObjectsV2, all pages)."""
        paginator = self.s3.get_paginator("list_objects_v2")
        return [
            item["Key"]
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix)
            for item in page.get("Contents", [])
        ]


@dataclass(frozen=True)
class Received:
    """One received SQS message.

    Attributes: ``body``, ``receipt`` handle, ``message_id``, ``receive_count``, ``sent_at`` (Unix
    seconds, SQS's ``SentTimestamp``).
    """

    body: str
    receipt: str
    message_id: str
    receive_count: int
    sent_at: float = 0.0


def _received(message: MessageTypeDef) -> Received:
    attributes = message.get("Attributes", {})
    count = int(attributes.get("ApproximateReceiveCount", "1"))
    sent = int(attributes.get("SentTimestamp", "0")) / 1000
    return Received(message["Body"], message["ReceiptHandle"], message["MessageId"], count, sent)


class JobQueue:
    """The job queue: receive, delete, change visibility, send."""

    def __init__(self, sqs: SQSClient, url: str) -> None:
        self.sqs = sqs
        self.url = url

    def receive_many(self, limit: int, wait_seconds: int, visibility_seconds: int) -> list[Received]:
        """Up to ``limit`` (1–10) messages in one ReceiveMessage call; empty when none came within ``wait_seconds``.

        A long poll returns as soon as one message is there, not when ``limit`` are (SQS Developer
        Guide, "Amazon SQS short and long polling").
        """
        answer = self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=max(1, min(MAX_RECEIVE, limit)),
            WaitTimeSeconds=wait_seconds,
            VisibilityTimeout=visibility_seconds,
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"],
        )
        return [_received(message) for message in answer.get("Messages") or []]

    def delete(self, receipt: str) -> None:
        """DeleteMessage (the job is done, failed for good, or continued in a new message)."""
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=receipt)

    def set_visibility(self, receipt: str, seconds: int) -> None:
        """ChangeMessageVisibility: extend (heartbeat), delay (back-off) or return at once (0)."""
        self.sqs.change_message_visibility(QueueUrl=self.url, ReceiptHandle=receipt, VisibilityTimeout=seconds)

    def send(self, body: str) -> None:
        """SendMessage (``make submit``, continuation messages)."""
        self.sqs.send_message(QueueUrl=self.url, MessageBody=body)

    def counts(self) -> dict[str, int]:
        """Visible, in-flight and delayed message counts (GetQueueAttributes)."""
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        return {
            "visible": int(attributes["ApproximateNumberOfMessages"]),
            "in_flight": int(attributes["ApproximateNumberOfMessagesNotVisible"]),
            "delayed": int(attributes["ApproximateNumberOfMessagesDelayed"]),
        }
