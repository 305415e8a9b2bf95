"""The served-path run's report (benchmarks/gpu_served_report.py) and workloads (gpu_served_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile

from benchmarks.gpu_served_engine import drawn_tokens, mixed_audio, workload_params
from benchmarks.gpu_served_report import levels_table, plot, report, saturating_record, summary, table, targets
from whisper_build.serving.engines import EngineParams

FIXTURE = Path(__file__).parents[1] / "data" / "bench" / "gpu_served_report.json"


def test_targets_table_computes_each_ratio_against_its_goal() -> None:
    result = json.loads(FIXTURE.read_text())
    rows = {
        (figure, workload): (measured, goal, verdict) for figure, workload, measured, goal, verdict in targets(result)
    }
    assert rows[("gateway at saturation ÷ engine best", "dense")] == (
        "155.0 (at 170/s) ÷ 170.0 (static 64) = 0.912", "≥ 0.9", "**pass**")  # fmt: skip
    assert rows[("triton at saturation ÷ engine best", "dense")][0].endswith("= 0.976")
    assert rows[("gateway p50 − engine alone, c=1", "dense")] == ("293.7 − 285.7 = 8.0 ms", "≤ 10 ms", "**pass**")
    assert rows[("engine alone, dense windows/s", "dense")][2] == "**pass**"
    assert rows[("load generator: worst send lag p99", "dense")][0] == "4.0 ms"
    # mixed: the in-flight engine is the best; the static gateway saturates at 160/s (110 → 111)
    assert rows[("gateway at saturation ÷ engine best", "mixed")][0].endswith("÷ 200.0 (inflight 64) = 0.550")
    assert rows[("gateway at saturation ÷ engine best", "mixed")][2] == "**FAIL**"
    assert rows[("triton at saturation ÷ engine best", "mixed")][0] == "no open-loop levels"
    assert ("gateway p50 − engine alone, c=1", "mixed") not in rows  # its windows differ from the engine's
    assert rows[("gateway inflight ÷ static at 160/s", "mixed")][0] == "150.0 ÷ 110.0 = 1.364"
    flipped = {**result, "batching": {"schedulers": ["inflight", "static"]}}
    for record in flipped["records"]:
        if record.get("scheduler"):
            record["scheduler"] = {"static": "inflight", "inflight": "static"}[record["scheduler"]]
    assert ("gateway inflight ÷ static at 160/s", "mixed", "110.0 ÷ 150.0 = 0.733", "report", "—") in targets(flipped)
    idle = json.loads(FIXTURE.read_text())
    for record in idle["records"]:  # a scheduler that served nothing at that rate: the report still prints
        if record.get("scheduler") == "static" and record["target"] == "gateway" and record["rate_per_s"] == 160:
            record["windows_per_s"] = 0.0
    assert ("gateway inflight ÷ static at 160/s", "mixed", "150.0 ÷ 0.0 = —", "report", "—") in targets(idle)
    text = report(json.loads(FIXTURE.read_text()))
    assert text.count("\n| dense |") == 15 and "| dense | gateway | r=170/s | 155.0 | 300 | 600 |" in text


def test_engine_core_rows_take_each_policys_best_closed_level() -> None:
    result = json.loads(FIXTURE.read_text())
    core = {"target": "engine_core", "workload": "dense", "random_weights": True, "rate_per_s": None}
    result["records"] += [
        {**core, "path": "static", "concurrency": 64, "windows_per_s": 150.0, "p50_s": 0.4},
        {**core, "path": "static", "concurrency": 128, "windows_per_s": 165.0, "p50_s": 0.7},
        {**core, "path": "inflight", "concurrency": 128, "windows_per_s": 158.4, "p50_s": 0.6},
    ]
    rows = {(figure, workload): (measured, verdict) for figure, workload, measured, _, verdict in targets(result)}
    assert rows[("engine core (static) ÷ engine best", "dense")] == ("165.0 (c=128) ÷ 170.0 = 0.971", "**pass**")
    assert rows[("engine core (inflight) ÷ engine best", "dense")] == ("158.4 (c=128) ÷ 170.0 = 0.932", "**FAIL**")
    assert rows[("engine core in-flight ÷ static", "dense")] == ("158.4 ÷ 165.0 = 0.960", "**pass**")
    assert ("engine core in-flight ÷ static", "mixed") not in rows
    assert "| dense | engine_core | c=128 (inflight) | 158.4 | 600 |" in levels_table(result["records"])


def test_saturation_needs_a_step_that_gains_under_two_percent() -> None:
    records = json.loads(FIXTURE.read_text())["records"]
    rising = [r for r in records if r["workload"] == "dense" and r["target"] == "gateway" and r["rate_per_s"] != 187.0]
    assert saturating_record(rising, "gateway") is None
    assert "| dense | engine | static batch 1 | 3.5 | 286 | — | 1.0 (engine) |" in levels_table(records)


def test_records_name_where_rows_and_encoder_batches_come_from(tmp_path: Path) -> None:
    def level(source: str, rate: float | None = None) -> dict:
        return {"target": "gateway", "concurrency": 0 if rate else 64, "rate_per_s": rate, "requests_per_s": 50.0,
                "mean_active_rows": 40.0, "avg_batch_size": 1.0, "rows_source": source}  # fmt: skip

    static = summary([level("scheduler"), level("triton_batch", rate=80.0)], "m", {"scheduler": "static"})
    inflight = summary([level("scheduler")], "m", {"scheduler": "inflight"})
    assert [r["mean_encoder_batch"] for r in static] == [40.0, 40.0] and inflight[0]["mean_encoder_batch"] is None
    assert (static[1]["concurrency"], static[1]["rate_per_s"]) == (None, 80.0)
    records = json.loads(FIXTURE.read_text())["records"]  # open-loop and engine records stay out of the c table
    assert table(records, "large-v3-turbo-random").splitlines()[0].count("c=") == 2
    assert plot(FIXTURE, tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_workloads_differ_only_in_decode_lengths(tmp_path: Path) -> None:
    base = EngineParams(engine="torch", model_path="/m", beam_size=1, random_weights_fixed_tokens=100)
    dense, mixed = workload_params(base, "dense", 100), workload_params(base, "mixed", 100)
    assert (dense.random_weights_fixed_tokens, dense.random_weights_lengths) == (100, "fixed")
    assert (mixed.random_weights_fixed_tokens, mixed.random_weights_lengths) == (140, "mixed")
    assert mixed.model_dump(exclude={"random_weights_fixed_tokens", "random_weights_lengths"}) == base.model_dump(
        exclude={"random_weights_fixed_tokens", "random_weights_lengths"}
    )
    sources = []
    for k in range(2):
        sources.append(tmp_path / f"s{k}.wav")
        soundfile.write(sources[-1], (0.2 * np.sin(np.arange(8000) / (3 + k))).astype(np.float32), 16_000)
    files = mixed_audio(sources, tmp_path / "mixed", 12)
    drawn = drawn_tokens(files)
    assert len(files) == 12 and len(set(drawn)) >= 8 and all(10 <= n <= 140 for n in drawn)
    assert drawn_tokens(mixed_audio(sources, tmp_path / "again", 12)) == drawn  # seeded
    with pytest.raises(ValueError, match="needs random_weights_fixed_tokens"):
        EngineParams(**{**base.model_dump(), "random_weights_lengths": "mixed"})
