"""Tests of the image supervisor with real child processes (small Python programs standing in for
tritonserver and the gateway) and a real supervisor process receiving real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.supervisor import (
    ChildSpec,
    ModelPathMissing,
    RestartPolicy,
    Supervisor,
    SupervisorSettings,
    build_children,
    main,
    resolve_model_repository,
)
from whisper_build.serving.triton_model.settings import TritonSettings

# A child that appends "<name> started|term|exit" lines to a shared journal. On SIGTERM it waits
# `drain` seconds (in-flight work) before exiting 0; with `ignore_term` it never exits by itself;
# with `die_after` it exits with code 3 on its own.
CHILD = textwrap.dedent(
    """
    import signal, sys, time
    name, journal, drain, ignore_term, die_after = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1", float(sys.argv[5])
    def note(event):
        with open(journal, "a") as f:
            f.write(f"{name} {event}\\n")
    def on_term(signum, frame):
        note("term")
        if ignore_term:
            return
        time.sleep(drain)
        note("exit")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    note("started")
    deadline = time.monotonic() + die_after if die_after > 0 else None
    while deadline is None or time.monotonic() < deadline:
        time.sleep(0.05)
    note("died")
    sys.exit(3)
    """
)


def _child_argv(script: Path, name: str, journal: Path, drain=0.5, ignore_term=False, die_after=0.0) -> list[str]:
    return [
        sys.executable,
        str(script),
        name,
        str(journal),
        str(drain),
        "1" if ignore_term else "0",
        str(die_after),
    ]


def _start_supervisor(
    tmp_path: Path, triton_child: list[str], gateway_child: list[str], **extra_env: str
) -> subprocess.Popen[str]:
    """A real supervisor process whose 'tritonserver' and gateway are the stand-in children."""
    fake_triton = tmp_path / "fake_tritonserver"
    # The supervisor appends Triton flags; the wrapper drops them and runs the stand-in.
    fake_triton.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in triton_child) + "\n")
    fake_triton.chmod(0o755)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "WHISPER_SUPERVISOR_TRITONSERVER": str(fake_triton),
        "WHISPER_SUPERVISOR_GATEWAY_COMMAND": json.dumps(gateway_child),
        "WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S": "5",
        "WHISPER_SUPERVISOR_TRITON_STOP_TIMEOUT_S": "1",
        "WHISPER_TRITON_MODEL_REPOSITORY": str(tmp_path),
        "WHISPER_SUPERVISOR_TERMINATION_MESSAGE_PATH": str(tmp_path / "termination-log"),
        **extra_env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "whisper_build.serving.supervisor"], env=env, stderr=subprocess.PIPE, text=True
    )


def _wait_for(journal: Path, lines: set[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if journal.exists() and lines <= set(journal.read_text().splitlines()):
            return
        time.sleep(0.05)
    raise AssertionError(f"never saw {lines} in {journal.read_text() if journal.exists() else '<no journal>'}")


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return path


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, stderr


def test_sigterm_drains_the_gateway_before_stopping_triton(tmp_path, script):
    journal = tmp_path / "journal"
    supervisor = _start_supervisor(
        tmp_path, _child_argv(script, "triton", journal), _child_argv(script, "gateway", journal, drain=0.5)
    )
    _wait_for(journal, {"triton started", "gateway started"})
    # WHEN Kubernetes sends SIGTERM to the container's main process
    supervisor.send_signal(signal.SIGTERM)
    code, stderr = _finish(supervisor)
    # THEN the gateway finished draining before Triton was asked to stop, and the exit is clean
    events = [line for line in journal.read_text().splitlines() if not line.endswith("started")]
    assert events == ["gateway term", "gateway exit", "triton term", "triton exit"], stderr
    assert code == 0, stderr


def test_the_gateway_dying_stops_triton_and_fails_the_supervisor(tmp_path, script):
    journal = tmp_path / "journal"
    supervisor = _start_supervisor(
        tmp_path,
        _child_argv(script, "triton", journal),
        _child_argv(script, "gateway", journal, die_after=0.5),
    )
    code, stderr = _finish(supervisor)
    lines = journal.read_text().splitlines()
    assert "gateway died" in lines and "triton term" in lines and "triton exit" in lines
    assert code == 3, stderr  # the dead child's exit code
    assert "gateway exited unexpectedly with 3" in stderr


def test_tritonserver_exiting_is_restarted_with_exponential_back_off(tmp_path, script):
    # GIVEN a 'tritonserver' that dies 0.1 s after each start, and back-off 0.2 s doubling to 0.8 s
    journal = tmp_path / "journal"
    supervisor = _start_supervisor(
        tmp_path,
        _child_argv(script, "triton", journal, die_after=0.1),
        _child_argv(script, "gateway", journal),
        WHISPER_SUPERVISOR_RESTART_INITIAL_S="0.2",
        WHISPER_SUPERVISOR_RESTART_MAX_S="0.8",
    )
    _wait_for(journal, {"triton started", "gateway started"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and journal.read_text().count("triton started") < 5:
        time.sleep(0.05)
    # THEN the gateway kept running (no restart of the container) while Triton came back 4 times
    assert journal.read_text().count("triton started") >= 5
    assert journal.read_text().count("gateway started") == 1
    supervisor.send_signal(signal.SIGTERM)
    code, stderr = _finish(supervisor)
    assert code == 0, stderr
    # ... after delays doubling from 0.2 s and capped at 0.8 s, each exit one clear line
    delays = [
        float(d) for d in re.findall(r"tritonserver exited with code 3 after \d+ s; restart \d+ in ([\d.]+) s", stderr)
    ]
    assert delays[:4] == [0.2, 0.4, 0.8, 0.8], stderr
    # ... and the last one is the container's termination message
    assert (tmp_path / "termination-log").read_text().startswith("tritonserver exited with code 3")


def test_the_supervisor_touches_its_heartbeat_file(tmp_path, script):
    journal, heartbeat = tmp_path / "journal", tmp_path / "heartbeat"
    supervisor = _start_supervisor(
        tmp_path,
        _child_argv(script, "triton", journal),
        _child_argv(script, "gateway", journal),
        WHISPER_SUPERVISOR_HEARTBEAT_FILE=str(heartbeat),
    )
    try:
        _wait_for(journal, {"triton started", "gateway started"})
        first = _mtime_when_present(heartbeat)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and heartbeat.stat().st_mtime_ns == first:
            time.sleep(0.05)
        assert heartbeat.stat().st_mtime_ns > first  # touched again: the supervisor's loop is alive
    finally:
        supervisor.send_signal(signal.SIGTERM)
        _finish(supervisor)


def _mtime_when_present(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.stat().st_mtime_ns


def test_a_child_ignoring_sigterm_is_killed_and_the_exit_is_non_zero(tmp_path, script):
    journal = tmp_path / "journal"
    supervisor = _start_supervisor(
        tmp_path,
        _child_argv(script, "triton", journal, ignore_term=True),
        _child_argv(script, "gateway", journal),
    )
    _wait_for(journal, {"triton started", "gateway started"})
    supervisor.send_signal(signal.SIGTERM)
    code, stderr = _finish(supervisor)
    assert code == 1, stderr
    assert "tritonserver did not stop within 1 s; killing it" in stderr
    assert "triton exit" not in journal.read_text().splitlines()


# --- pure parts -----------------------------------------------------------------------------


def test_model_repository_precedence(tmp_path, monkeypatch):
    written = tmp_path / "model_repository_file"
    settings = SupervisorSettings(model_repository_file=written, rendered_repository_dir=tmp_path / "rendered")
    # 1. explicit setting wins
    assert resolve_model_repository(TritonSettings(model_repository=tmp_path / "x"), settings) == tmp_path / "x"
    # 2. the preflight's file
    written.write_text("/models/v3/model_repository\n")
    assert resolve_model_repository(TritonSettings(), settings) == Path("/models/v3/model_repository")
    # 3. empty file (ctranslate2 fallback): rendered from settings, with the model path the chart sets
    written.write_text("")
    model = tmp_path / "ctranslate2"
    rendered = resolve_model_repository(TritonSettings(engine={"model_path": str(model)}), settings)
    assert f'string_value: "{model}"' in (rendered / "whisper" / "config.pbtxt").read_text()
    # ... but never the engine's bundled tiny.en default: no model path is an error naming the variable
    with pytest.raises(ModelPathMissing, match="WHISPER_TRITON_ENGINE__MODEL_PATH is empty"):
        resolve_model_repository(TritonSettings(), settings)


def test_main_refuses_to_serve_without_a_model(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("WHISPER_MODEL_REPOSITORY_FILE", str(tmp_path / "absent"))
    monkeypatch.delenv("WHISPER_TRITON_MODEL_REPOSITORY", raising=False)
    monkeypatch.delenv("WHISPER_TRITON_ENGINE__MODEL_PATH", raising=False)
    assert main() == 2
    assert "does not fall back to the bundled tiny.en" in caplog.text


def test_chart_variable_names_are_read(monkeypatch, tmp_path):
    monkeypatch.setenv("WHISPER_MODEL_REPOSITORY_FILE", str(tmp_path / "f"))
    monkeypatch.setenv("WHISPER_SUPERVISOR_GATEWAY_COMMAND", '["uvicorn", "x:app"]')
    settings = SupervisorSettings()
    assert settings.model_repository_file == tmp_path / "f"
    assert settings.gateway_command == ["uvicorn", "x:app"]


def test_children_are_triton_then_gateway():
    triton = TritonSettings(grpc_port=9001)
    children = build_children(triton, SupervisorSettings(), Path("/repo"))
    assert [c.name for c in children] == ["tritonserver", "gateway"]
    assert children[0].command[0] == "/opt/tritonserver/bin/tritonserver"
    assert "--model-repository=/repo" in children[0].command and "--grpc-port=9001" in children[0].command
    assert children[1].command == ["python3", "-m", "whisper_build.serving.gateway"]
    # every tritonserver run puts its shared memory under this supervisor's prefix, cleaned after each exit
    prefix = next(a for a in children[0].command if a.startswith("--backend-config=python,shm-region-prefix-name="))
    assert prefix.rsplit("=", 1)[1].startswith("whisper_") and children[0].after_exit is not None


def test_after_exit_runs_on_each_exit_before_the_restart_and_at_shutdown(tmp_path):
    # GIVEN a child that exits at once, restarted after 0.05 s, whose exits are recorded
    exits: list[int] = []
    spec = ChildSpec(
        "tritonserver", [sys.executable, "-c", "pass"], 1.0,
        restart=RestartPolicy(initial_s=0.05, max_s=0.05), after_exit=lambda process: exits.append(process.pid),
    )  # fmt: skip
    supervisor = Supervisor([spec], poll_interval_s=0.02)
    stopper = threading.Timer(1.5, supervisor.request_stop)
    stopper.start()
    # WHEN it runs for a while
    assert supervisor.run() == 0
    # THEN each exited process was handed to after_exit once (the restarts used new processes)
    assert len(exits) >= 3 and len(set(exits)) == len(exits)


def test_dockerfile_pins_a_triton_trtllm_base_and_runs_the_supervisor():
    import re

    dockerfile = (REPO_ROOT / "whisper_build" / "image" / "Dockerfile").read_text()
    [base] = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert re.fullmatch(r"nvcr\.io/nvidia/tritonserver:\d{2}\.\d{2}-trtllm-python-py3", base), base
    assert 'ENTRYPOINT ["python3", "-m", "whisper_build.serving.supervisor"]' in dockerfile


def test_benchmark_random_weight_mode_is_refused(tmp_path, monkeypatch, caplog):
    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.supervisor import BenchmarkModeRefused, refuse_benchmark_mode
    from whisper_build.serving.triton_model.repository import render_model_repository

    benchmark = EngineParams(engine="torch", model_path="/models/hf", beam_size=1, random_weights_fixed_tokens=100)
    real = EngineParams(engine="torch", model_path="/models/hf", beam_size=1)
    # from the environment: refused, naming the variable
    with pytest.raises(BenchmarkModeRefused, match="WHISPER_TRITON_ENGINE__RANDOM_WEIGHTS_FIXED_TOKENS"):
        refuse_benchmark_mode(TritonSettings(engine=benchmark), tmp_path)
    # from a mounted repository's config.pbtxt: refused, naming the file
    render_model_repository(tmp_path / "bench", benchmark)
    with pytest.raises(BenchmarkModeRefused, match="random_weights_fixed_tokens=100"):
        refuse_benchmark_mode(TritonSettings(), tmp_path / "bench")
    refuse_benchmark_mode(TritonSettings(engine=real), render_model_repository(tmp_path / "real", real))
    # the entrypoint exits 2 before starting anything
    monkeypatch.setenv("WHISPER_TRITON_MODEL_REPOSITORY", str(tmp_path / "bench"))
    assert main() == 2
    assert "benchmarks only" in caplog.text
