"""The window pipeline: audio bytes → streamed windows → the model in groups → file-relative results.

One pipeline for every front end: the synchronous routes and the stream (through
:class:`~whisper_build.serving.transcription.service.TranscriptionService`) and the bulk workers. It depends on no
web framework: give it a :class:`~whisper_build.serving.transcription.backend.TranscriptionBackend`
and a :class:`WindowPlan`. Entry points: :class:`Transcriber` (:meth:`~Transcriber.open`,
:meth:`~Transcriber.results`, :meth:`~Transcriber.transcribe`). Memory per request does not grow
with the audio's length (at most two groups are held). Errors:
:class:`whisper_build.serving.audio.AudioError`, :class:`whisper_build.serving.transcription.backend.BackendError`.
Docs: docs/gateway.md, "What happens to a request".
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from whisper_build.serving.audio import AudioStream, Window, is_silent, iter_windows, open_audio
from whisper_build.serving.results import Segment, WindowResult, Word
from whisper_build.serving.silence import GATEWAY_SILENCE_RMS
from whisper_build.serving.transcription.backend import TranscriptionBackend
from whisper_build.serving.transcription.request import WindowRequest

__all__ = [
    "CUT_SEARCH_SECONDS",
    "SILENCE_RMS",
    "WINDOW_SECONDS",
    "GroupResult",
    "Transcriber",
    "Transcription",
    "WindowGroup",
    "WindowPlan",
    "WindowRequest",
]

WINDOW_SECONDS = 30.0
"""Longest window, seconds: Whisper's 30 s input."""
CUT_SEARCH_SECONDS = 5.0
"""How far before a window's end a cut may move to find silence, seconds."""
SILENCE_RMS = GATEWAY_SILENCE_RMS
"""Windows whose 25 ms frames all stay below this RMS are not sent (the gateway's and bulk's default)."""

WindowGroup = list[tuple[Window, npt.NDArray[np.float32]]]
"""Consecutive non-silent windows of one upload: each window's position in the stream (its start
offset is the true start of its text) and its 16 kHz samples."""


@dataclass(frozen=True)
class WindowPlan:
    """How the pipeline cuts, filters and groups audio.

    Attributes:
        window_seconds: longest window, seconds (Whisper: 30).
        cut_search_seconds: how far before a window's end a cut may move to find silence.
        silence_rms: windows whose 25 ms frames all stay below this RMS are not sent.
        group_size: non-silent windows per model call (≥ 1).
        max_audio_seconds: longest audio accepted (declared or decoded).
        call_timeout_seconds: deadline of one model call (one group).
        min_audio_seconds: shorter decoded audio is refused before its last window is sent (0: none).
    """

    window_seconds: float
    cut_search_seconds: float
    silence_rms: float
    group_size: int
    max_audio_seconds: float
    call_timeout_seconds: float
    min_audio_seconds: float = 0.0


@dataclass(frozen=True)
class GroupResult:
    """The model's answer for one window group, file-relative.

    Attributes:
        index: 0-based position of the group among the groups this iteration sent.
        windows: the group's windows (absolute 16 kHz sample ranges), in order.
        segments: file-relative segments, in order, never before the previous group's end.
        temperatures: every decode temperature of the group's windows (fallback re-decodes too).
        language: the first language the model reported in the group, if any.
    """

    index: int
    windows: tuple[Window, ...]
    segments: list[Segment]
    temperatures: list[float]
    language: str | None

    @property
    def start_sample(self) -> int:
        """The first window's start in the stream (16 kHz samples)."""
        return self.windows[0].start

    @property
    def end_sample(self) -> int:
        """The last window's end: a window boundary, where :meth:`Transcriber.results` may resume."""
        return self.windows[-1].end


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


def window_segments(window: Window, output: WindowResult, previous_end: float) -> list[Segment]:
    """File-relative segments of one window's ``RESULT``.

    Times are offset by the window's true start (windows are cut at silences, not at k × 30 s),
    clamped to the window's end, and never go back before ``previous_end`` (the last segment's
    end so far); segments with empty text are dropped. Words are offset and clamped the same way
    into their segment.
    """
    segments = []
    for raw in output.segments:
        text = raw.text.strip()
        if not text:
            continue
        start = min(max(window.start_s + raw.start, previous_end), window.end_s)
        end = min(max(window.start_s + raw.end, start), window.end_s)
        words = []
        last = start
        for w in raw.words:
            w_start = min(max(window.start_s + w.start, last), end)
            w_end = min(max(window.start_s + w.end, w_start), end)
            words.append(Word(w.word, w_start, w_end))
            last = w_end
        segments.append(
            Segment(
                start, end, text,
                seek=round(window.start_s * 100),  # openai/whisper: seek in 10 ms mel frames
                tokens=list(raw.tokens),
                temperature=output.temperature,
                avg_logprob=output.avg_logprob,
                compression_ratio=output.compression_ratio,
                no_speech_prob=output.no_speech_prob,
                words=words,
            )
        )  # fmt: skip
        previous_end = end
    return segments


def group_result(index: int, group: WindowGroup, outputs: list[WindowResult], previous_end: float) -> GroupResult:
    """The :class:`GroupResult` of ``group`` from the model's ``outputs`` (one per window, in order)."""
    segments: list[Segment] = []
    temperatures: list[float] = []
    language = None
    for (window, _), output in zip(group, outputs, strict=True):
        segments += window_segments(window, output, segments[-1].end if segments else previous_end)
        temperatures += output.temperatures
        language = language or output.language
    return GroupResult(index, tuple(window for window, _ in group), segments, temperatures, language)


