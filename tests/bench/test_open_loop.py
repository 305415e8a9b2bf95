"""The bench tool's open-loop levels: arrival schedules, the saturation rule, scheduler counters, a whole run."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile
from bench_fakes import http_server, ok_answer

from benchmarks.bench.audio import load_samples
from benchmarks.bench.cli import failed_levels, main
from benchmarks.bench.open_loop import arrival_offsets, send_at
from benchmarks.bench.stats import Outcome, saturating_rate, summarize
from benchmarks.bench.triton_metrics import mean_active_rows, parse_counts


def test_arrival_schedules_are_seeded_and_hold_their_rate() -> None:
    assert arrival_offsets(4, 1.0, "even") == [0.0, 0.25, 0.5, 0.75]
    poisson = arrival_offsets(200, 20.0, "poisson", seed=3)
    assert poisson == arrival_offsets(200, 20.0, "poisson", seed=3) != arrival_offsets(200, 20.0, "poisson", seed=4)
    assert abs(len(poisson) - 4000) < 4 * math.sqrt(4000) and poisson == sorted(poisson) and poisson[-1] < 20
    gaps = np.diff(poisson)
    assert np.std(gaps) == pytest.approx(np.mean(gaps), rel=0.1)  # exponential gaps: sd = mean
    with pytest.raises(ValueError, match="must be > 0"):
        arrival_offsets(0, 1.0)
    with pytest.raises(ValueError, match="poisson or even"):
        arrival_offsets(1, 1.0, "bursty")  # type: ignore[arg-type]


def _level(rate: float, ok: int, failed: int = 0, wall: float = 1.0):
    outcomes = [Outcome("ok", 0.1, 1.0)] * ok + [Outcome("http_429", 0.01, 1.0)] * failed
    level = summarize("gateway", 0, outcomes, wall)
    level.rate_per_s = rate
    return level


def test_saturation_is_the_lowest_rate_whose_next_step_gains_under_two_percent() -> None:
    levels = [_level(50, 50), _level(10, 10), _level(40, 29, failed=11), _level(30, 29), _level(20, 20)]
    found = saturating_rate(levels)
    assert found is not None and found.rate_per_s == 30  # 29 → 29 at 40/s: the 11 shed requests do not count
    assert saturating_rate([_level(10, 10), _level(20, 20), _level(30, 30)]) is None  # still rising
    assert saturating_rate([_level(10, 100), _level(20, 101)]).rate_per_s == 10  # type: ignore[union-attr]
    assert saturating_rate([_level(10, 10)]) is None


def test_an_open_loop_level_with_no_success_fails_the_run_while_shedding_does_not() -> None:
    shedding, dead = _level(40, 29, failed=11), _level(20, 0, failed=80)
    assert failed_levels([shedding], max_error_rate=0.1) == []  # above capacity, sheds by design
    assert failed_levels([dead], max_error_rate=0.1) == ["gateway r=20/s: no successful request (http_429=80)"]


def test_rows_per_pass_come_from_the_scheduler_counters_when_exported() -> None:
    def text(steps: int, rows: int, scheduler: bool) -> str:
        triton = (
            f'nv_inference_count{{model="whisper",version="1"}} {rows}\n'
            f'nv_inference_exec_count{{model="whisper",version="1"}} {steps // 10}\n'
        )
        own = (
            "# TYPE whisper_scheduler_steps_total counter\n"
            f'whisper_scheduler_steps_total{{model="whisper"}} {steps}\n'
            "# TYPE whisper_scheduler_step_rows_total counter\n"
            f'whisper_scheduler_step_rows_total{{model="whisper"}} {rows * 30}\n'
        )
        return triton + (own if scheduler else "")

    before, after = parse_counts(text(100, 64, True), "whisper"), parse_counts(text(300, 128, True), "whisper")
    rows, source = mean_active_rows(before, after)
    assert (rows, source) == (64 * 30 / 200, "scheduler")
    plain = parse_counts(text(100, 64, False), "whisper"), parse_counts(text(300, 128, False), "whisper")
    rows, source = mean_active_rows(*plain)
    assert (rows, source) == (64 / 20, "triton_batch")
    assert mean_active_rows(None, None) == (None, None)


@pytest.fixture(scope="module")
def short_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("open_loop") / "tone.wav"
    soundfile.write(path, (0.3 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16_000)
    return path


def test_queueing_behind_a_busy_target_counts_from_the_scheduled_arrival(short_wav: Path) -> None:
    class Serial:  # one request at a time, 20 ms each (an in-process engine's worker)
        name = "serial"

        def __init__(self) -> None:
            self.lock = asyncio.Lock()

        async def send(self, sample: object, timeout: float) -> str:
            async with self.lock:
                await asyncio.sleep(0.02)
            return "ok"

        async def close(self) -> None:
            pass

    async def run() -> list[float]:
        start = time.monotonic() + 0.02
        sent = await send_at(Serial(), load_samples([short_wav]), [(k, 0.0) for k in range(8)], start, timeout=5)
        assert len(sent.lags_s) == 8 and max(sent.lags_s) < 0.05
        return sorted(o.latency_s for o in sent.outcomes)

    latencies = asyncio.run(run())
    assert latencies[0] == pytest.approx(0.02, abs=0.015) and latencies[-1] == pytest.approx(0.16, abs=0.05)

    async def late() -> tuple[list[float], list[float]]:  # a client behind its schedule: the lag is latency too
        sent = await send_at(Serial(), load_samples([short_wav]), [(0, 0.0)], time.monotonic() - 0.3, timeout=5)
        return sent.lags_s, [o.latency_s for o in sent.outcomes]

    lags, [latency] = asyncio.run(late())
    assert lags[0] >= 0.3 and latency >= 0.3 + 0.02


@pytest.mark.integration
def test_open_loop_run_keeps_its_schedule_and_finds_the_servers_capacity(tmp_path: Path, short_wav: Path) -> None:
    """Two client processes keep a 300/s schedule; a server serving one request per 30 ms saturates near 33/s."""
    lock = threading.Lock()

    def serial(n: int, path: str) -> tuple[int, dict]:
        with lock:
            time.sleep(0.03)
        return ok_answer(path)

    common = ["--audio", str(short_wav), "--concurrency", "none", "--clients", "2", "--arrivals", "even",
              "--duration", "1", "--timeout", "10", "--quiet", "--metrics-settle", "0.01"]  # fmt: skip
    with http_server(lambda n, path: ok_answer(path)) as fast, http_server(serial) as slow:
        assert main([*common, "--out", str(tmp_path / "fast"), "--rates", "100,300", "--target", f"fast={fast}"]) == 0
        assert (
            main([*common, "--out", str(tmp_path / "slow"), "--rates", "10,40,80,120", "--target", f"slow={slow}"]) == 0
        )
    fast_run, slow_run = (json.loads((tmp_path / name / "bench.json").read_text()) for name in ("fast", "slow"))
    for level in fast_run["levels"]:  # every arrival sent (at 300/s the in-test server may lag)
        assert level["requests"] == level["ok"] == level["rate_per_s"] and level["clients"] == 2
    # Sends keep their schedule while the slow server queues: a client that waited for answers would fall
    # behind by ~(120 - 33) × 30 ms ≈ 2.6 s at 120/s. 0.5 s leaves a busy CPU's scheduling room.
    for level in [*fast_run["levels"], *slow_run["levels"]]:
        assert level["send_lag_p99_s"] < 0.5, level
    assert fast_run["levels"][0]["requests_per_s"] >= 90
    slow_levels = {level["rate_per_s"]: level for level in slow_run["levels"]}
    assert slow_levels[80]["requests_per_s"] < 40 and slow_levels[80]["latency_p99_s"] > 0.8
    assert fast_run["meta"]["saturating"]["fast"] is None
    # ~33/s capacity: 80/s and 120/s achieve what 40/s does; timing noise may move the first flat step to 80
    assert slow_run["meta"]["saturating"]["slow"]["rate_per_s"] in (40, 80)
