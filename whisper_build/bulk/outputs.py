"""A finished job's output files: every format of the formats table that names a bulk file (one source each)."""

from __future__ import annotations

from whisper_build.bulk.messages import JobOptions
from whisper_build.serving.results import Segment
from whisper_build.serving.transcription.formats import Transcript, bulk_files


def render_outputs(
    segments: list[Segment], duration: float, language: str | None, options: JobOptions
) -> dict[str, tuple[bytes, str]]:
    """Output key → (file bytes, content type) for every format with a bulk file (``records.OUTPUT_FILES``).

    Each file is the body ``/v1/audio/transcriptions`` answers for its ``response_format`` (words in
    ``verbose_json`` when ``options.word_timestamps``; plain text ends with a newline); the text is
    the segments joined by one space, as there.
    """
    text = " ".join(s.text for s in segments if s.text)
    transcript = Transcript(text, segments, duration, language, task=options.task, words=options.word_timestamps)
    return {key: (f.bulk_body(transcript), f.media_type) for key, f in bulk_files(speakers=False).items()}
