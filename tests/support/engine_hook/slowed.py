"""Test-only engine wrapper: slows the product's own engine down from outside, in a test's tritonserver.

:func:`tests.slow_engine.slow_triton` starts a tritonserver with ``WHISPER_ENGINE_WRAPPER`` =
``<this file>:wrap``, so :func:`whisper_build.serving.engines.load_engine` returns the
real engine wrapped in :class:`SlowEngine`: each ``generate`` call first sleeps ``seconds_per_window``
× its windows (read at every call from the JSON file ``WHISPER_TEST_ENGINE_CONTROL`` names), then runs
the real decode. Every call is logged to ``WHISPER_TEST_ENGINE_CALLS`` (``start N`` / ``end N``
lines), so a test can tell when the engine is idle. docs/development.md "Tests that need the model busy".
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

CONTROL_VARIABLE = "WHISPER_TEST_ENGINE_CONTROL"
CALLS_VARIABLE = "WHISPER_TEST_ENGINE_CALLS"


class SlowEngine:
    """A :class:`~whisper_build.serving.engines.WhisperEngine` whose ``generate`` sleeps before decoding.

    Args:
        engine: the real engine; every other attribute is its own.
        control: JSON file with ``seconds_per_window`` (missing or unreadable: 0).
        calls: file that gets ``start N`` before and ``end N`` after every ``generate`` of N windows.
    """

    def __init__(self, engine: Any, control: Path, calls: Path) -> None:
        self._engine, self._control, self._calls = engine, control, calls

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _seconds_per_window(self) -> float:
        try:
            return float(json.loads(self._control.read_text())["seconds_per_window"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0.0

    def _log(self, event: str, windows: int) -> None:
        with self._calls.open("a") as out:
            out.write(f"{event} {windows}\n")

    def generate(self, audio: Any, *args: Any, **kwargs: Any) -> Any:
        """Sleep ``seconds_per_window`` × ``len(audio)`` s, then the real engine's ``generate``."""
        self._log("start", len(audio))
        try:
            time.sleep(self._seconds_per_window() * len(audio))
            return self._engine.generate(audio, *args, **kwargs)
        finally:
            self._log("end", len(audio))


def wrap(engine: Any) -> SlowEngine:
    """The ``WHISPER_ENGINE_WRAPPER`` entry point: ``engine`` slowed as the two variables say."""
    return SlowEngine(engine, Path(os.environ[CONTROL_VARIABLE]), Path(os.environ.get(CALLS_VARIABLE, os.devnull)))
