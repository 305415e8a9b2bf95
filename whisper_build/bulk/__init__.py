"""Bulk transcription jobs: S3 in, S3 out, an SQS queue between (docs/bulk.md).

* :mod:`~whisper_build.bulk.messages` (the job message), :mod:`~whisper_build.bulk.records` (output
  keys, status record, checkpoint), :mod:`~whisper_build.bulk.outputs` (the four output files),
  :mod:`~whisper_build.bulk.settings` (``WHISPER_BULK_*``), :mod:`~whisper_build.bulk.aws` (S3 and SQS calls).
* :mod:`~whisper_build.bulk.job` — one job, :mod:`~whisper_build.bulk.outcome` — what it ends in;
  :mod:`~whisper_build.bulk.worker` — the worker process;
  :mod:`~whisper_build.bulk.admission` and :mod:`~whisper_build.bulk.yielding` — when its calls may go to
  Triton; :mod:`~whisper_build.bulk.metrics` — its Prometheus metrics.
* :mod:`~whisper_build.bulk.cli` and :mod:`~whisper_build.bulk.listing` — ``make submit`` / ``jobs`` /
  ``fetch``; :mod:`~whisper_build.bulk.demo` — ``make bulk-demo``; :mod:`~whisper_build.bulk.local` — the
  local S3 + SQS endpoint (moto server mode) wired like AWS.
"""
