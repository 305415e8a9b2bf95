"""The throughput table (settings/throughput.py): sourced figures, lookups, conservative RTF."""

from __future__ import annotations

import json

import pytest

from settings import gpu_catalog, throughput
from settings.schema import WHISPER_MODELS
from settings.throughput import (
    CPU_DEVICE,
    Estimated,
    Measured,
    UnknownThroughput,
    conservative_rtf,
    device_for_instance_type,
    figures_for,
    throughput_at,
)
from whisper_build.paths import REPO_ROOT

H200 = gpu_catalog.H200.name


def test_every_figure_says_where_it_comes_from() -> None:
    figures = throughput.all_figures()
    assert figures
    for figure in figures:
        if isinstance(figure.source, Measured):
            assert figure.source.where and figure.source.when and "docs/benchmarks.md" in figure.source.run
        else:
            assert isinstance(figure.source, Estimated) and "measured on" in figure.source.basis
        assert figure.windows_per_second > 0 and figure.rtf == pytest.approx(1 / figure.rtfx)


def test_measured_rows_are_the_documented_runs() -> None:
    turbo = figures_for(H200, "torch", "large-v3-turbo")
    assert [f.measured for f in turbo] == [True] * 5
    assert [(f.batch, f.windows_per_second) for f in turbo] == [
        (1.2, 3.2), (2.1, 6.1), (7.9, 20.7), (27.3, 50.5), (61.1, 74.3),
    ]  # fmt: skip
    runs = [f.source.run for f in turbo]  # type: ignore[union-attr]
    assert all("gpu_served_h200.json" in r for r in runs[:4]) and "gpu_served_front_h200.json" in runs[4]
    # the last row is the decoupled front's closed-loop c=64 gateway record: batch = its mean active rows
    run = json.loads((REPO_ROOT / "docs/benchmarks/gpu_served_front_h200.json").read_text(encoding="utf-8"))
    (c64,) = [r for r in run["records"] if r["target"] == "gateway" and r["concurrency"] == 64]
    assert (round(c64["mean_active_rows"], 1), round(c64["windows_per_s"], 1)) == (61.1, 74.3)
    cpu = figures_for(CPU_DEVICE, "ctranslate2", "tiny.en")
    assert all(f.measured for f in cpu)
    # the 10-minute recording on the loaded machine: 100.7 s for 600 s of audio
    assert conservative_rtf(CPU_DEVICE, "ctranslate2", "tiny.en") == pytest.approx(100.7 / 600)


def test_lookup_takes_the_largest_batch_not_above_the_request() -> None:
    assert throughput_at(H200, "torch", "large-v3-turbo", 16).batch == 7.9
    assert throughput_at(H200, "torch", "large-v3-turbo", 61).batch == 27.3
    assert throughput_at(H200, "torch", "large-v3-turbo", 64).batch == 61.1
    assert throughput_at(H200, "torch", "large-v3-turbo", 0.5).batch == 1.2  # below all: the smallest


def test_other_gpus_are_estimates_scaled_down_from_the_h200() -> None:
    a10g = figures_for(gpu_catalog.A10G.name, "torch", "large-v3-turbo")
    h200 = figures_for(H200, "torch", "large-v3-turbo")
    assert a10g and not any(f.measured for f in a10g)
    assert "A10G" in a10g[0].source.basis and "measured on NVIDIA H200" in a10g[0].source.basis  # type: ignore[union-attr]
    for small, big in zip(a10g, h200, strict=True):
        assert small.windows_per_second == pytest.approx(big.windows_per_second * 600 / 4800)


def test_tensorrt_llm_is_the_torch_lower_bound_and_labelled() -> None:
    trt = figures_for(H200, "tensorrt_llm", "large-v3-turbo")
    torch = figures_for(H200, "torch", "large-v3-turbo")
    assert [f.windows_per_second for f in trt] == [f.windows_per_second for f in torch]
    assert all(not f.measured and "not measured" in f.source.basis for f in trt)  # type: ignore[union-attr]


def test_larger_decoders_are_slower_and_smaller_ones_not_assumed_faster() -> None:
    turbo = throughput_at(H200, "torch", "large-v3-turbo", 8)
    large = throughput_at(H200, "torch", "large-v3", 8)
    distil = throughput_at(H200, "torch", "distil-large-v3", 8)
    assert large.windows_per_second == pytest.approx(turbo.windows_per_second * 4 / 32)
    assert distil.windows_per_second == turbo.windows_per_second


def test_every_catalog_gpu_and_model_has_figures() -> None:
    for gpu in {spec.name for spec in gpu_catalog.GPU_FAMILIES.values()}:
        for model in WHISPER_MODELS:
            assert figures_for(gpu, "tensorrt_llm", model), (gpu, model)


def test_unknown_combinations_name_what_is_known() -> None:
    with pytest.raises(UnknownThroughput, match="tiny.en"):
        conservative_rtf(CPU_DEVICE, "torch", "tiny.en")
    assert device_for_instance_type("ml.g6e.2xlarge") == gpu_catalog.L40S.name
    with pytest.raises(UnknownThroughput, match="ml.c5.xlarge"):
        device_for_instance_type("ml.c5.xlarge")
