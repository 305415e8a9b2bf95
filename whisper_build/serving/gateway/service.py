"""The transcription pipeline behind both HTTP routes: bytes -> streamed windows -> model -> text.

Pure of HTTP: raises :class:`whisper_build.serving.audio.AudioError` for unusable audio and
:class:`whisper_build.serving.gateway.backend.BackendError` for model-server failures.

Memory per request does not grow with the audio's length: the upload is decoded as a stream
(:func:`whisper_build.serving.audio.open_audio`), cut into windows as it flows
(:func:`whisper_build.serving.audio.iter_windows`), silent windows are dropped at once, and the
rest go to the model in groups of at most ``window_group_size`` windows, in order. While one
group is with the model, the next one is decoded (so at most two groups are held).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio import AudioStream, Window, is_silent, iter_windows, open_audio
from whisper_build.serving.gateway.backend import TranscriptionBackend
from whisper_build.serving.gateway.formats import Segment
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt

WindowGroup = list[tuple[Window, npt.NDArray[np.float32]]]
"""Consecutive non-silent windows of one upload: each window's position in the stream (its start
offset is the true start of its text) and its 16 kHz samples."""


@dataclass(frozen=True)
class Transcription:
    """One upload's transcription.

    Attributes: ``text`` (windows joined in order by one space), per-window ``segments``,
    ``duration`` of the audio in seconds, ``language`` code if known.
    """

    text: str
    segments: list[Segment]
    duration: float
    language: str | None


class Transcriber:
    """Open audio, stream it into windows, send non-silent windows in bounded groups, join.

    Args:
        backend: the model server.
        settings: window length, cut search, silence threshold, group size, duration limit, timeout.
    """

    def __init__(self, backend: TranscriptionBackend, settings: GatewaySettings) -> None:
        self.backend = backend
        self.settings = settings

    def open(self, data: bytes) -> AudioStream:
        """Read the upload's header (blocking, cheap): refuses over-long audio before decoding.

        Raises:
            AudioError: not audio, empty, or declared longer than ``max_audio_seconds``.
        """
        return open_audio(data, max_seconds=self.settings.max_audio_seconds)

    def window_groups(self, stream: AudioStream) -> Iterator[WindowGroup]:
        """Decode ``stream`` (blocking, CPU) into groups of ≤ ``window_group_size`` non-silent windows.

        Raises:
            AudioError: undecodable, or longer than ``max_audio_seconds`` once decoded.
        """
        settings = self.settings
        search = min(settings.cut_search_seconds, settings.window_seconds / 2)
        group: WindowGroup = []
        for window, samples in iter_windows(stream.chunks(), settings.window_seconds, search):
            if is_silent(samples, settings.silence_rms):
                continue  # dropped at once: never held, never sent
            group.append((window, samples))
            if len(group) == settings.window_group_size:
                yield group
                group = []
        if group:
            yield group

    async def transcribe(self, stream: AudioStream, prompt: DecodePrompt, repetition_penalty: float) -> Transcription:
        """Transcribe an opened upload (the caller closes ``stream``).

        Args:
            stream: from :meth:`open`.
            prompt: decoder prompt, sent to every window as ``TEXT_PREFIX``.
            repetition_penalty: ``REPETITION_PENALTY`` for every window (1.0 = none).

        Raises:
            AudioError: unusable audio (not audio, empty, too long).
            BackendError: the model server failed (see :mod:`whisper_build.serving.gateway.backend`).
        """
        groups = self.window_groups(stream)
        text_prefix = prompt.to_text_prefix()
        segments: list[Segment] = []
        pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
        try:
            while (group := await pending) is not None:
                # Decode the next group while this one is with the model.
                pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
                texts = await self.backend.transcribe(
                    [samples for _, samples in group],
                    text_prefix,
                    repetition_penalty,
                    self.settings.request_timeout_seconds,
                )
                segments += [
                    Segment(window.start_s, window.end_s, text.strip())
                    for (window, _), text in zip(group, texts, strict=True)
                ]
                del group
        finally:
            if not pending.done():
                pending.cancel()  # the worker thread finishes its group; closing the stream stops it
            elif not pending.cancelled():
                pending.exception()  # retrieved: an error after a failure elsewhere is not logged twice
        text = " ".join(s.text for s in segments if s.text)
        return Transcription(text, segments, stream.seconds, prompt.language)
