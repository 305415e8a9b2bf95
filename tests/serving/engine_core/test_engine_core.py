"""The engine core in a process of its own: the wire, the stub's client, a real core process (echo and engine).

Every core here is a real child process started as the Triton stub starts it (``process.spawn_core``);
waits are for the state asserted, bounded generously for a busy 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from whisper_build.serving import contract
from whisper_build.serving.engine_core import wire
from whisper_build.serving.engine_core.client import Answer, CoreClient, CoreFailed
from whisper_build.serving.engine_core.core import IPC_PREFIX, PROCESS_NAME, CoreConfig
from whisper_build.serving.engine_core.gauges import CoreGauges
from whisper_build.serving.triton_model.batching import parse_request

WAIT_S = 120.0
"""Bound of every wait (a busy CI box); the states are asserted, not the time."""


def _request(rows: int = 1, seconds: float = 1.0, **optional: np.ndarray):
    rng = np.random.default_rng(0)
    wav = (rng.standard_normal((rows, int(16000 * seconds))) * 0.1).astype(np.float32)
    inputs = {contract.WAV.name: wav, **optional}
    return parse_request(inputs), wav


class _Answers:
    """Collects ``answer(handle, Answer)`` calls; ``wait(n)`` until n arrived."""

    def __init__(self) -> None:
        self.got: dict[object, Answer] = {}
        self._cond = threading.Condition()

    def __call__(self, handle: object, answer: Answer) -> None:
        with self._cond:
            self.got[handle] = answer
            self._cond.notify_all()

    def wait(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.got) >= count, WAIT_S), f"{len(self.got)} of {count}"


def _config(**fields: object) -> CoreConfig:
    return CoreConfig(requests="", answers="", parent=0, **fields)  # type: ignore[arg-type]


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait(condition, what: str) -> float:  # noqa: ANN001
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < WAIT_S, what
        time.sleep(0.05)
    return time.monotonic() - start


def test_audio_crosses_as_16_bit_pcm_and_the_request_is_read_back_whole() -> None:
    prefix = np.array([[b"<|startoftranscript|><|en|><|transcribe|>"], [b""]], dtype=object)
    request, wav = _request(rows=2, TEXT_PREFIX=prefix, TIMESTAMPS=np.array([[True], [False]]),
                            WAV_LENS=np.array([[16000], [8000]], dtype=np.int32))  # fmt: skip
    frames = wire.encode_submit(7, 3, 1.5, request, wav)
    assert len(frames) == 2 and frames[1].nbytes == wav.size * 2  # 16-bit PCM, no float32 on the wire
    submitted = wire.decode_submit(wire.decode_header(frames[0]), bytes(frames[1]))
    assert (submitted.request_id, submitted.level, submitted.timeout_s) == (7, 3, 1.5)
    back = submitted.request
    assert [len(a) for a in back.audio] == [16000, 8000]
    assert max(float(np.abs(a - b).max()) for a, b in zip(back.audio, request.audio, strict=True)) <= 1 / 32767
    assert back.prompts == request.prompts and back.options == request.options


def test_an_echo_core_answers_every_request_from_its_own_named_process() -> None:
    answers = _Answers()
    client = CoreClient(_config(echo_ms=8), answers)
    info = client.start()
    pid = client.pid
    assert pid is not None and info["engine"] == "echo"
    assert PROCESS_NAME in _cmdline(pid) and Path(_cmdline(pid)[0]).name.startswith("python")
    assert int(Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[1]) == os.getpid()  # a direct child
    request, wav = _request()
    for handle in range(40):
        client.submit(handle, lambda: False, contract.SYNC_PRIORITY, None, request, wav)
    answers.wait(40)
    assert all(a.texts == [""] and a.code == "" for a in answers.got.values())
    folder = client._folder
    client.close()
    assert _gone(pid) and not Path(folder).exists()


def test_a_cancelled_request_is_answered_at_once_and_its_work_leaves_the_core() -> None:
    answers = _Answers()
    client = CoreClient(_config(echo_ms=600_000), answers)  # nothing ends by itself
    client.start()
    request, wav = _request()
    cancelled = threading.Event()
    client.submit("kept", lambda: False, contract.SYNC_PRIORITY, None, request, wav)
    client.submit("gone", cancelled.is_set, contract.SYNC_PRIORITY, None, request, wav)
    cancelled.set()
    answers.wait(1)
    assert answers.got == {"gone": Answer(code="CANCELLED", message="cancelled by the client")}
    client.close()
    assert answers.got["kept"].code == "UNAVAILABLE"  # open at unload: answered, never left waiting


def test_kill_9_of_the_core_answers_what_it_held_and_a_new_core_serves() -> None:
    answers = _Answers()
    client = CoreClient(_config(echo_ms=60_000), answers)
    client.start()
    request, wav = _request()
    client.submit("held", lambda: False, contract.SYNC_PRIORITY, None, request, wav)
    old = client.pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    answers.wait(1)
    held = answers.got["held"]
    assert held.code == "UNAVAILABLE" and held.message.startswith(contract.ENGINE_CORE_RESTARTING)
    assert "retry in" in held.message
    _wait(lambda: client.alive and client.pid != old, "no new core")
    assert client.restarts == 1
    client.close()


def test_a_core_whose_engine_cannot_load_fails_the_start_with_the_reason(tmp_path: Path) -> None:
    params = {"engine": "ctranslate2", "model_path": str(tmp_path / "missing")}
    client = CoreClient(_config(params=params), _Answers())
    with pytest.raises(CoreFailed, match="the engine did not load"):
        client.start()
    client.close()


STUB = """
import sys, time
from whisper_build.serving.engine_core.client import CoreClient
from whisper_build.serving.engine_core.core import CoreConfig
client = CoreClient(CoreConfig(requests="", answers="", parent=0, echo_ms=5), lambda h, a: None)
client.start()
print(client.pid, client._folder, flush=True)
time.sleep(3600)
"""


def test_the_core_exits_by_itself_when_its_stub_is_killed() -> None:
    stub = subprocess.Popen([sys.executable, "-c", STUB], stdout=subprocess.PIPE, text=True)
    try:
        assert stub.stdout is not None
        pid_text, folder = stub.stdout.readline().split()
        core = int(pid_text)
        assert PROCESS_NAME in _cmdline(core)
        stub.send_signal(signal.SIGKILL)
        stub.wait()
        seconds = _wait(lambda: _gone(core), "the core outlived its stub")
        print(f"\ncore exited {seconds:.1f} s after kill -9 of its stub")
        _wait(lambda: not Path(folder).exists(), "the dead stub's socket folder is left behind")
        assert Path(folder).name.startswith(IPC_PREFIX)
    finally:
        if stub.poll() is None:
            stub.kill()


def test_the_tiny_en_engine_decodes_behind_the_core() -> None:
    from whisper_build.serving.engines import EngineParams

    answers = _Answers()
    params = EngineParams(engine="ctranslate2", cpu_threads=1, temperature_increment=0.0).model_dump()
    client = CoreClient(_config(params=params), answers)
    info = client.start()
    assert info["engine"] == "ctranslate2" and info["multilingual"] is False
    request, wav = _request(seconds=2.0)
    client.submit("noise", lambda: False, contract.SYNC_PRIORITY, None, request, wav)
    answers.wait(1)
    answer = answers.got["noise"]
    assert answer.code == "" and answer.results is not None and len(answer.results) == 1
    assert json.loads(answer.results[0])["text"] == answer.texts[0]  # type: ignore[index]
    client.close()


def test_core_gauges_are_rates_over_the_last_second() -> None:
    gauges = CoreGauges("whisper")
    gauges.update({"steps": 0, "step_seconds": 0, "row_steps": 0, "encoder_passes": 0, "encoded": 0}, now=0.0)
    gauges.update({"steps": 10, "step_seconds": 0.05, "row_steps": 320, "encoder_passes": 2, "encoded": 30}, now=0.5)
    step_ms, rows, encoder = contract.ENGINE_CORE_METRICS[2:]
    assert gauges.values[step_ms] == pytest.approx(5.0)
    assert gauges.values[rows] == pytest.approx(32.0) and gauges.values[encoder] == pytest.approx(15.0)
    gauges.flush(up=True, restarts=2)
    assert gauges.values[contract.ENGINE_CORE_METRICS[0]] == 1.0


def test_a_new_core_s_counters_continue_from_the_last_core_s_and_gauges_are_taken_as_they_are() -> None:
    from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics

    metrics = SchedulerMetrics("whisper")
    metrics.load([(contract.SCHEDULER_FINISHED, {}, 5), (contract.SCHEDULER_QUEUED, {"level": "sync"}, 4)], 1)
    metrics.load([(contract.SCHEDULER_FINISHED, {}, 2), (contract.SCHEDULER_QUEUED, {"level": "sync"}, 1)], 2)
    assert metrics.value(contract.SCHEDULER_FINISHED) == 7  # a Triton counter never goes down
    assert metrics.value(contract.SCHEDULER_QUEUED, level="sync") == 1
