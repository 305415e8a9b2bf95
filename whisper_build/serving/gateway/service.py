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
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio import AudioStream, Window, is_silent, iter_windows, open_audio
from whisper_build.serving.gateway.backend import DecodeRequest, TranscriptionBackend, WindowOutput
from whisper_build.serving.gateway.formats import Segment, Word
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt

WindowGroup = list[tuple[Window, npt.NDArray[np.float32]]]
"""Consecutive non-silent windows of one upload: each window's position in the stream (its start
offset is the true start of its text) and its 16 kHz samples."""


@dataclass(frozen=True)
class Transcription:
    """One upload's transcription.

    Attributes: ``text`` (segments joined in order by one space), ``segments`` (file-relative:
    from timestamp tokens when asked, else one per window), ``duration`` of the audio in seconds,
    ``language`` code if known, ``decode_temperatures`` every window decode's temperature (the
    fallback's re-decodes included, for metrics).
    """

    text: str
    segments: list[Segment]
    duration: float
    language: str | None
    decode_temperatures: list[float] = field(default_factory=list)


def window_segments(window: Window, output: WindowOutput, previous_end: float) -> list[Segment]:
    """File-relative segments of one window's ``RESULT``.

    Times are offset by the window's true start (windows are cut at silences, not at k × 30 s),
    clamped to the window's end, and never go back before ``previous_end`` (the last segment's
    end so far); segments with empty text are dropped. Words are offset and clamped the same way
    into their segment.
    """
    segments = []
    for raw in output.segments:
        text = str(raw.get("text", "")).strip()
        if not text:
            continue
        start = min(max(window.start_s + float(raw["start"]), previous_end), window.end_s)
        end = min(max(window.start_s + float(raw["end"]), start), window.end_s)
        words = []
        last = start
        for w in raw.get("words") or []:
            w_start = min(max(window.start_s + float(w["start"]), last), end)
            w_end = min(max(window.start_s + float(w["end"]), w_start), end)
            words.append(Word(str(w["word"]), w_start, w_end))
            last = w_end
        segments.append(
            Segment(
                start, end, text,
                seek=round(window.start_s * 100),  # openai/whisper: seek in 10 ms mel frames
                tokens=[int(t) for t in raw.get("tokens") or []],
                temperature=output.temperature,
                avg_logprob=output.avg_logprob,
                compression_ratio=output.compression_ratio,
                no_speech_prob=output.no_speech_prob,
                words=words,
            )
        )  # fmt: skip
        previous_end = end
    return segments


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

    async def transcribe(
        self,
        stream: AudioStream,
        prompt: DecodePrompt,
        repetition_penalty: float,
        options: DecodeRequest | None = None,
    ) -> Transcription:
        """Transcribe an opened upload (the caller closes ``stream``).

        Args:
            stream: from :meth:`open`.
            prompt: decoder prompt, sent to every window as ``TEXT_PREFIX``.
            repetition_penalty: ``REPETITION_PENALTY`` for every window (1.0 = none).
            options: timestamps / words / temperature for every window.

        Raises:
            AudioError: unusable audio (not audio, empty, too long).
            BackendError: the model server failed (see :mod:`whisper_build.serving.gateway.backend`).
        """
        groups = self.window_groups(stream)
        text_prefix = prompt.to_text_prefix()
        segments: list[Segment] = []
        temperatures: list[float] = []
        language = prompt.language
        pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
        try:
            while (group := await pending) is not None:
                # Decode the next group while this one is with the model.
                pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
                outputs = await self.backend.transcribe(
                    [samples for _, samples in group],
                    text_prefix,
                    repetition_penalty,
                    self.settings.request_timeout_seconds,
                    options,
                )
                for (window, _), output in zip(group, outputs, strict=True):
                    segments += window_segments(window, output, segments[-1].end if segments else 0.0)
                    temperatures += output.temperatures
                    language = language or output.language
                del group
        finally:
            if not pending.done():
                pending.cancel()  # the worker thread finishes its group; closing the stream stops it
            elif not pending.cancelled():
                pending.exception()  # retrieved: an error after a failure elsewhere is not logged twice
        text = " ".join(s.text for s in segments if s.text)
        return Transcription(text, segments, stream.seconds, language, temperatures)
