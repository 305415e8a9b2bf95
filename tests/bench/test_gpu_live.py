"""The GPU live run's CPU-testable parts: arguments, the gateway's settings per weights, the staged speech, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import gpu_live, live


def _row(sessions: int, weights: str, model: str) -> dict:
    figures = live.LOAD_ONLY if weights == "random" else "real weights: latency and WER"
    return {"sessions": sessions, "weights": weights, "figures": figures, "model": model, "turns": 6,
            "turns_without_delta": 1, "first_delta_p50_s": 0.81, "first_delta_p95_s": 1.5, "final_p50_s": 0.7,
            "final_p95_s": None, "wer": 0.125, "file_wer": 0.1, "wer_minus_file_wer": 0.025}  # fmt: skip


def test_arguments_defaults_and_refusals(capsys: pytest.CaptureFixture[str]) -> None:
    args = gpu_live.parse_args(["--triton-env", "A=1"])
    assert (args.sessions, args.models, args.triton_env) == ("8,16,32,64", "tiny.en,large-v3-turbo-random", ["A=1"])
    with pytest.raises(SystemExit):
        gpu_live.parse_args(["--sessions", "8,0"])
    assert "--sessions" in capsys.readouterr().err


def test_only_random_weights_get_the_load_test_confirmation_rule() -> None:
    real, random = gpu_live.gateway_env("real", 128, 4), gpu_live.gateway_env("random", 128, 4)
    assert "WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION" not in real
    assert random["WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION"] == "true"
    assert random["WHISPER_GATEWAY_REALTIME_MAX_SESSIONS"] == "128" and random["WHISPER_GATEWAY_WORKERS"] == "4"


def test_the_staged_speech_loads_back(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "speech.pcm").write_bytes(b"\x01\x00" * 10)
    (tmp_path / "live" / "speech.json").write_text(json.dumps({"text": "a b", "spans": [[0.5, 1.25]]}))
    assert gpu_live.load(tmp_path) == (b"\x01\x00" * 10, "a b", [(0.5, 1.25)])


def test_the_table_marks_load_only_rows_and_prints_from_a_result_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = tmp_path / "gpu_live.json"
    result.write_text(json.dumps({"rows": [_row(8, "real", "tiny.en"), _row(64, "random", "large-v3-turbo-random")]}))
    assert gpu_live.main(["--table", str(result)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == "| 8 | tiny.en | 0.81 / 1.50 | 0.70 / — | 12.5 (10.0) | 1 of 6 |"
    assert lines[3] == "| 64 (load only) | large-v3-turbo-random | 0.81 / 1.50 | 0.70 / — | — | 1 of 6 |"
