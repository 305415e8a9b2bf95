"""The one recording fake model backend for the tests that do not need Triton (gateway, stream, bulk)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import numpy as np

from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.results import SegmentResult, WindowResult
from whisper_build.serving.transcription.backend import ServedModel, WindowRequest


class FakeBackend:
    """Answers ``"w<index>:<seconds>"`` per window; records calls; can fail or block.

    The gateway's canary inferences (one window of 1 s of silence) are counted in ``canaries``,
    not in ``calls``, and never block on ``gate``; they fail with ``error`` like any call.
    ``reload`` (the gateway's repair) clears ``error`` while ``reload_heals``.
    """

    def __init__(self, answer_seconds: float = 0.0) -> None:
        self.answer_seconds = answer_seconds
        """Every call (canaries included) answers after this long."""
        self.arrivals: list[tuple[float, int]] = []
        """(monotonic time, windows) of every call as it arrived, canaries included."""
        self.calls: list[tuple[int, list[int], str, float]] = []
        self.error: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.entered: asyncio.Event | None = None
        self.closed = False
        self.reloads = 0
        self.canaries = 0
        self.reload_heals = True
        self.options: list[DecodeOptions] = []
        self.requests: list[WindowRequest] = []
        """Every window batch's request, as it crossed the seam (canaries excluded)."""
        self.served = ServedModel("whisper", 16, multilingual=False, engine="fake")
        self.language: str | None = None
        """Language every window's answer reports (``None``: as an English-only model's gateway test)."""
        self.speakers = True
        """What :meth:`speakers_served` answers (False: a server without the speaker model)."""

    async def served_model(self, timeout: float) -> ServedModel:
        if self.error is not None:
            raise self.error
        return self.served

    async def infer(self, windows: Sequence[np.ndarray], request: WindowRequest, timeout: float) -> list[WindowResult]:
        self.arrivals.append((time.monotonic(), len(windows)))
        if self.answer_seconds:
            await asyncio.sleep(self.answer_seconds)
        if len(windows) == 1 and len(windows[0]) == 16000 and not np.any(windows[0]):
            self.canaries += 1
            if self.error is not None:
                raise self.error
            return [WindowResult("")]
        self.requests.append(request)
        self.calls.append((len(windows), [len(w) for w in windows], request.text_prefix(), request.repetition_penalty))
        self.options.append(request.options)
        if self.entered is not None:
            self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        texts = [f"w{i}:{len(w) / 16000:.1f}" for i, w in enumerate(windows)]
        # As the Triton model answers without timestamps: one segment over each window.
        return [
            WindowResult(t, [SegmentResult(0.0, len(w) / 16000, t, [])], temperatures=[0.0], language=self.language)
            for t, w in zip(texts, windows, strict=True)
        ]

    async def speakers_served(self, timeout: float) -> bool:
        if self.error is not None:
            raise self.error
        return self.speakers

    async def reload(self, timeout: float) -> None:
        self.reloads += 1
        if self.reload_heals:
            self.error = None

    async def close(self) -> None:
        self.closed = True
