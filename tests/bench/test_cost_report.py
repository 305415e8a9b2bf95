"""The bench report's cost section: measured audio s/s → USD per audio hour, break-even, artefacts."""

from __future__ import annotations

import json

import pytest

from benchmarks import cost_report
from settings import load_config
from whisper_build.paths import REPO_ROOT


def _record(model: str, c: int, rtfx: float, windows_per_s: float, random: bool, target: str = "gateway") -> dict:
    return {"target": target, "model": model, "concurrency": c, "rtfx": rtfx, "windows_per_s": windows_per_s,
            "random_weights": random}  # fmt: skip


def test_measured_levels_become_usd_per_audio_hour_at_the_gpu_price() -> None:
    run = {"records": [
        _record("tiny.en", 4, 25.0, 10.0, False),
        _record("large-v3-turbo-random", 16, 10.0, 20.0, True),
        _record("large-v3-turbo-random", 16, 99.0, 99.0, True, target="triton"),  # not the served path
    ]}  # fmt: skip
    points = cost_report.measured_points(run, usd_per_gpu_hour=8.0)
    # audio s/s = RTFx × concurrency; USD per audio hour = 8 USD/h ÷ audio hours per hour
    assert [(p.concurrency, p.audio_s_per_s, p.usd_per_audio_hour) for p in points] == [
        (4, 100.0, 0.08),
        (16, 160.0, 0.05),
        (16, 600.0, pytest.approx(8 / 600)),  # 20 windows/s as full 30 s windows
    ]
    assert points[2].label.endswith("as full 30 s windows") and points[1].label.startswith("H200, large-v3-turbo")
    assert points[0].audio_hours_per_month == 100.0 * 730


def test_only_the_asked_closed_loop_levels_are_priced_and_open_loop_ones_left_out() -> None:
    open_loop = {**_record("large-v3-turbo-random", 0, 6.4, 86.5, True), "concurrency": None}
    run = {"records": [
        _record("large-v3-turbo-random", 1, 78.6, 8.75, True),
        _record("large-v3-turbo-random", 64, 10.6, 74.3, True),
        {**open_loop, "rate_per_s": 133.5, "mean_active_rows": 56.63},
    ]}  # fmt: skip
    points = cost_report.measured_points(run, usd_per_gpu_hour=8.0, concurrencies=(64,), note=", decoupled front")
    # c=64 only, as sent (10.6 × 64 = 678.4 audio s/s) and as full windows (74.3 × 30 = 2229); no open-loop row
    assert [(p.concurrency, p.audio_s_per_s) for p in points] == [(64, pytest.approx(678.4)), (64, pytest.approx(2229))]
    assert points[1].label == "H200, large-v3-turbo shapes (random weights), decoupled front, as full 30 s windows"
    assert len(cost_report.measured_points(run, usd_per_gpu_hour=8.0)) == 4  # both closed-loop levels, twice


def test_h200_is_priced_at_p5en_over_eight_gpus() -> None:
    assert cost_report.h200_gpu_price(load_config()) == pytest.approx(63.296 / 8)


def test_break_even_is_monthly_cost_over_each_hosted_price() -> None:
    even = cost_report.break_even(720.0)
    assert even["OpenAI whisper-1"] == pytest.approx(2000.0)  # 720 ÷ 0.36
    assert even["Amazon Transcribe (tier 1)"] == pytest.approx(500.0)  # 720 ÷ 1.44
    fleet = cost_report.fleet_monthly_usd(load_config())  # 1 × g5.2xlarge + 1 × g6e.2xlarge
    assert fleet == pytest.approx((1.212 + 2.24208) * 730)


def test_estimates_are_labelled_and_the_cpu_has_no_price() -> None:
    config = load_config()
    estimates = cost_report.estimated_points(config)
    assert estimates and all(p.basis.startswith("ESTIMATE") for p in estimates)
    cpu = cost_report.cpu_points({"levels": [{"target": "gateway", "concurrency": 1, "audio_s_per_s": 10.5}]})
    assert [(p.audio_s_per_s, p.usd_per_audio_hour) for p in cpu] == [(10.5, None)]
    assert "NOT a capacity figure" in cpu[0].basis  # docs/benchmarks.md says the sweep levels are not


def test_the_printed_report_marks_the_cpu_rows_as_not_capacity_figures(tmp_path, capsys) -> None:
    assert cost_report.main(["--out", str(tmp_path)]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| CPU development machine")]
    assert rows and all("NOT a capacity figure" in row for row in rows)


def test_the_report_from_the_stored_h200_run_writes_json_markdown_and_png(tmp_path) -> None:
    assert cost_report.main(["--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "cost_per_audio_hour.json").read_text())
    turbo_64 = next(
        p for p in document["points"]
        if p["label"] == "H200, large-v3-turbo shapes (random weights)" and p["concurrency"] == 64
    )  # fmt: skip
    assert turbo_64["usd_per_audio_hour"] == pytest.approx(
        document["h200_usd_per_gpu_hour"] / turbo_64["audio_s_per_s"]
    )
    # the decoupled front adds its closed-loop c=64 gateway level (61.1 rows, 74.29 windows/s) and nothing else
    front = json.loads((REPO_ROOT / document["inputs"]["front"]).read_text())
    (c64,) = [r for r in front["records"] if r["target"] == "gateway" and r["concurrency"] == 64]
    rows = [p for p in document["points"] if "decoupled front" in p["label"]]
    assert [(p["concurrency"], p["audio_s_per_s"]) for p in rows] == [
        (64, pytest.approx(c64["rtfx"] * 64)),
        (64, pytest.approx(c64["windows_per_s"] * 30)),
    ]
    assert "| OpenAI whisper-1 | 0.36 |" in (tmp_path / "cost_per_audio_hour.md").read_text()
    assert (tmp_path / "cost_per_audio_hour.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_rerun_on_the_same_inputs_leaves_the_figure_file_as_it_was(tmp_path) -> None:
    from PIL import Image

    assert cost_report.main(["--out", str(tmp_path)]) == 0
    png = tmp_path / "cost_per_audio_hour.png"
    # GIVEN the figure as another machine renders it: the same picture, a few pixels and bytes apart
    image = Image.open(png).convert("RGB")
    image.putpixel((5, 5), (250, 250, 250))
    image.save(png)
    stored = png.read_bytes()
    # WHEN make bench-cost runs again THEN the file is left as it was (git status stays clean)
    assert cost_report.main(["--out", str(tmp_path)]) == 0
    assert png.read_bytes() == stored
    # but a figure that changed is written
    cost_report.plot(cost_report.estimated_points(load_config(None)), png)
    assert png.read_bytes() != stored