class Transcriber:
    """Open audio, stream it into windows, send non-silent windows in bounded groups.

    Args:
        backend: the model server.
        plan: window length, cut search, silence threshold, group size, duration limit, call deadline.

    Built once per process. :meth:`open` reads the container header (blocking: run it in a thread;
    the caller closes the stream). :meth:`results` yields one :class:`GroupResult` per group of ≤
    ``plan.group_size`` non-silent windows, in audio order, each as soon as the model answered it;
    iterate it inside ``contextlib.aclosing``. A consumer that stops iterating, or whose task is
    cancelled, stops the request: the model call in flight is cancelled with the awaiting task (gRPC
    aio cancels the RPC of a cancelled call) and no further group is sent. ``start_sample`` resumes a
    transcription: windows ending at or before it are cut (so the cuts are those of an uninterrupted
    run) but not sent; resuming at a previous :attr:`GroupResult.end_sample` gives exactly the
    remaining results. Language: a request that names none is sent without one until a group's answer
    reports it (detected once, on that group's first non-silent window:
    :mod:`whisper_build.serving.triton_model.language`); every later group is sent with it, so a file
    is decoded in one language. Memory: the upload is decoded as a stream
    (:func:`whisper_build.serving.audio.open_audio`), cut as it flows
    (:func:`whisper_build.serving.audio.iter_windows`), silent windows dropped at once; while one group
    is with the model the next one is decoded. :meth:`transcribe` joins the groups (what the
    synchronous routes answer).
    """

    def __init__(self, backend: TranscriptionBackend, plan: WindowPlan) -> None:
        self.backend = backend
        self.plan = plan

    def open(self, data: bytes) -> AudioStream:
        """Read the upload's header (blocking, cheap): refuses over-long audio before decoding.

        Raises:
            AudioError: not audio, empty, or declared longer than ``max_audio_seconds``.
        """
        return open_audio(
            data, max_seconds=self.plan.max_audio_seconds, min_seconds=self.plan.min_audio_seconds or None
        )

    def window_groups(self, stream: AudioStream, start_sample: int = 0) -> Iterator[WindowGroup]:
        """Decode ``stream`` (blocking, CPU) into groups of ≤ ``group_size`` non-silent windows.

        Windows ending at or before ``start_sample`` are cut but not yielded.

        Raises:
            AudioError: undecodable, or longer than ``max_audio_seconds`` once decoded.
        """
        plan = self.plan
        search = min(plan.cut_search_seconds, plan.window_seconds / 2)
        group: WindowGroup = []
        for window, samples in iter_windows(stream.chunks(), plan.window_seconds, search):
            if window.end <= start_sample or is_silent(samples, plan.silence_rms):
                continue  # dropped at once: never held, never sent
            group.append((window, samples))
            if len(group) == plan.group_size:
                yield group
                group = []
        if group:
            yield group

    async def results(
        self, stream: AudioStream, request: WindowRequest, start_sample: int = 0
    ) -> AsyncGenerator[GroupResult, None]:
        """One :class:`GroupResult` per window group of an opened upload, in audio order (see the class docstring).

        Args:
            stream: from :meth:`open` (the caller closes it).
            request: prompt, repetition penalty and options for every window.
            start_sample: resume point in 16 kHz samples (a previous :attr:`GroupResult.end_sample`).

        Raises:
            AudioError: unusable audio (not audio, empty, too long).
            BackendError: the model server failed (see :mod:`whisper_build.serving.transcription.backend`).
        """
        groups = self.window_groups(stream, start_sample)
        prompt = request.prompt
        previous_end = 0.0
        index = 0
        pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
        try:
            while (group := await pending) is not None:
                # Decode the next group while this one is with the model.
                pending = asyncio.ensure_future(asyncio.to_thread(next, groups, None))
                sent = replace(request, prompt=prompt)
                outputs = await self.backend.infer([s for _, s in group], sent, self.plan.call_timeout_seconds)
                result = group_result(index, group, outputs, previous_end)
                del group
                if prompt.language is None and result.language is not None:
                    prompt = replace(prompt, language=result.language)  # one language for the whole file
                if result.segments:
                    previous_end = result.segments[-1].end
                yield result
                index += 1
        finally:
            if not pending.done():
                pending.cancel()  # the worker thread finishes its group; closing the stream stops it
            elif not pending.cancelled():
                pending.exception()  # retrieved: an error after a failure elsewhere is not logged twice

    async def transcribe(self, stream: AudioStream, request: WindowRequest) -> Transcription:
        """Transcribe an opened upload whole: :meth:`results` joined (the caller closes ``stream``).

        Raises:
            AudioError: unusable audio (not audio, empty, too long).
            BackendError: the model server failed.
        """
        segments: list[Segment] = []
        temperatures: list[float] = []
        language = request.prompt.language
        async with aclosing(self.results(stream, request)) as results:
            async for result in results:
                segments += result.segments
                temperatures += result.temperatures
                language = language or result.language
        text = " ".join(s.text for s in segments if s.text)
        return Transcription(text, segments, stream.seconds, language, temperatures)
