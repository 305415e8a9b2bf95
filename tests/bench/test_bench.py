"""The bench tool: arithmetic, target parsing, Triton counters, and whole runs against tiny local
servers that answer correctly, answer 500/429, never answer, or refuse connections."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
import soundfile
from bench_fakes import closed_port, http_server, ok_answer, silent_server

from benchmarks.bench.audio import BenchInputError, load_samples
from benchmarks.bench.cli import main
from benchmarks.bench.stats import Outcome, percentile, summarize
from benchmarks.bench.targets import parse_target
from benchmarks.bench.triton_metrics import Counts, average_batch_size, parse_counts, server_timings
from whisper_build.serving import contract


# ---------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("q", [0, 1, 50, 90, 99, 100])
@pytest.mark.parametrize("n", [1, 2, 7, 100])
def test_percentile_matches_numpy_linear(q: float, n: int) -> None:
    values = [random.Random(i).uniform(0, 10) for i in range(n)]
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_of_nothing_and_bad_q() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="within"):
        percentile([1.0], 101)


def test_summarize_rtf_throughput_and_errors() -> None:
    good = [Outcome("ok", latency, audio) for latency, audio in [(1.0, 10.0), (3.0, 20.0), (2.0, 5.0)]]
    bad = [Outcome("http_500", 0.1, 10.0), Outcome("timeout", 5.0, 10.0), Outcome("http_500", 0.2, 10.0)]
    result = summarize("gw", 4, good + bad, wall_s=5.0, avg_batch_size=3.5)

    assert (result.requests, result.ok) == (6, 3)
    assert result.errors == {"http_500": 2, "timeout": 1}
    assert result.latency_p50_s == pytest.approx(2.0)
    assert result.latency_mean_s == pytest.approx(2.0)
    assert result.requests_per_s == pytest.approx(3 / 5.0)
    assert result.audio_s_per_s == pytest.approx(35.0 / 5.0)  # failed requests' audio is not counted
    assert result.rtf == pytest.approx(6.0 / 35.0)  # processing time / audio time
    assert result.rtfx == pytest.approx(35.0 / 6.0)
    assert result.avg_batch_size == 3.5


def test_summarize_without_success_has_no_latency_or_rtf() -> None:
    result = summarize("gw", 1, [Outcome("timeout", 1.0, 3.0)], wall_s=1.0)
    assert result.ok == 0 and result.latency_p99_s is None and result.rtf is None and result.rtfx is None
    assert result.audio_s_per_s == 0.0
    with pytest.raises(ValueError, match="wall_s"):
        summarize("gw", 1, [], wall_s=0.0)


# ---------------------------------------------------------------- targets and counters
@pytest.mark.parametrize(
    ("spec", "kind", "address"),
    [
        ("gw=http://127.0.0.1:8080", "invocations", "http://127.0.0.1:8080"),
        ("gw=http://127.0.0.1:8080/invocations", "invocations", "http://127.0.0.1:8080"),
        ("oa=http://h:1/v1/audio/transcriptions/", "openai", "http://h:1"),
        ("t=grpc://127.0.0.1:8001", "triton", "127.0.0.1:8001"),
    ],
)
def test_parse_target(spec: str, kind: str, address: str) -> None:
    parsed = parse_target(spec)
    assert (parsed.name, parsed.kind, parsed.address) == (spec.split("=")[0], kind, address)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("http://127.0.0.1:8080", "NAME=URL"),
        ("gw=http://127.0.0.1", "host and a port"),
        ("gw=ftp://127.0.0.1:21", "scheme"),
        ("gw=http://127.0.0.1:8080/other", "path"),
    ],
)
def test_parse_target_errors_name_the_fix(spec: str, message: str) -> None:
    with pytest.raises(BenchInputError, match=message):
        parse_target(spec)


def test_triton_counters_and_average_batch() -> None:
    text = (
        "# TYPE nv_inference_count counter\n"
        'nv_inference_count{model="whisper",version="1"} 30\n'
        'nv_inference_count{model="whisper",version="2"} 10\n'
        'nv_inference_count{model="other",version="1"} 99\n'
        "# TYPE nv_inference_exec_count counter\n"
        'nv_inference_exec_count{model="whisper",version="1"} 8\n'
        'nv_inference_exec_count{model="whisper",version="2"} 2\n'
    )
    after = parse_counts(text, "whisper")
    assert (after.inferences, after.executions) == (40.0, 10.0)
    assert average_batch_size(Counts(0.0, 0.0), after) == pytest.approx(4.0)
    assert average_batch_size(after, after) is None  # nothing executed
    assert average_batch_size(None, after) is None  # a scrape failed
    empty = parse_counts("", "whisper")
    assert (empty.inferences, empty.executions, empty.stage_seconds) == (0.0, 0.0, {})


def test_time_inside_triton_per_request_and_per_execution() -> None:
    def exposition(requests: int, executions: int, queue_us: int, infer_us: int, engine_s: float) -> str:
        return (
            f'nv_inference_request_success{{model="whisper",version="1"}} {requests}\n'
            f'nv_inference_exec_count{{model="whisper",version="1"}} {executions}\n'
            f'nv_inference_count{{model="whisper",version="1"}} {requests}\n'
            f'nv_inference_request_duration_us{{model="whisper",version="1"}} {queue_us + infer_us + 1000 * requests}\n'
            f'nv_inference_queue_duration_us{{model="whisper",version="1"}} {queue_us}\n'
            f'nv_inference_compute_infer_duration_us{{model="whisper",version="1"}} {infer_us}\n'
            f'nv_inference_queue_duration_us{{model="other",version="1"}} 999999\n'
            "# TYPE whisper_model_stage_seconds counter\n"
            f'whisper_model_stage_seconds{{stage="engine"}} {engine_s}\n'
            f'whisper_model_stage_seconds{{stage="parse"}} {engine_s / 100}\n'
        )

    before = parse_counts(exposition(10, 5, 20_000, 1_000_000, 0.4), "whisper")
    after = parse_counts(exposition(30, 10, 60_000, 5_000_000, 1.4), "whisper")
    timings = server_timings(before, after)
    assert timings is not None
    assert timings["queue"] == pytest.approx(2.0)  # 40 ms over 20 requests
    assert timings["compute_infer"] == pytest.approx(200.0)
    assert timings["request"] == pytest.approx(203.0)
    assert timings["model_engine"] == pytest.approx(200.0)  # 1 s over 5 executions
    assert timings["model_parse"] == pytest.approx(2.0)
    assert server_timings(after, after) is None and server_timings(None, after) is None
    # AND with the model scheduler's steps exported: engine per step (2 s over 4), parse per request
    steps = f'{contract.SCHEDULER_STEPS}{{model="whisper"}} '
    before = parse_counts(exposition(10, 10, 0, 0, 0.4) + steps + "1\n", "whisper")
    after = parse_counts(exposition(30, 30, 0, 0, 2.4) + steps + "5\n", "whisper")
    timings = server_timings(before, after)
    assert timings is not None
    assert timings["model_engine"] == pytest.approx(500.0) and timings["model_parse"] == pytest.approx(1.0)


# ---------------------------------------------------------------- whole runs
@pytest.fixture(scope="module")
def audio_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1.5 s of a 300 Hz tone at 16 kHz (non-silent, so it is one window)."""
    path = tmp_path_factory.mktemp("bench_audio") / "tone.wav"
    t = np.arange(24_000) / 16_000
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * 300 * t)).astype(np.float32), 16_000)
    return path


