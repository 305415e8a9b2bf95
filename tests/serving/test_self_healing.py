"""Fault injection against real servers: the model dies, the gateway notices, the system heals.

* ``make serve`` (``python -m whisper_build.workstation.local_triton --gateway``) with real
  tritonserver (CPU tiny.en): ``kill -9`` of the python backend stub, then of tritonserver itself.
  Each time ``/ping`` must turn 503 (within 30 s: 10 s promised, slack for a busy box) with no
  client traffic (only ``/ping``, which does
  not touch Triton, is polled), and transcriptions must succeed again within 120 s with no manual
  step (the gateway reloads the model; the launcher restarts tritonserver with back-off).
* Faults clean up: after ``kill -9`` of tritonserver no python stub of it is left running and its
  ``/dev/shm`` regions are gone; once ``make serve`` stops, none of its processes or regions remain.
* The serving image's supervisor with a real tritonserver whose model cannot load: restarts back
  off 1 s, 2 s, 4 s … (no tight loop), the supervisor and the gateway keep running (``/live`` 200,
  ``/ping`` 503 = running but unready), one line per exit, also the termination message.

Every server listens on 127.0.0.1 free ports; every wait is bounded.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import httpx
import psutil
import pytest
import speech_samples as samples
from fixtures_triton import make_serve_command

from whisper_build.serving.triton_model.repository import render_model_repository
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import (
    TritonWheel,
    assemble_backends,
    free_ports,
    server_environment,
)

pytestmark = pytest.mark.integration

UNREADY_WITHIN_S = 30.0
"""The gateway turns ``/ping`` 503 within ~6 s of a dead stub (health.py, 2 s canary interval, 2 failures);
3× the 10 s promise as slack for a loaded 2-core box, where canaries queue behind other tests' work. A
broken detection never turns 503, so it still fails; the measured times are printed."""
HEALED_WITHIN_S = 120.0
TEXT = "Please remember to turn off the lights when you leave the office tonight."


def _ping(client: httpx.Client) -> int:
    try:
        return client.get("/ping", timeout=2).status_code
    except httpx.TransportError:
        return 0


def _seconds_until(client: httpx.Client, wanted: int, timeout: float) -> float:
    """Seconds until ``/ping`` answers ``wanted`` (polled every 0.2 s); fails after ``timeout``."""
    start = time.monotonic()
    while (status := _ping(client)) != wanted:
        elapsed = time.monotonic() - start
        assert elapsed < timeout, f"/ping still {status} after {elapsed:.0f} s (wanted {wanted})"
        time.sleep(0.2)
    return time.monotonic() - start


def _transcribe(client: httpx.Client, audio: bytes) -> str:
    r = client.post("/invocations", json={"audio_data": base64.b64encode(audio).decode()}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["transcribe_text"]


def _regions(launcher: subprocess.Popen[bytes]) -> set[str]:
    """The launcher's python-backend shared-memory regions (prefix ``whisper_<launcher pid>_``)."""
    return {p.name for p in Path("/dev/shm").glob(f"whisper_{launcher.pid}_*")}


def _alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _descendants(process: psutil.Process, name_start: str) -> list[psutil.Process]:
    found = [p for p in process.children(recursive=True) if p.name().startswith(name_start)]
    assert found, [p.name() for p in process.children(recursive=True)]
    return found


@pytest.fixture
def serve(tmp_path: Path):
    """``make serve`` on free ports; yields (launcher process, gateway client)."""
    command, env, gateway_port = make_serve_command(tmp_path, cpu_threads=2)
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}") as client:
            _seconds_until(client, 200, 240)
            yield process, client
        children = psutil.Process(process.pid).children(recursive=True)
        assert _regions(process)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
        # nothing left behind: no process of the launcher's, no shared-memory region
        assert not _alive(children), _alive(children)
        assert not _regions(process)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
def test_make_serve_heals_a_killed_stub_and_a_killed_tritonserver(serve, tmp_path) -> None:
    launcher, client = serve
    audio = samples.speak(TEXT, tmp_path / "speech.wav").read_bytes()
    assert samples.wer(TEXT, _transcribe(client, audio)) < 0.3
    launcher_process = psutil.Process(launcher.pid)
    report = {}
    for victim in ("triton_python_backend_stub", "tritonserver"):
        stubs = _descendants(launcher_process, "triton_python_b")
        regions = _regions(launcher)
        # WHEN the process is SIGKILLed (no client traffic from here on: /ping does not touch Triton)
        for target in _descendants(launcher_process, victim[:15]):  # /proc comm is 15 characters
            target.send_signal(signal.SIGKILL)
        # THEN the gateway's canary notices: /ping 503 (~6 s; UNREADY_WITHIN_S of slack)
        unready = _seconds_until(client, 503, UNREADY_WITHIN_S)
        # ... and the system heals itself: /ping 200 and transcriptions succeed within 120 s
        healed = _seconds_until(client, 200, HEALED_WITHIN_S)
        assert samples.wer(TEXT, _transcribe(client, audio)) < 0.3
        report[victim] = (round(unready, 1), round(healed, 1))
        if victim == "tritonserver":
            # ... and the dead server's stub and shared memory are gone, the new server has its own
            assert not _alive(stubs), _alive(stubs)
            assert regions and not regions & _regions(launcher), (regions, _regions(launcher))
    print(f"\nkill -9 → /ping 503 after, then 200 after (s): {report}")
    log = (tmp_path / "serve.log").read_text(errors="replace")
    assert "reloading it" in log  # the stub: the gateway reloaded the model
    assert re.search(r"tritonserver exited with code -9 after \d+ s; restart 1 in 1 s", log), log[-3000:]


