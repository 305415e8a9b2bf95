"""``make submit`` / ``make jobs`` / ``make fetch`` against the local endpoint (moto), with make bulk-local's exports:
what they refuse, re-submitted files, progress."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bulk_support import new_job_path

from whisper_build.bulk.cli import Target, fetch, jobs, main, submit
from whisper_build.bulk.local import DUMMY_CREDENTIALS, JobPath, LocalAws
from whisper_build.bulk.messages import JobOptions
from whisper_build.bulk.records import OUTPUT_FILES, JobError, JobStatus
from whisper_build.paths import REPO_ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def local_aws() -> Iterator[LocalAws]:
    with LocalAws() as aws:
        yield aws


def make(target: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-o", "install-serving", target, *args],
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
    # a worker's records (no worker runs here): one failed input, of the version uploaded
    info = target.store.head("input/a.wav")
    assert info is not None
    failed = JobStatus(
        state="failed", bucket=path.bucket, key="input/a.wav", job_id="f00", model="tiny.en", attempts=1,
        version_id=info.version_id, etag=info.etag,
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


def local_args(path: JobPath, *args: str) -> list[str]:
    """``python -m whisper_build.bulk.cli`` arguments for the local job path, then ``args``."""
    return [
        "--endpoint-url", path.endpoint_url, "--bucket", path.bucket,
        "--queue-url", path.queue_url, "--dead-letter-url", path.dead_letter_url, *args,
    ]  # fmt: skip


def test_submit_refuses_what_holds_no_audio_and_takes_one_file(
    local_aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    path, target = new_job_path(local_aws.endpoint_url)
    (tmp_path / "empty").mkdir()
    (tmp_path / "pictures").mkdir()
    (tmp_path / "pictures" / "scan.png").write_bytes(b"\x89PNG")
    refusals = {
        str(tmp_path / "no" / "such" / "folder"): "no such file or folder",
        str(tmp_path / "empty"): "holds no audio (no files)",
        str(tmp_path / "pictures"): "holds no audio (1 files, none named as audio)",
        f"s3://{path.bucket}/input/nothing-here/": "no object under",
    }
    for src, words in refusals.items():
        with pytest.raises(SystemExit) as refused:
            main(local_args(path, "submit", "--src", src))
        assert words in str(refused.value), src
    assert target.store.keys("input/") == []
    recording = tmp_path / "meeting.wav"
    recording.write_bytes(b"RIFF")
    assert main(local_args(path, "submit", "--src", str(recording))) == 0
    assert "1 jobs submitted" in capsys.readouterr().out
    assert target.store.keys("input/") == ["input/meeting.wav"]


def test_make_submit_of_a_missing_folder_exits_non_zero(local_aws: LocalAws, tmp_path: Path) -> None:
    path, _ = new_job_path(local_aws.endpoint_url)
    env = {**os.environ, **DUMMY_CREDENTIALS, **path.environment(), "WHISPER_BULK_ENDPOINT_URL": path.endpoint_url}
    env |= {"WHISPER_BULK_QUEUE_URL": path.queue_url, "WHISPER_BULK_DEAD_LETTER_URL": path.dead_letter_url}
    submitted = make("submit", env, f"SRC={tmp_path / 'no-such-folder'}")
    assert submitted.returncode != 0
    assert "no such file or folder" in submitted.stderr
    assert "jobs submitted" not in submitted.stdout


def completed(path: JobPath, target: Target, key: str, text: str) -> JobStatus:
    """Write a completed job of ``key``'s newest version whose transcript is ``text`` (what a worker leaves)."""
    info = target.store.head(key)
    assert info is not None
    prefix = f"output/{key.removeprefix('input/')}/{info.identity}/"
    for file in OUTPUT_FILES.values():
        target.store.put(prefix + file, text.encode(), "text/plain")
    status = JobStatus(
        state="completed", bucket=path.bucket, key=key, version_id=info.version_id, etag=info.etag,
        job_id=info.identity, model="tiny.en", audio_seconds=60, progress_seconds=60,
        outputs={name: prefix + file for name, file in OUTPUT_FILES.items()},
    )  # fmt: skip
    target.store.write_model(prefix + "status.json", status)
    return status


def test_a_resubmitted_file_is_one_job_of_its_newest_version(
    local_aws: LocalAws, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path, target = new_job_path(local_aws.endpoint_url)
    src = tmp_path / "recordings"
    src.mkdir()
    (src / "a.wav").write_bytes(b"RIFF first")
    submit(target, str(src), JobOptions())
    completed(path, target, "input/a.wav", "old words")
    (src / "a.wav").write_bytes(b"RIFF second")
    submit(target, str(src), JobOptions())  # version 2: not started yet
    capsys.readouterr()
    assert jobs(target) == {"waiting": 1, "running": 0, "retrying": 0, "completed": 0, "failed": 0}
    listed = capsys.readouterr().out
    assert "jobs: waiting 1, running 0, retrying 0, completed 0, failed 0" in listed
    assert "waiting: input/a.wav: not started (version 2 of 2)" in listed
    assert fetch(target, tmp_path / "early") == {"not_final": 1}
    assert not (tmp_path / "early" / "a.txt").exists()  # never the old version's result
    completed(path, target, "input/a.wav", "new words")
    assert jobs(target)["completed"] == 1
    assert fetch(target, tmp_path / "out") == {"completed": 1}
    assert (tmp_path / "out" / "a.txt").read_text() == "new words"


def test_jobs_shows_length_percent_elapsed_and_time_left(
    local_aws: LocalAws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, target = new_job_path(local_aws.endpoint_url)
    (tmp_path / "long.flac").write_bytes(b"fLaC")
    submit(target, str(tmp_path / "long.flac"), JobOptions())
    now, info = time.time(), target.store.head("input/long.flac")
    assert info is not None
    running = JobStatus(
        state="running", bucket=path.bucket, key="input/long.flac", job_id="j1", model="tiny.en",
        version_id=info.version_id, etag=info.etag,
        audio_seconds=1200, progress_seconds=240, wall_seconds=60, windows=8, started_at=now - 100, updated_at=now,
    )  # fmt: skip
    target.store.write_model("output/long.flac/j1/status.json", running)
    capsys.readouterr()
    jobs(target)
    listed = capsys.readouterr().out
    # 240 s of 1200 in 60 s of transcription: 4 audio s/s, 960 s left → 240 s (± the seconds this test took)
    line = re.search(
        r"running: input/long\.flac: 1200 s of audio, 20% done, elapsed 1 min 4\d s, about (\d) min", listed
    )
    assert line is not None, listed
    assert line.group(1) in ("3", "4")
    total = "total: 0 of 1 files final (1 in progress), 1200 s of audio known (1 files), 20% done, elapsed 1 min 4"
    assert total in listed
    assert re.search(r"20% done, elapsed 1 min 4\d s, about [34] min \d\d s left\n", listed), listed
