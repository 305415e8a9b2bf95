"""The worker's progress reports (whisper_build.bulk.job): the status record after every window group.

A fake job store records every write; a fake transcriber answers six window groups of a 48 s file.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import soundfile
from pydantic import BaseModel

from whisper_build.bulk.aws import ObjectInfo, Received
from whisper_build.bulk.job import JobRunner
from whisper_build.bulk.listing import CurrentJob, progress_line, total_line
from whisper_build.bulk.messages import JobMessage
from whisper_build.bulk.outcome import Lifeline, Outcome
from whisper_build.bulk.records import CHECKPOINT_FILE, STATUS_FILE, JobStatus
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.serving.audio.windows import Window
from whisper_build.serving.transcription.windows import GroupResult

RATE = 16_000
GROUPS, WINDOWS_PER_GROUP, WINDOW_SAMPLES = 6, 8, RATE  # 1 s windows: 8 s of audio per group


class RecordingStore:
    """A job bucket holding one WAV input; keeps a copy of every status record and counts checkpoints."""

    bucket = "jobs"

    def __init__(self, audio: bytes) -> None:
        self.audio = audio
        self.statuses: list[JobStatus] = []
        self.checkpoints = 0

    def head(self, key: str, version_id: str | None = None) -> ObjectInfo:
        return ObjectInfo(len(self.audio), "etag", "v1")

    def read_model(self, key: str, model: type[BaseModel]) -> None:
        return None

    def put_conditional(self, key: str, record: BaseModel, *, if_match: str | None) -> str:
        return "lease-etag"

    def write_model(self, key: str, record: BaseModel) -> None:
        if key.endswith(STATUS_FILE):
            assert isinstance(record, JobStatus)
            self.statuses.append(record.model_copy(deep=True))
        elif key.endswith(CHECKPOINT_FILE):
            self.checkpoints += 1

    def download(self, key: str, info: ObjectInfo, path: Path) -> None:
        path.write_bytes(self.audio)

    def put(self, key: str, body: str | bytes, content_type: str) -> None:
        return None


class SixGroups:
    """Answers :data:`GROUPS` window groups of :data:`WINDOWS_PER_GROUP` windows, no speech."""

    async def results(self, stream: object, request: object, start_sample: int = 0) -> AsyncIterator[GroupResult]:
        for index in range(GROUPS):
            first = index * WINDOWS_PER_GROUP
            windows = tuple(Window(n * WINDOW_SAMPLES, (n + 1) * WINDOW_SAMPLES) for n in range(first, first + 8))
            yield GroupResult(index=index, windows=windows, segments=[], temperatures=[], language="en")


def test_the_status_record_has_the_progress_of_every_window_group(tmp_path: Path) -> None:
    seconds = GROUPS * WINDOWS_PER_GROUP * WINDOW_SAMPLES / RATE
    soundfile.write(tmp_path / "input.wav", np.zeros(int(seconds * RATE), dtype=np.int16), RATE)
    store = RecordingStore((tmp_path / "input.wav").read_bytes())
    settings = WorkerSettings(queue_url="q", bucket="jobs", scratch_dir=str(tmp_path), checkpoint_every_groups=4)
    runner = JobRunner(settings, store, queue=None, transcriber=SixGroups())  # type: ignore[arg-type]
    life = Lifeline(Received("{}", "receipt", "message", 1))
    outcome = asyncio.run(runner.run(JobMessage(bucket="jobs", key="input/long.wav"), life))
    assert outcome is Outcome.COMPLETED
    running = [s for s in store.statuses if s.state == "running" and s.windows]
    group_seconds = WINDOWS_PER_GROUP * WINDOW_SAMPLES / RATE
    assert [s.windows for s in running] == [WINDOWS_PER_GROUP * (n + 1) for n in range(GROUPS)]
    assert [s.progress_seconds for s in running] == [group_seconds * (n + 1) for n in range(GROUPS)]
    assert {s.audio_seconds for s in running} == {seconds}  # the header's length, from the first group on
    assert all(s.started_at is not None and s.started_at <= s.updated_at for s in running)
    assert store.checkpoints == 2  # still every 4 groups (group 4), plus the final one
    assert store.statuses[-1].state == "completed"


def _run_six_groups(tmp_path: Path) -> tuple[RecordingStore, float]:
    seconds = GROUPS * WINDOWS_PER_GROUP * WINDOW_SAMPLES / RATE
    soundfile.write(tmp_path / "input.wav", np.zeros(int(seconds * RATE), dtype=np.int16), RATE)
    store = RecordingStore((tmp_path / "input.wav").read_bytes())
    settings = WorkerSettings(queue_url="q", bucket="jobs", scratch_dir=str(tmp_path))
    runner = JobRunner(settings, store, queue=None, transcriber=SixGroups())  # type: ignore[arg-type]
    life = Lifeline(Received("{}", "receipt", "message", 1))
    assert asyncio.run(runner.run(JobMessage(bucket="jobs", key="input/long.wav"), life)) is Outcome.COMPLETED
    return store, seconds


def test_a_wav_files_length_is_reported_before_its_first_window_group(tmp_path: Path) -> None:
    # GIVEN a WAV input, whose header states its length
    store, seconds = _run_six_groups(tmp_path)
    # THEN a running record states that length before any window was transcribed
    before = [s for s in store.statuses if s.state == "running" and s.windows == 0]
    assert any(s.audio_seconds == seconds for s in before), [s.audio_seconds for s in before]


def test_a_job_still_running_is_never_shown_100_percent_done() -> None:
    # GIVEN a job whose last window group came back (all of its audio) but which is still writing its results
    running = JobStatus(
        state="running", bucket="jobs", key="input/a.wav", job_id="j1", model="tiny.en",
        audio_seconds=48, progress_seconds=48, wall_seconds=12, windows=48, started_at=1000.0, updated_at=1012.0,
    )  # fmt: skip
    almost = running.model_copy(update={"key": "input/b.wav", "progress_seconds": 47.9})
    jobs = [CurrentJob(s.key, s, 1, 1, 990.0) for s in (running, almost)]
    # THEN it and the total say 99%, never 100%, until the job is final
    assert "48 s of audio, 99% done" in progress_line(running, now=1013.0)
    assert "48 s of audio, 99% done" in progress_line(almost, now=1013.0)
    assert "99% done" in total_line(jobs, now=1013.0) and "100%" not in total_line(jobs, now=1013.0)
    completed = running.model_copy(update={"state": "completed"})
    assert "48 s of audio, 100% done" in progress_line(completed, now=1013.0)
