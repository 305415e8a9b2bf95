"""Bulk transcription jobs: S3 in, S3 out, an SQS queue between (docs/bulk.md).

* :mod:`~whisper_build.bulk.messages` — the one job-message schema (S3 events and ``make submit``).
* :mod:`~whisper_build.bulk.records` — output keys, the status record and the checkpoint.
* :mod:`~whisper_build.bulk.aws` — the S3 and SQS calls the worker and the operator commands make.
* :mod:`~whisper_build.bulk.job` — one job: checks, download, the window pipeline with checkpoints, outputs.
* :mod:`~whisper_build.bulk.worker` — the worker process: slots, heartbeat, continuation, drain, health.
* :mod:`~whisper_build.bulk.cli` — ``make submit`` / ``make jobs`` / ``make fetch`` / ``make bulk-demo``.
* :mod:`~whisper_build.bulk.local` — the local S3 + SQS endpoint (moto server mode) wired like AWS.
"""