def _supervisor_log_times(stderr: str, pattern: str) -> list[datetime]:
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(rf"^(\S+ \S+) supervisor \w+ {pattern}", stderr, flags=re.MULTILINE)
    ]


def test_a_model_that_cannot_load_backs_off_while_the_pod_stays_running_but_unready(tmp_path) -> None:
    # GIVEN the serving image's supervisor, a real tritonserver and gateway, and a model repository
    # whose model cannot load (the CTranslate2 folder is empty), written by the "preflight"
    wheel = TritonWheel.find()
    backends = assemble_backends(wheel, tmp_path / "backends")
    wrapper = tmp_path / "tritonserver"
    wrapper.write_text(f'#!/bin/sh\nexec "{wheel.binary}" "$@" --backend-directory={backends}\n')
    wrapper.chmod(0o755)
    (tmp_path / "empty-model").mkdir()
    http, grpc, metrics, gateway_port = free_ports(4)
    triton = TritonSettings(engine={"model_path": str(tmp_path / "empty-model")})
    repository = render_model_repository(tmp_path / "repository", triton.engine, triton.batching)
    (tmp_path / "model_repository_file").write_text(str(repository))
    env = {
        **server_environment(wheel),
        "WHISPER_SUPERVISOR_TRITONSERVER": str(wrapper),
        "WHISPER_SUPERVISOR_GATEWAY_COMMAND": json.dumps([sys.executable, "-m", "whisper_build.serving.gateway"]),
        "WHISPER_SUPERVISOR_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        "WHISPER_SUPERVISOR_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
        "WHISPER_MODEL_REPOSITORY_FILE": str(tmp_path / "model_repository_file"),
        "WHISPER_TRITON_SPEAKER__ENABLED": "false",
        "WHISPER_TRITON_HTTP_PORT": str(http),
        "WHISPER_TRITON_GRPC_PORT": str(grpc),
        "WHISPER_TRITON_METRICS_PORT": str(metrics),
        "WHISPER_TRITON_EXIT_TIMEOUT_S": "5",
        "WHISPER_GATEWAY_PORT": str(gateway_port),
        "WHISPER_GATEWAY_TRITON_URL": f"127.0.0.1:{grpc}",
        "WHISPER_GATEWAY_SUPERVISOR_HEARTBEAT_FILE": str(tmp_path / "heartbeat"),
    }
    env.pop("WHISPER_TRITON_MODEL_REPOSITORY", None)
    stderr_path = tmp_path / "supervisor.log"
    with open(stderr_path, "wb") as stderr:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "whisper_build.serving.supervisor"], env=env, stdout=stderr, stderr=stderr
        )
    try:
        # WHEN it has run long enough for three restarts (bounded: 150 s)
        deadline = time.monotonic() + 150
        while len(re.findall("tritonserver exited", stderr_path.read_text(errors="replace"))) < 3:
            assert supervisor.poll() is None, stderr_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, stderr_path.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        # THEN the pod is running but unready: the gateway is alive, /ping says why it cannot serve
        with httpx.Client(base_url=f"http://127.0.0.1:{gateway_port}", timeout=5) as client:
            assert client.get("/live").status_code == 200
            assert client.get("/ping").status_code == 503
        assert supervisor.poll() is None  # no crash loop: the container would keep running
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(timeout=60)
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
                supervisor.wait()
    log = stderr_path.read_text(errors="replace")
    # ... each exit is one clear line with growing delays — back-off, not a tight loop
    delays = [
        float(d) for d in re.findall(r"tritonserver exited with code \d+ after \d+ s; restart \d+ in ([\d.]+) s", log)
    ]
    assert delays[:3] == [1.0, 2.0, 4.0], log[-3000:]
    exits = _supervisor_log_times(log, "tritonserver exited")
    starts = _supervisor_log_times(log, "starting tritonserver")
    for exited, delay, started in zip(exits, delays, starts[1:], strict=False):
        assert (started - exited).total_seconds() >= delay - 0.05
    # ... the repository is resolved once (the preflight's result is reused, nothing fetched again)
    assert log.count("serving model repository") == 1 and len(starts) >= 3
    # ... Triton's own log says why, and the last exit is the termination message
    assert "model.bin" in log or "whisper" in log
    assert (tmp_path / "termination-log").read_text().startswith("tritonserver exited with code")
