"""Tests of the local Triton launcher: wheel layout, environment, flags, settings, CLI, failures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import sysconfig
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fixtures_triton import make_serve_command

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args
from whisper_build.workstation.local_gateway import refuse_busy_gateway_port
from whisper_build.workstation.local_triton import (
    LocalTriton,
    TritonStartError,
    TritonWheel,
    _parse_args,
    assemble_backends,
    free_ports,
    ports_in_use,
    server_environment,
    settings_from_args,
)


def test_assemble_backends_copies_the_python_backend_and_the_stub_for_this_python(tmp_path):
    wheel = TritonWheel.find()
    backends = assemble_backends(wheel, tmp_path / "backends")
    names = sorted(p.name for p in (backends / "python").iterdir())
    assert "libtriton_python.so" in names and "triton_python_backend_stub" in names
    assert os.access(backends / "python" / "triton_python_backend_stub", os.X_OK)
    with pytest.raises(TritonStartError, match="no python backend stub for Python 2.7"):
        wheel.stub((2, 7))


def test_server_environment_puts_libs_venv_and_repo_first():
    wheel = TritonWheel.find()
    env = server_environment(wheel, {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/opt/lib"})
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(wheel.libs_dir), sysconfig.get_config_var("LIBDIR"), "/opt/lib",
    ]  # fmt: skip
    assert env["PATH"].split(os.pathsep) == [str(Path(sys.executable).parent), "/usr/bin"]
    assert env["PYTHONPATH"] == str(REPO_ROOT)


def test_tritonserver_args_bind_the_configured_address_and_ports(tmp_path):
    settings = TritonSettings(host="127.0.0.1", http_port=18000, grpc_port=18001, metrics_port=18002)
    args = tritonserver_args(settings, tmp_path)
    for flag in [
        f"--model-repository={tmp_path}", "--http-address=127.0.0.1", "--http-port=18000",
        "--grpc-address=127.0.0.1", "--grpc-port=18001", "--metrics-address=127.0.0.1",
        "--metrics-port=18002", "--metrics-config=summary_latencies=true",
    ]:  # fmt: skip
        assert flag in args


def test_settings_come_from_prefixed_environment_variables(monkeypatch):
    # GIVEN WHISPER_TRITON_* variables, nested with "__"
    monkeypatch.setenv("WHISPER_TRITON_GRPC_PORT", "9101")
    monkeypatch.setenv("WHISPER_TRITON_ENGINE__DEVICE", "cuda")
    monkeypatch.setenv("WHISPER_TRITON_BATCHING__MAX_BATCH_SIZE", "32")
    settings = TritonSettings()
    # THEN they override the defaults (docs/contracts.md §6 ports otherwise)
    assert (settings.grpc_port, settings.http_port, settings.metrics_port) == (9101, 8000, 8002)
    assert settings.engine.device == "cuda" and settings.engine.beam_size == 5
    assert settings.batching.max_batch_size == 32
    assert settings.grpc_url == "127.0.0.1:9101"


def test_cli_flags_override_settings():
    args = _parse_args(["--grpc-port", "9201", "--model-path", "/m", "--device", "auto"])
    settings = settings_from_args(args, TritonSettings(http_port=9200))
    assert (settings.http_port, settings.grpc_port) == (9200, 9201)
    assert (settings.engine.model_path, settings.engine.device) == ("/m", "auto")


def test_free_ports_are_distinct():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(1024 < p < 65536 for p in ports)


@pytest.mark.integration
def test_a_model_that_cannot_load_fails_start_with_the_log(tmp_path):
    http, grpc, metrics = free_ports(3)
    settings = TritonSettings(
        http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=5,
        engine={"model_path": str(tmp_path)},  # a directory without a model
        speaker={"enabled": False},
    )  # fmt: skip
    server = LocalTriton(settings, workdir=tmp_path / "work")
    with pytest.raises(TritonStartError) as raised:
        server.start(timeout_s=120)
    assert "whisper" in str(raised.value) and "model.bin" in str(raised.value)
    assert server._process is None  # stopped


@pytest.mark.integration
def test_cli_serves_triton_and_the_gateway_until_sigterm(tmp_path):
    # GIVEN the CLI with --gateway on free ports
    command, env, gateway_port = make_serve_command(tmp_path)
    grpc = int(command[command.index("--grpc-port") + 1])
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        ready_line = process.stdout.readline()  # printed once the model is ready
        assert f"gRPC 127.0.0.1:{grpc}" in ready_line, ready_line
        # THEN the gateway answers /ping 200 (Triton and the model ready) within a bounded wait
        assert _ping_ok(f"http://127.0.0.1:{gateway_port}/ping", attempts=120), "gateway /ping never 200"
        # WHEN SIGTERM arrives THEN both stop and the exit code is 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    for port in (grpc, gateway_port):  # nothing listens any more (SO_REUSEADDR: TIME_WAIT is fine)
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", port))


def _ping_ok(url: str, attempts: int) -> bool:
    for _ in range(attempts):
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - local URL
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.5)
    return False


@pytest.mark.integration
def test_tritonserver_exits_when_its_launcher_is_killed(tmp_path):
    # GIVEN a launcher process that started tritonserver and then is SIGKILLed (no cleanup runs)
    http, grpc, metrics = free_ports(3)
    launcher = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from whisper_build.workstation.local_triton import LocalTriton
        from whisper_build.serving.triton_model.settings import TritonSettings
        server = LocalTriton(TritonSettings(http_port={http}, grpc_port={grpc}, metrics_port={metrics}),
                             workdir=Path({str(tmp_path)!r}))
        server.start()
        print(server._process.pid, flush=True)
        time.sleep(600)
        """
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "WHISPER_TRITON_ENGINE__CPU_THREADS": "1",
        "WHISPER_TRITON_SPEAKER__ENABLED": "false",
    }
    process = subprocess.Popen([sys.executable, "-c", launcher], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        triton_pid = int(process.stdout.readline())
    finally:
        process.kill()
        process.wait()
    # THEN the kernel's parent-death signal stops tritonserver too
    for _ in range(120):
        if not _running(triton_pid):
            return
        time.sleep(0.5)
    os.kill(triton_pid, signal.SIGKILL)
    pytest.fail("tritonserver kept running after its launcher died")


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited child nobody reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_busy_port_fails_start_before_anything_runs(tmp_path):
    # GIVEN another server already listening on the configured gRPC port
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        busy = other.getsockname()[1]
        http, metrics = free_ports(2)
        settings = TritonSettings(http_port=http, grpc_port=busy, metrics_port=metrics)
        server = LocalTriton(settings, workdir=tmp_path / "work")
        # THEN start refuses with the setting to change, instead of trusting the other server
        with pytest.raises(TritonStartError, match=rf"WHISPER_TRITON_GRPC_PORT={busy}"):
            server.start(timeout_s=5)
    assert not (tmp_path / "work" / "backends").exists()  # nothing was assembled or started


def test_a_busy_gateway_metrics_port_is_refused_with_that_variable_to_change(monkeypatch):
    # GIVEN a free traffic port and another server on the gateway's metrics port
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        busy = other.getsockname()[1]
        (traffic,) = free_ports(1)
        monkeypatch.setenv("WHISPER_GATEWAY_PORT", str(traffic))
        monkeypatch.setenv("WHISPER_GATEWAY_METRICS_PORT", str(busy))
        # THEN the refusal names the metrics variable, and its example changes that one only
        with pytest.raises(TritonStartError) as refused:
            refuse_busy_gateway_port()
    message = str(refused.value)
    assert f"WHISPER_GATEWAY_METRICS_PORT={busy}" in message
    assert "e.g. WHISPER_GATEWAY_METRICS_PORT=9081 make serve" in message
    assert "WHISPER_GATEWAY_PORT=" not in message


def test_a_port_whose_last_connection_lingers_in_time_wait_is_not_busy():
    # GIVEN a server port whose last connection was closed by the server side (TIME_WAIT on it);
    # the server set SO_REUSEADDR, as tritonserver and uvicorn do
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        accepted.close()  # the active closer keeps 127.0.0.1:port in TIME_WAIT
        client.close()
    # (a plain bind, as the launcher's check did before, is refused)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))
    # THEN the launcher's check binds like the servers do (SO_REUSEADDR) and finds it free
    assert ports_in_use("127.0.0.1", {"WHISPER_TRITON_GRPC_PORT": port}) == []
