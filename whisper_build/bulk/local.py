"""A real S3 + SQS HTTP endpoint on 127.0.0.1 (moto's server mode), wired like the bulk stack.

:class:`LocalAws` starts ``moto.server.ThreadedMotoServer`` bound to 127.0.0.1 (moto's default is
0.0.0.0) on a port the OS picks; :func:`provision` creates what the bulk stack creates — the dead-letter queue,
the job queue with its ``RedrivePolicy`` and visibility timeout, a versioned job bucket and its
object-created notification on the input prefix — so that an upload reaches the queue through an S3
event, as in AWS. boto3 talks to it with ``endpoint_url`` and dummy credentials.
Docs: docs/bulk.md, "Locally, for real".
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from types import TracebackType

from whisper_build.bulk.aws import clients

REGION = "us-east-1"
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": REGION}
"""moto accepts any credentials; these keep boto3 from looking for real ones."""


@dataclass(frozen=True)
class JobPath:
    """The local job bucket and queues: ``endpoint_url``, ``bucket``, ``queue_url``, ``dead_letter_url``."""

    endpoint_url: str
    bucket: str
    queue_url: str
    dead_letter_url: str
    region: str = REGION

    def environment(self) -> dict[str, str]:
        """``WHISPER_BULK_*`` and the dummy credentials a worker process needs for this endpoint."""
        return {
            **DUMMY_CREDENTIALS,
            "WHISPER_BULK_ENDPOINT_URL": self.endpoint_url,
            "WHISPER_BULK_BUCKET": self.bucket,
            "WHISPER_BULK_QUEUE_URL": self.queue_url,
            "WHISPER_BULK_REGION": self.region,
        }


class LocalAws:
    """moto's threaded server on ``127.0.0.1`` (a context manager); ``port`` and ``endpoint_url`` once started.

    Port 0 (the default) lets the OS pick the port as the server binds it, so no other process can
    take it in between: a taken port would leave ``ThreadedMotoServer.start()`` waiting forever
    (:mod:`whisper_build.workstation.ports`).

    Raises:
        PortTaken: (on start) a set ``port`` is in use.
    """

    def __init__(self, port: int = 0) -> None:
        from moto.server import ThreadedMotoServer

        for name, value in DUMMY_CREDENTIALS.items():
            os.environ.setdefault(name, value)
        self.port = port
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.endpoint_url = ""

    def __enter__(self) -> LocalAws:
        from whisper_build.workstation.ports import PortTaken, ports_in_use

        if self.port and ports_in_use("127.0.0.1", {"port": self.port}):
            raise PortTaken(f"127.0.0.1:{self.port} is already in use")
        self._server.start()
        self.port = self._server.get_host_and_port()[1]
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.stop()


def provision(
    endpoint_url: str,
    *,
    bucket: str = "whisper-bulk-local",
    input_prefix: str = "input/",
    max_receive_count: int = 3,
    visibility_timeout_seconds: int = 600,
) -> JobPath:
    """Create the bulk stack's queue, dead-letter queue, bucket and notification on ``endpoint_url``."""
    s3, sqs = clients(REGION, endpoint_url)
    dead = sqs.create_queue(QueueName=f"{bucket}-dlq")["QueueUrl"]
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": str(max_receive_count)})
    queue = sqs.create_queue(
        QueueName=f"{bucket}-jobs",
        Attributes={"RedrivePolicy": redrive, "VisibilityTimeout": str(visibility_timeout_seconds)},
    )["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.create_bucket(Bucket=bucket)
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "QueueArn": queue_arn,
                    "Events": ["s3:ObjectCreated:*"],
                    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": input_prefix}]}},
                }
            ]
        },
    )
    return JobPath(endpoint_url, bucket, queue, dead)
