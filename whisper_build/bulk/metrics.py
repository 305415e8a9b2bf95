"""The bulk worker's Prometheus metrics (docs/contracts.md §7, bulk workers; served on its ``/metrics``).

The queue's own gauges come from ``GetQueueAttributes`` every :data:`QUEUE_POLL_SECONDS` while a worker
runs; at zero workers nothing reports them, and the age of the oldest waiting message exists only as
CloudWatch's ``AWS/SQS`` ``ApproximateAgeOfOldestMessage`` (the bulk stack alarms on it). What the
worker sees is each message's wait when it takes it (``whisper_bulk_queue_wait_seconds``).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

JOBS = Counter("whisper_bulk_jobs_total", "Messages a worker finished with, by outcome", ["outcome"])
"""``outcome``: completed | failed | duplicate | retried | continued | returned | ignored."""
FAILURES = Counter("whisper_bulk_failures_total", "Job failures and retries by reason", ["reason"])
AUDIO_SECONDS = Counter("whisper_bulk_audio_seconds_total", "Seconds of audio of completed jobs")
WINDOWS = Counter("whisper_bulk_windows_total", "Windows sent to the model")
IN_PROGRESS = Gauge("whisper_bulk_files_in_progress", "Jobs this worker is working on now")
QUEUE_MESSAGES = Gauge("whisper_bulk_queue_messages", "Messages in the job queue (GetQueueAttributes)", ["state"])
"""``state``: waiting (visible) | in_flight (received, not deleted) | delayed."""
QUEUE_WAIT = Histogram(
    "whisper_bulk_queue_wait_seconds",
    "Per received job message: seconds from sending to this receive",
    buckets=(1, 10, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 4 * 86400),
)
QUEUE_POLL_SECONDS = 30.0
WALL_PER_AUDIO = Histogram(
    "whisper_bulk_wall_per_audio_ratio",
    "Per completed file: wall seconds transcribing ÷ audio seconds",
    buckets=(0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
)
YIELDING = Gauge(
    "whisper_bulk_yielding", "1 while bulk Triton calls wait for synchronous requests on a shared Triton (yield gate)"
)
YIELD_SECONDS = Counter(
    "whisper_bulk_yield_seconds_total", "Seconds bulk Triton calls waited for synchronous requests (summed over calls)"
)
