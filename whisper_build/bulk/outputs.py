"""A finished job's output files: every format of the formats table that names a bulk file; its speaker turns."""

from __future__ import annotations

from pathlib import Path

from whisper_build.bulk.messages import JobOptions, SpeakerJob
from whisper_build.serving.diarization.assign import label_segments
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn, diarize_upload
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription.formats import Transcript, bulk_files


def render_outputs(
    segments: list[Segment],
    duration: float,
    language: str | None,
    options: JobOptions,
    turns: list[Turn] | None = None,
) -> dict[str, tuple[bytes, str]]:
    """Output key → (file bytes, content type) for every format with a bulk file (``records.OUTPUT_FILES``).

    Each file is the body ``/v1/audio/transcriptions`` answers for its ``response_format`` (words in
    ``verbose_json`` when ``options.word_timestamps``; plain text ends with a newline); the text is
    the segments joined by one space, as there. With ``turns`` (a job with speakers): the speaker
    formats too (``diarized_json``, ``rttm``), and srt/vtt/verbose_json carry speakers.
    """
    text = " ".join(s.text for s in segments if s.text)
    speakers = None if turns is None else label_segments(segments, turns)
    transcript = Transcript(
        text, segments, duration, language, task=options.task, words=options.word_timestamps, speakers=speakers
    )
    chosen = bulk_files(speakers=speakers is not None)
    return {key: (f.bulk_body(transcript), f.media_type) for key, f in chosen.items()}


def diarize_file(path: Path, speakers: SpeakerJob) -> list[Turn]:
    """Speaker turns of the whole downloaded input (blocking CPU work: run it in a thread).

    Runs once, when the last window is transcribed, on the whole file: a job resumed from a
    checkpoint gets the labels of one clustering, never two halves labelled apart.
    """
    options = SpeakerOptions(speakers.min_speakers, speakers.max_speakers)
    return diarize_upload(path.read_bytes(), options)
