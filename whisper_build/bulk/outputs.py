"""A finished job's output files: every format of the formats table that names a bulk file; its speaker turns.

Docs: docs/bulk.md, "Messages and outputs".
"""

from __future__ import annotations

from pathlib import Path

from whisper_build.bulk.messages import JobOptions, SpeakerJob
from whisper_build.serving.diarization.assign import label_segments
from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription.backend import TranscriptionBackend
from whisper_build.serving.transcription.formats import Transcript, bulk_files, rttm_file_id
from whisper_build.serving.transcription.speakers import file_turns


def render_outputs(
    segments: list[Segment],
    duration: float,
    language: str | None,
    options: JobOptions,
    turns: list[Turn] | None = None,
    key: str = "",
) -> dict[str, tuple[bytes, str]]:
    """Output key → (file bytes, content type) for every format with a bulk file (``records.OUTPUT_FILES``).

    Each file is the body ``/v1/audio/transcriptions`` answers for its ``response_format`` (words in
    ``verbose_json`` when ``options.word_timestamps``; plain text ends with a newline); the text is
    the segments joined by one space, as there. With ``turns`` (a job with speakers): the speaker
    formats too (``diarized_json``, ``rttm``: its file id is the stem of the input's object ``key``),
    and srt/vtt/verbose_json carry speakers.
    """
    text = " ".join(s.text for s in segments if s.text)
    speakers = None if turns is None else label_segments(segments, turns)
    transcript = Transcript(
        text,
        segments,
        duration,
        language,
        task=options.task,
        words=options.word_timestamps,
        speakers=speakers,
        file_id=rttm_file_id(key),
    )
    chosen = bulk_files(speakers=speakers is not None)
    return {key: (f.bulk_body(transcript), f.media_type) for key, f in chosen.items()}


async def diarize_file(backend: TranscriptionBackend, path: Path, speakers: SpeakerJob, timeout: float) -> list[Turn]:
    """Speaker turns of the whole downloaded input, from the core's :func:`file_turns` (decoded in a thread).

    Started beside the windows' transcription; runs once, on the whole file: a job resumed from a
    checkpoint gets the labels of one clustering, never two halves labelled apart. Holds the decoded
    file (64 kB per audio second) until the call returns. Raises: AudioError, BackendError.
    """
    options = SpeakerOptions(speakers.min_speakers, speakers.max_speakers)
    return await file_turns(backend, path, options, timeout)
