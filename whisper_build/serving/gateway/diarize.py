"""One upload's diarization, started when the upload is read and run beside its transcription.

The turns come from the transcription core's :func:`~whisper_build.serving.transcription.speakers.file_turns`
(the Triton ``speaker`` model through the backend seam, gRPC, bounded by ``diarization_timeout_seconds``);
:meth:`PendingTurns.cancel` cancels the call when the client leaves. Docs: docs/gateway.md, "Speakers
(diarization)".
"""

from __future__ import annotations

import asyncio

from whisper_build.serving.diarization.speakers import SpeakerOptions, Turn
from whisper_build.serving.gateway.pipeline import Pipeline
from whisper_build.serving.transcription.speakers import file_turns

__all__ = ["PendingTurns"]


class PendingTurns:
    """The speaker turns of one upload: :meth:`start` with its bytes, :meth:`turns` to await them."""

    def __init__(self, pipeline: Pipeline, options: SpeakerOptions) -> None:
        self._pipeline = pipeline
        self._options = options
        self._task: asyncio.Task[list[Turn]] | None = None

    def start(self, data: bytes) -> None:
        """Decode ``data`` (16 kHz mono, whole; in a thread) and ask the speaker model for its turns."""
        requests = self._pipeline.settings.requests
        backend = self._pipeline.service.transcriber.backend
        turns = file_turns(
            backend, data, self._options, requests.diarization_timeout_seconds, requests.max_audio_seconds
        )
        self._task = asyncio.create_task(turns)

    async def turns(self) -> list[Turn]:
        """The turns, in time order. Raises: AudioError (the whole file is not decodable), BackendError."""
        assert self._task is not None, "start() runs when the upload is read, before the turns are awaited"
        return await self._task

    def cancel(self) -> None:
        """Stop waiting (a running gRPC call is cancelled; a finished one is left as it is)."""
        if self._task is not None:
            self._task.cancel()
