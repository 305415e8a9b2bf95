"""A finished job's four outputs, rendered by the gateway's own formatters (one source for each format)."""

from __future__ import annotations

from whisper_build.bulk.messages import JobOptions
from whisper_build.bulk.records import OUTPUT_FILES
from whisper_build.serving.gateway.formats import render, to_srt, to_vtt
from whisper_build.serving.results import Segment

CONTENT_TYPES = {
    "verbose_json": "application/json",
    "srt": "application/x-subrip",
    "vtt": "text/vtt",
    "txt": "text/plain; charset=utf-8",
}


def render_outputs(
    segments: list[Segment], duration: float, language: str | None, options: JobOptions
) -> dict[str, tuple[bytes, str]]:
    """Format → (file bytes, content type) for every format of :data:`OUTPUT_FILES`.

    ``verbose_json`` is the body ``/v1/audio/transcriptions`` answers with ``response_format=verbose_json``
    (words when ``options.word_timestamps``); the text is the segments joined by one space, as there.
    """
    text = " ".join(s.text for s in segments if s.text)
    verbose = render(
        "verbose_json", text, segments, duration, language, task=options.task, words=options.word_timestamps
    )
    bodies = {
        "verbose_json": bytes(verbose.body),
        "srt": to_srt(segments).encode(),
        "vtt": to_vtt(segments).encode(),
        "txt": (text + "\n").encode(),
    }
    assert set(bodies) == set(OUTPUT_FILES)
    return {name: (body, CONTENT_TYPES[name]) for name, body in bodies.items()}
