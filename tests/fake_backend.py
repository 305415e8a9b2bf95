"""A fake model backend for gateway tests that do not need Triton."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np


class FakeBackend:
    """Answers ``"w<index>:<seconds>"`` per window; records calls; can fail or block."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[int], str, float]] = []
        self.error: Exception | None = None
        self.is_ready = True
        self.gate: asyncio.Event | None = None
        self.entered: asyncio.Event | None = None
        self.closed = False

    async def transcribe(
        self, windows: Sequence[np.ndarray], text_prefix: str, repetition_penalty: float, timeout: float
    ) -> list[str]:
        self.calls.append((len(windows), [len(w) for w in windows], text_prefix, repetition_penalty))
        if self.entered is not None:
            self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.error is not None:
            raise self.error
        return [f"w{i}:{len(w) / 16000:.1f}" for i, w in enumerate(windows)]

    async def ready(self, timeout: float) -> bool:
        return self.is_ready

    async def close(self) -> None:
        self.closed = True