def _run(tmp_path: Path, audio: Path, targets: list[str], *extra: str, expect: int = 0) -> dict:
    argv = [
        "--audio",
        str(audio),
        "--out",
        str(tmp_path),
        "--duration",
        "0",
        "--warmup",
        "0",
        "--metrics-settle",
        "0.05",
    ]
    for target in targets:
        argv += ["--target", target]
    assert main([*argv, *extra]) == expect
    return json.loads((tmp_path / "bench.json").read_text())


def _levels(report: dict, target: str) -> dict[int, dict]:
    return {lvl["concurrency"]: lvl for lvl in report["levels"] if lvl["target"] == target}


@pytest.mark.integration
def test_counts_ok_errors_and_timeouts_and_writes_reports(tmp_path: Path, audio_file: Path) -> None:
    def alternating(n: int, path: str) -> tuple[int, dict]:
        return (500, {"error": "boom"}) if n % 2 == 0 else (429, {"error": "busy"})

    with http_server(lambda n, path: ok_answer(path)) as good, http_server(alternating) as bad, silent_server() as hung:
        report = _run(
            tmp_path, audio_file,
            [f"good={good}", f"openai={good}/v1/audio/transcriptions", f"bad={bad}", f"hung=http://127.0.0.1:{hung}"],
            "--concurrency", "1,2", "--requests", "4", "--timeout", "0.5",
            "--triton-metrics", f"good={good}/metrics", expect=1,
        )  # fmt: skip

    duration = float(soundfile.info(audio_file).duration)
    for concurrency in (1, 2):
        good_level = _levels(report, "good")[concurrency]
        assert (good_level["requests"], good_level["ok"], good_level["errors"]) == (4, 4, {})
        assert good_level["latency_p50_s"] > 0 and good_level["rtfx"] > 0
        assert good_level["audio_s_per_s"] == pytest.approx(4 * duration / good_level["wall_s"], rel=1e-3)
        assert good_level["avg_batch_size"] == pytest.approx(2.0)  # fake: one execution per 2 requests
        assert _levels(report, "openai")[concurrency]["ok"] == 4
        assert _levels(report, "openai")[concurrency]["avg_batch_size"] is None  # no metrics URL given
        assert _levels(report, "bad")[concurrency]["errors"] == {"http_429": 2, "http_500": 2}
        assert _levels(report, "bad")[concurrency]["ok"] == 0
        assert _levels(report, "hung")[concurrency]["errors"] == {"timeout": 4}

    with (tmp_path / "bench.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 * 2
    assert {r["errors"] for r in rows if r["target"] == "bad"} == {"http_429:2;http_500:2"}
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
def test_closed_port_fails_before_the_sweep(
    tmp_path: Path, audio_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead server: exit 3 at once, naming the target and address; nothing is written."""
    port = closed_port()
    with http_server(lambda n, path: ok_answer(path)) as good:
        code = main([
            "--audio", str(audio_file), "--out", str(tmp_path / "out"), "--quiet", "--duration", "60",
            "--target", f"good={good}", "--target", f"dead=http://127.0.0.1:{port}",
            "--target", f"deadgrpc=grpc://127.0.0.1:{port}",
        ])  # fmt: skip
    assert code == 3
    err = capsys.readouterr().err
    assert f"target dead: cannot connect to 127.0.0.1:{port} (Connection refused)" in err
    assert f"target deadgrpc: cannot connect to 127.0.0.1:{port}" in err
    assert "target good" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.integration
def test_grpc_silence_is_counted_and_fails_the_run(tmp_path: Path, audio_file: Path) -> None:
    with silent_server() as hung:
        report = _run(
            tmp_path, audio_file, [f"grpc=grpc://127.0.0.1:{hung}"],
            "--concurrency", "2", "--requests", "2", "--timeout", "0.5", "--quiet", expect=1,
        )  # fmt: skip
    grpc_errors = _levels(report, "grpc")[2]["errors"]
    assert sum(grpc_errors.values()) == 2 and set(grpc_errors) <= {"timeout", "unavailable"}


@pytest.mark.integration
def test_error_rate_threshold(tmp_path: Path, audio_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every third request answers 503: 33% errors pass the default 0.5 and fail --max-error-rate 0.2."""

    def shedding(n: int, path: str) -> tuple[int, dict]:
        return (503, {"error": "busy"}) if n % 3 == 2 else ok_answer(path)

    with http_server(shedding) as server:
        argv = ["--concurrency", "1", "--requests", "6", "--quiet"]
        report = _run(tmp_path / "a", audio_file, [f"gw={server}"], *argv)
        assert _levels(report, "gw")[1]["ok"] == 4
        capsys.readouterr()
        _run(tmp_path / "b", audio_file, [f"gw={server}"], *argv, "--max-error-rate", "0.2", expect=1)
    assert "FAILED gw concurrency 1: 33% of 6 requests failed (> --max-error-rate 0.2; http_503=2)" in (
        capsys.readouterr().err
    )


def test_skipped_folder_entries_are_reported_and_recorded(
    tmp_path: Path, audio_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "audio"
    folder.mkdir()
    (folder / "speech.wav").write_bytes(audio_file.read_bytes())
    (folder / "notes.txt").write_text("not audio")
    (folder / "broken.wav").write_bytes(b"RIFF nonsense")
    with http_server(lambda n, path: ok_answer(path)) as server:
        report = _run(tmp_path, folder, [f"gw={server}"], "--concurrency", "1", "--requests", "1", "--quiet")
    err = capsys.readouterr().err
    assert f"skipped {folder / 'notes.txt'}: not an audio file name" in err
    assert f"skipped {folder / 'broken.wav'}: " in err
    assert [f["path"] for f in report["meta"]["audio_files"]] == [str(folder / "speech.wav")]
    assert {s["path"] for s in report["meta"]["skipped_inputs"]} == {
        str(folder / "notes.txt"),
        str(folder / "broken.wav"),
    }


@pytest.mark.integration
def test_overall_deadline_stops_a_hung_level(tmp_path: Path, audio_file: Path) -> None:
    """Per-request timeout far beyond the deadline: the run still ends, counting ``aborted``."""
    with silent_server() as hung:
        report = _run(
            tmp_path, audio_file, [f"hung=http://127.0.0.1:{hung}"],
            "--concurrency", "3,8", "--requests", "100", "--timeout", "600", "--deadline", "1", "--quiet", expect=1,
        )  # fmt: skip
    levels = _levels(report, "hung")
    assert list(levels) == [3]  # the second level was never started
    assert levels[3]["errors"] == {"aborted": 3} and levels[3]["ok"] == 0


def test_bad_input_exits_with_a_message(tmp_path: Path, audio_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--audio", str(tmp_path / "missing.wav"), "--target", "gw=http://127.0.0.1:1", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "missing.wav does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--audio", str(audio_file), "--target", "gw=http://127.0.0.1:1", "--concurrency", "0,2"])
    silent = tmp_path / "silence.wav"
    soundfile.write(silent, np.zeros(16_000, dtype=np.float32), 16_000)
    with pytest.raises(BenchInputError, match="silent"):
        load_samples([silent])
