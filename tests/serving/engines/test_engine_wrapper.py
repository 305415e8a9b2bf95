"""``WHISPER_ENGINE_WRAPPER``: the loaded engine passes through a named callable (tests slow the real engine this way)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from engine_hook.slowed import SlowEngine

from whisper_build.serving.engines import EngineParams, EngineParamsError
from whisper_build.serving.engines.factory import WRAPPER_VARIABLE, load_engine, wrap_engine

HOOK = Path(__file__).resolve().parents[2] / "support" / "engine_hook" / "slowed.py"


class _Engine:
    name = "fake"

    def generate(self, audio, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN201
        return [f"window {i}" for i in range(len(audio))]


def test_no_wrapper_leaves_the_engine_and_a_bad_one_is_refused_with_the_variable() -> None:
    engine = _Engine()
    assert wrap_engine(engine, "") is engine  # type: ignore[arg-type]
    for spec in ("no-colon", "json:no_such_attribute", "json:__name__"):
        with pytest.raises(EngineParamsError, match=WRAPPER_VARIABLE):
            wrap_engine(engine, spec)  # type: ignore[arg-type]


def test_a_file_wrapper_slows_generate_per_window_and_logs_each_call(tmp_path: Path, monkeypatch) -> None:
    control, calls = tmp_path / "control.json", tmp_path / "calls.log"
    control.write_text(json.dumps({"seconds_per_window": 0.2}))
    monkeypatch.setenv("WHISPER_TEST_ENGINE_CONTROL", str(control))
    monkeypatch.setenv("WHISPER_TEST_ENGINE_CALLS", str(calls))
    engine = wrap_engine(_Engine(), f"{HOOK}:wrap")  # type: ignore[arg-type]
    assert type(engine).__name__ == SlowEngine.__name__ and engine.name == "fake"  # loaded from the file
    started = time.monotonic()
    assert engine.generate([np.zeros(16000)] * 3, [], []) == ["window 0", "window 1", "window 2"]
    assert time.monotonic() - started >= 0.6  # 3 windows × 0.2 s
    assert calls.read_text().split("\n")[:2] == ["start 3", "end 3"]


def test_load_engine_applies_the_variable(tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "wrapper.py"
    marker.write_text("def wrap(engine):\n    engine.wrapped_by_test = True\n    return engine\n")
    monkeypatch.setenv(WRAPPER_VARIABLE, f"{marker}:wrap")
    engine = load_engine(EngineParams(engine="ctranslate2", device="cpu", cpu_threads=1))
    assert getattr(engine, "wrapped_by_test", False)
