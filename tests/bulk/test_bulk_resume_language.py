"""A resumed bulk job decodes the rest of its file in the language its first attempt detected.

The first attempt of a job that names no language checkpoints the language the model reported
(``Checkpoint.language``); the attempt that resumes from that checkpoint must send it in the prompt
of every later window, or the rest of the file could be decoded in another language.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
from pydantic import BaseModel

from tests.bulk.test_bulk_progress import RATE, RecordingStore
from whisper_build.bulk.aws import Received
from whisper_build.bulk.job import JobRunner
from whisper_build.bulk.messages import JobMessage, JobOptions
from whisper_build.bulk.outcome import Lifeline, Outcome
from whisper_build.bulk.records import CHECKPOINT_FILE, STATUS_FILE, Checkpoint, JobStatus
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.serving.audio.windows import Window
from whisper_build.serving.transcription.windows import GroupResult, WindowRequest

RESUME_SAMPLE = 8 * RATE


class ResumingStore(RecordingStore):
    """A job whose first attempt stopped after one window group, having detected ``language``."""

    def __init__(self, audio: bytes, language: str | None) -> None:
        super().__init__(audio)
        self.language = language

    def read_model(self, key: str, model: type[BaseModel]) -> Any:
        if key.endswith(STATUS_FILE):
            return JobStatus(state="retrying", bucket="jobs", key="input/long.wav", job_id="j" * 16, model="m")
        if key.endswith(CHECKPOINT_FILE):
            return Checkpoint(job_id="j" * 16, start_sample=RESUME_SAMPLE, groups=1, windows=8, language=self.language)
        return None

    def read_model_etag(self, key: str, model: type[BaseModel]) -> None:
        return None


class RecordingTranscriber:
    """Records the request and resume point it is asked for; answers one more group in no language."""

    def __init__(self) -> None:
        self.requests: list[tuple[WindowRequest, int]] = []

    async def results(
        self, stream: object, request: WindowRequest, start_sample: int = 0
    ) -> AsyncIterator[GroupResult]:
        self.requests.append((request, start_sample))
        windows = (Window(start_sample, start_sample + RATE),)
        yield GroupResult(index=0, windows=windows, segments=[], temperatures=[], language=None)


def resume(tmp_path: Path, checkpointed: str | None, options: JobOptions) -> tuple[WindowRequest, int]:
    soundfile.write(tmp_path / "input.wav", np.zeros(16 * RATE, dtype=np.int16), RATE)
    store = ResumingStore((tmp_path / "input.wav").read_bytes(), checkpointed)
    settings = WorkerSettings(queue_url="q", bucket="jobs", scratch_dir=str(tmp_path))
    transcriber = RecordingTranscriber()
    runner = JobRunner(settings, store, queue=None, transcriber=transcriber)  # type: ignore[arg-type]
    life = Lifeline(Received("{}", "receipt", "message", 2))
    job = JobMessage(bucket="jobs", key="input/long.wav", options=options)
    assert asyncio.run(runner.run(job, life)) is Outcome.COMPLETED
    [(request, start_sample)] = transcriber.requests
    return request, start_sample


def test_a_resumed_job_keeps_the_language_its_first_attempt_detected(tmp_path: Path) -> None:
    request, start_sample = resume(tmp_path, "de", JobOptions())
    assert start_sample == RESUME_SAMPLE
    assert request.prompt.language == "de"
    assert "<|de|>" in request.prompt.to_text_prefix()


@pytest.mark.parametrize(
    ("checkpointed", "named", "sent"), [(None, None, None), ("de", "fr", "fr"), (None, "fr", "fr")]
)
def test_a_named_language_or_none_detected_is_sent_as_before(
    tmp_path: Path, checkpointed: str | None, named: str | None, sent: str | None
) -> None:
    request, _ = resume(tmp_path, checkpointed, JobOptions(language=named))
    assert request.prompt.language == sent
