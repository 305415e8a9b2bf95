"""A bulk job with speakers writes diarized_json, speaker-tagged srt/vtt and RTTM, labelled once for the whole file.

The job resumes from a checkpoint that holds the first half of a Festival dialogue's words (as a
first attempt would have left them); this attempt transcribes the second half. Diarization (the Triton
``speaker`` model) runs on the whole file beside the windows, so the words of both halves carry the labels of one
clustering: every word of one true voice has one label, before and after the resume point.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import speaker_support as support
from pydantic import BaseModel

from tests.bulk.test_bulk_progress import RATE, RecordingStore
from whisper_build.bulk.aws import Received
from whisper_build.bulk.job import JobRunner
from whisper_build.bulk.messages import JobMessage, JobOptions, SpeakerJob
from whisper_build.bulk.outcome import Lifeline, Outcome
from whisper_build.bulk.records import CHECKPOINT_FILE, STATUS_FILE, Checkpoint, JobStatus
from whisper_build.bulk.settings import WorkerSettings
from whisper_build.serving.audio.windows import Window
from whisper_build.serving.results import Segment, Word
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.serving.transcription.windows import GroupResult, WindowRequest
from whisper_build.workstation.local_triton import LocalTriton

DIALOGUE = "male_male"
TURNS = support.TRUTH[DIALOGUE]
RESUME_AT = 4  # turns before it were transcribed by the first attempt


def turn_segment(turn: dict[str, Any]) -> Segment:
    """One true turn as a transcript segment, its words spread evenly over the turn."""
    texts = str(turn["text"]).split()
    start, end = float(turn["start"]), float(turn["end"])
    step = (end - start) / len(texts)
    words = [Word(" " + w, start + i * step, start + (i + 1) * step) for i, w in enumerate(texts)]
    return Segment(start, end, str(turn["text"]), words=words)


class ResumedStore(RecordingStore):
    def __init__(self, audio: bytes) -> None:
        super().__init__(audio)
        self.outputs: dict[str, bytes] = {}

    def read_model(self, key: str, model: type[BaseModel]) -> Any:
        if key.endswith(STATUS_FILE):
            return JobStatus(state="retrying", bucket="jobs", key="in/talk.flac", job_id="j" * 16, model="m")
        if key.endswith(CHECKPOINT_FILE):
            start = int(float(TURNS[RESUME_AT]["start"]) * RATE)  # type: ignore[arg-type]
            checkpoint = Checkpoint(job_id="j" * 16, start_sample=start, groups=1, windows=1, language="en")
            checkpoint.add([turn_segment(t) for t in TURNS[:RESUME_AT]])
            return checkpoint
        return None

    def read_model_etag(self, key: str, model: type[BaseModel]) -> None:
        return None

    def put(self, key: str, body: str | bytes, content_type: str) -> None:
        self.outputs[key.rsplit("/", 1)[-1]] = body if isinstance(body, bytes) else body.encode()


class SecondHalf:
    """Answers the turns after the resume point as one window group (words included); speakers from ``backend``."""

    def __init__(self, triton_url: str) -> None:
        self.requests: list[WindowRequest] = []
        self.triton_url = triton_url

    @property
    def backend(self) -> TritonBackend:  # made in the job's event loop, as a worker makes its backend
        return TritonBackend(self.triton_url, "whisper")

    async def results(
        self, stream: object, request: WindowRequest, start_sample: int = 0
    ) -> AsyncIterator[GroupResult]:
        self.requests.append(request)
        segments = [turn_segment(t) for t in TURNS[RESUME_AT:]]
        window = Window(start_sample, int(float(TURNS[-1]["end"]) * RATE))  # type: ignore[arg-type]
        yield GroupResult(index=0, windows=(window,), segments=segments, temperatures=[0.0], language="en")


def test_a_resumed_job_with_speakers_labels_the_whole_file_once(
    tmp_path: Path, speaker_triton_server: LocalTriton
) -> None:
    store = ResumedStore((support.SPEAKERS_DIR / f"{DIALOGUE}.flac").read_bytes())
    transcriber = SecondHalf(speaker_triton_server.settings.grpc_url)  # the speaker model's Triton
    settings = WorkerSettings(queue_url="q", bucket="jobs", scratch_dir=str(tmp_path))
    runner = JobRunner(settings, store, queue=None, transcriber=transcriber)  # type: ignore[arg-type]
    options = JobOptions(speakers=SpeakerJob(max_speakers=4))
    job = JobMessage(bucket="jobs", key="in/talk.flac", options=options)
    assert asyncio.run(runner.run(job, Lifeline(Received("{}", "receipt", "message", 2)))) is Outcome.COMPLETED
    assert transcriber.requests[0].options.word_timestamps  # speakers are given word by word
    assert {"transcript.diarized.json", "speakers.rttm", "transcript.srt", "transcript.vtt"} <= set(store.outputs)
    diarized = json.loads(store.outputs["transcript.diarized.json"])
    words = [
        (w.start, w.end, piece["speaker"])
        for piece in diarized["segments"]
        for t in TURNS
        for w in turn_segment(t).words
        if piece["start"] <= w.start and w.end <= piece["end"]
    ]
    assert support.word_attribution(DIALOGUE, words) >= 0.9  # one mapping for both halves
    labels = {label for _, _, label in words}
    assert labels == {"A", "B"}
    rttm = store.outputs["speakers.rttm"].decode().splitlines()
    assert rttm and all(line.startswith("SPEAKER talk 1 ") for line in rttm)  # the key's stem
    assert {line.split()[7] for line in rttm} == labels
    assert "<v A>" in store.outputs["transcript.vtt"].decode()
    assert "\nA: " in store.outputs["transcript.srt"].decode()
