"""``make submit`` / ``make jobs`` / ``make fetch`` against the local endpoint, with make bulk-local's exports."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from bulk_support import new_job_path

from whisper_build.bulk.local import DUMMY_CREDENTIALS, LocalAws
from whisper_build.bulk.records import JobError, JobStatus
from whisper_build.workstation.local_triton import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


def make(target: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "install", target, *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_submit_jobs_and_fetch_through_make(local_aws: LocalAws, tmp_path: Path) -> None:
    path, target = new_job_path(local_aws.endpoint_url)
    env = {
        **os.environ, **DUMMY_CREDENTIALS,
        "WHISPER_BULK_ENDPOINT_URL": path.endpoint_url, "WHISPER_BULK_BUCKET": path.bucket,
        "WHISPER_BULK_QUEUE_URL": path.queue_url, "WHISPER_BULK_DEAD_LETTER_URL": path.dead_letter_url,
    }  # fmt: skip
    src = tmp_path / "recordings"
    (src / "calls").mkdir(parents=True)
    (src / "a.wav").write_bytes(b"RIFF")
    (src / "calls" / "b.wav").write_bytes(b"RIFF")
    submitted = make("submit", env, f"SRC={src}")
    assert submitted.returncode == 0, submitted.stderr
    assert f"2 jobs submitted: uploaded to s3://{path.bucket}/input/" in submitted.stdout
    enqueued = make("submit", env, f"SRC=s3://{path.bucket}/input/calls/")
    assert "1 jobs enqueued" in enqueued.stdout, enqueued.stdout + enqueued.stderr
    # a worker's records (no worker runs here): one failed input
    failed = JobStatus(
        state="failed", bucket=path.bucket, key="input/a.wav", job_id="f00", model="tiny.en", attempts=1,
        error=JobError(reason="not_audio", message="the file has no audio stream", retryable=False),
    )  # fmt: skip
    target.store.write_model("output/a.wav/f00/status.json", failed)
    listed = make("jobs", env)
    assert listed.returncode == 0, listed.stderr
    assert "jobs: waiting 1, running 0, retrying 0, completed 0, failed 1" in listed.stdout
    assert "queue: 4 waiting, 0 in flight, 0 dead-lettered" in listed.stdout  # test event, 2 uploads, 1 enqueued
    assert "failed: input/a.wav: not_audio: the file has no audio stream" in listed.stdout
    fetched = make("fetch", env, f"OUT_DIR={tmp_path / 'out'}")
    assert "fetched 0 results and 1 failures" in fetched.stdout, fetched.stdout + fetched.stderr
    assert JobStatus.model_validate_json((tmp_path / "out" / "a.error.json").read_text()).error == failed.error
