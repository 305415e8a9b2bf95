"""The bench tool against the real serving path: tritonserver (CPU tiny.en, the session fixture)
and the gateway in a thread, with speech made by espeak-ng + sox. Checks counts and that
Triton's batch counters are read; figures are printed by benchmarks/reference.py, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import soundfile
from gateway_server import running_gateway
from speech_samples import speech_tools_available

from benchmarks.bench.cli import main
from benchmarks.speech import utterances
from whisper_build.serving.gateway.settings import GatewaySettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not speech_tools_available(), reason="espeak-ng and sox are needed (make system-deps)"),
]


def test_bench_against_gateway_and_triton(triton_server, tmp_path: Path) -> None:
    (speech,) = utterances(tmp_path / "audio", count=1)
    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url, port=0)
    with running_gateway(settings) as gateway_url:
        code = main([
            "--audio", str(speech), "--out", str(tmp_path / "out"), "--quiet",
            "--target", f"gateway={gateway_url}",
            "--target", f"openai={gateway_url}/v1/audio/transcriptions",
            "--target", f"triton=grpc://{triton_server.settings.grpc_url}",
            "--triton-metrics", triton_server.settings.metrics_url,
            "--concurrency", "2", "--requests", "2", "--duration", "0", "--warmup", "1", "--timeout", "120",
        ])  # fmt: skip
    assert code == 0
    levels = json.loads((tmp_path / "out" / "bench.json").read_text())["levels"]
    assert len(levels) == 3
    duration = soundfile.info(str(speech)).duration
    for level in levels:
        assert (level["ok"], level["errors"]) == (2, {}), level
        # every request reached Triton: at least one window per execution, never more per
        # execution than the level had requests in flight (one window each: the file is < 30 s),
        # plus, through the gateway, its own health canary (one window every <= 5 s) joining a batch
        canary = 1 if level["target"] in ("gateway", "openai") else 0
        assert 1.0 <= level["avg_batch_size"] <= level["concurrency"] + canary, level
        assert level["audio_s_per_s"] == pytest.approx(2 * duration / level["wall_s"], rel=1e-3)


def test_in_process_engine_target_batches_waiting_requests(tmp_path: Path) -> None:
    """The ``engine:`` target loads the engine in the bench process; requests that arrive while
    it is busy share the next engine call, and the level reports those calls' average batch."""
    (speech,) = utterances(tmp_path / "audio", count=1)
    code = main([
        "--audio", str(speech), "--out", str(tmp_path / "out"), "--quiet", "--interleave",
        "--target", "engine=engine:?engine=ctranslate2&beam_size=1&cpu_threads=2&max_batch=8",
        "--concurrency", "1,2", "--requests", "2", "--duration", "0", "--warmup", "0", "--timeout", "120",
    ])  # fmt: skip
    assert code == 0
    levels = json.loads((tmp_path / "out" / "bench.json").read_text())["levels"]
    assert [(lv["concurrency"], lv["ok"]) for lv in levels] == [(1, 2), (2, 2)]
    assert levels[0]["avg_batch_size"] == 1.0
    assert levels[1]["avg_batch_size"] > 1.0  # two requests in flight, one engine: they shared calls


def test_in_process_target_with_bad_engine_parameters_is_a_usage_error(tmp_path: Path) -> None:
    (speech,) = utterances(tmp_path / "audio", count=1)
    with pytest.raises(SystemExit) as exit_info:
        main(["--audio", str(speech), "--target", "e=engine:?engine=onnx", "--quiet", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
