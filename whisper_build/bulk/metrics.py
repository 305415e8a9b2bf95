"""The bulk worker's Prometheus metrics (docs/contracts.md §7b, served on its ``/metrics``).

Queue depth and the oldest message's age are the queue's own: CloudWatch ``AWS/SQS``
``ApproximateNumberOfMessagesVisible`` / ``...NotVisible`` / ``ApproximateAgeOfOldestMessage`` (the bulk
stack's alarms) and ``make jobs``; a worker cannot report them while it is scaled to zero.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

JOBS = Counter("whisper_bulk_jobs_total", "Messages a worker finished with, by outcome", ["outcome"])
"""``outcome``: completed | failed | duplicate | retried | continued | returned | ignored."""
FAILURES = Counter("whisper_bulk_failures_total", "Job failures and retries by reason", ["reason"])
AUDIO_SECONDS = Counter("whisper_bulk_audio_seconds_total", "Seconds of audio of completed jobs")
WINDOWS = Counter("whisper_bulk_windows_total", "Windows sent to the model")
IN_PROGRESS = Gauge("whisper_bulk_files_in_progress", "Jobs this worker is working on now")
WALL_PER_AUDIO = Histogram(
    "whisper_bulk_wall_per_audio_ratio",
    "Per completed file: wall seconds transcribing ÷ audio seconds",
    buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
)
