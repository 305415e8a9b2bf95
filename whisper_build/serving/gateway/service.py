"""The transcription pipeline behind both HTTP routes: bytes -> windows -> model -> text.

Pure of HTTP: raises :class:`whisper_build.serving.audio.AudioError` for unusable audio and
:class:`whisper_build.serving.gateway.backend.BackendError` for model-server failures.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import numpy as np

from whisper_build.serving.audio import decode_audio, is_silent, split_windows
from whisper_build.serving.gateway.backend import TranscriptionBackend
from whisper_build.serving.gateway.formats import Segment
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt


@dataclass(frozen=True)
class Transcription:
    """Result: ``text`` (windows joined in order by one space), per-window ``segments``,
    ``duration`` of the audio in seconds, ``language`` code if known.
    """

    text: str
    segments: list[Segment]
    duration: float
    language: str | None


@dataclass(frozen=True)
class _Prepared:
    duration: float
    windows: list[tuple[float, float, np.ndarray]]  # (start s, end s, samples); silent ones dropped


class Transcriber:
    """Decode audio, split it into windows, send all non-silent windows as one batch, join.

    Args:
        backend: the model server.
        settings: window length, cut search, silence threshold, duration limit, timeout.
    """

    def __init__(self, backend: TranscriptionBackend, settings: GatewaySettings) -> None:
        self.backend = backend
        self.settings = settings

    def _prepare(self, data: bytes) -> _Prepared:
        """CPU part (run in a worker thread): decode, split, drop silent windows."""
        audio = decode_audio(data, max_seconds=self.settings.max_audio_seconds)
        search = min(self.settings.cut_search_seconds, self.settings.window_seconds / 2)
        windows = []
        for w in split_windows(audio.samples, self.settings.window_seconds, search):
            samples = audio.samples[w.start : w.end]
            if not is_silent(samples, self.settings.silence_rms):
                windows.append((w.start_s, w.end_s, samples))
        return _Prepared(audio.duration, windows)

    async def transcribe(self, data: bytes, prompt: DecodePrompt, repetition_penalty: float) -> Transcription:
        """Transcribe an audio file's bytes.

        Args:
            data: audio container bytes (see :func:`whisper_build.serving.audio.decode_audio`).
            prompt: decoder prompt, sent to every window as ``TEXT_PREFIX``.
            repetition_penalty: ``REPETITION_PENALTY`` for every window (1.0 = none).

        Raises:
            AudioError: unusable audio (not audio, empty, too long).
            BackendError: the model server failed (see :mod:`whisper_build.serving.gateway.backend`).
        """
        prepared = await asyncio.to_thread(self._prepare, data)
        texts: list[str] = []
        if prepared.windows:
            texts = await self.backend.transcribe(
                [w for _, _, w in prepared.windows],
                prompt.to_text_prefix(),
                repetition_penalty,
                self.settings.request_timeout_seconds,
            )
        segments = [
            Segment(start, end, text.strip()) for (start, end, _), text in zip(prepared.windows, texts, strict=True)
        ]
        text = " ".join(s.text for s in segments if s.text)
        return Transcription(text, segments, prepared.duration, prompt.language)
