"""The Makefile's workstation targets, run through ``make`` itself (``-o install-…``: the install sets are there).

``make transcribe`` with a space in FILE, ``make serve`` refusing a busy gateway port before Triton
starts, ``make bench`` against a closed port failing, and the CLIs naming their modules in ``--help``.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import speech_samples as samples
from bench_fakes import closed_port
from fake_backend import FakeBackend
from gateway_server import running_gateway

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.local_triton import free_ports

INSTALLED = ("-o", "install-serving", "-o", "install-speakers", "-o", "install-development")
"""The install-set targets the workstation targets depend on, treated as done: installing is not tested here."""


def _make(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", *INSTALLED, *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture()
def listening_socket() -> Iterator[int]:
    """A port some other program is listening on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield other.getsockname()[1]


@pytest.mark.integration
def test_make_transcribe_takes_a_path_with_a_space(tmp_path: Path) -> None:
    wav = tmp_path / "my recording.wav"
    wav.write_bytes(samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16"))
    with running_gateway(GatewaySettings(), lambda _: FakeBackend()) as url:
        port = url.rsplit(":", 1)[1]
        completed = _make("transcribe", f"FILE={wav}", env={"WHISPER_GATEWAY_PORT": port})
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip().splitlines()[-1] == "w0:2.0"


@pytest.mark.integration
def test_make_serve_refuses_a_busy_gateway_port_before_starting_triton(listening_socket: int) -> None:
    http, grpc, metrics, gateway_metrics = free_ports(4)
    env = {
        "WHISPER_GATEWAY_PORT": str(listening_socket),
        "WHISPER_GATEWAY_METRICS_PORT": str(gateway_metrics),
        "WHISPER_TRITON_HTTP_PORT": str(http),
        "WHISPER_TRITON_GRPC_PORT": str(grpc),
        "WHISPER_TRITON_METRICS_PORT": str(metrics),
    }
    completed = _make("serve", env=env, timeout=60)
    assert completed.returncode != 0
    assert f"WHISPER_GATEWAY_PORT={listening_socket}" in completed.stderr
    assert "set that variable to a free port, e.g. WHISPER_GATEWAY_PORT=9080 make serve" in completed.stderr
    assert "whisper on Triton is ready" not in completed.stdout  # Triton was never started


def test_serve_checks_the_gateway_port_before_triton_starts(
    listening_socket: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from whisper_build.workstation import local_triton

    def must_not_start(self: object, timeout_s: float = 0) -> None:
        raise AssertionError("Triton was started although the gateway port is busy")

    monkeypatch.setattr(local_triton.LocalTriton, "start", must_not_start)
    monkeypatch.setenv("WHISPER_GATEWAY_PORT", str(listening_socket))
    assert local_triton.main(["--gateway"]) == 1
    assert f"WHISPER_GATEWAY_PORT={listening_socket}" in capsys.readouterr().err


@pytest.mark.integration
def test_make_bench_against_a_closed_port_exits_non_zero(tmp_path: Path) -> None:
    wav = tmp_path / "tone.wav"
    wav.write_bytes(samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16"))
    port = closed_port()
    completed = _make(
        "bench", f"AUDIO={wav}", f"TARGETS=--target gw=http://127.0.0.1:{port}", "CONCURRENCY=1", "DURATION=1"
    )
    assert completed.returncode != 0
    assert f"target gw: cannot connect to 127.0.0.1:{port}" in completed.stderr


@pytest.mark.parametrize(
    "module", ["whisper_build.workstation.cli", "whisper_build.workstation.local_triton", "benchmarks.bench",
               "benchmarks.speech"],
)  # fmt: skip
def test_cli_help_names_the_module(module: str) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert completed.stdout.startswith(f"usage: python -m {module}")


def test_make_help_lists_every_target_the_readme_and_deploy_docs_name() -> None:
    named = set()
    for doc in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "deploy.md"):
        text = doc.read_text(encoding="utf-8")
        # `make x` in inline code, a code line starting with make, or $(make -s x …)
        named |= set(re.findall(r"(?:`|^\s*|\$\()make (?:-s )?([a-z][a-z0-9-]*)", text, flags=re.MULTILINE))
    assert {"deploy", "destroy", "capacity", "publish-ctranslate2"} <= named
    completed = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=60, check=True)  # fmt: skip
    listed = {line.split()[0] for line in completed.stdout.splitlines() if line.strip()}
    assert named - listed == set()


def test_make_help_prints_commands_as_a_shell_takes_them() -> None:
    # `$$` is make's escape for `$` in a recipe; pasted into a shell it would be the shell's PID
    completed = subprocess.run(["make", "--no-print-directory", "help"], cwd=REPO_ROOT, capture_output=True,
                               text=True, timeout=60, check=True)  # fmt: skip
    assert "$$" not in completed.stdout
    assert 'eval "$(make -s env CONFIG=config/my.yaml)"' in completed.stdout


def test_every_config_header_names_make_synth_with_its_own_path() -> None:
    """The configs' headers send a reader to the gated ``make synth CONFIG=…``, never bare ``cdk synth``."""
    configs = sorted(path.relative_to(REPO_ROOT) for path in (REPO_ROOT / "config").rglob("*.yaml"))
    assert len(configs) >= 7
    for path in configs:
        header = "".join(
            line
            for line in (REPO_ROOT / path).read_text(encoding="utf-8").splitlines(keepends=True)[:6]
            if line.startswith("#")
        )
        assert "cdk synth -c" not in header.replace("bare cdk synth skips", ""), path
        own = "config/my.yaml" if path.name == "default.yaml" else str(path)
        assert f"make synth CONFIG={own}" in header, path


@pytest.mark.integration
def test_make_transcribe_streams_and_translates(tmp_path: Path) -> None:
    """STREAM=1 sends stream=true and prints the deltas; TRANSLATE=1 asks for a translation (multilingual model)."""
    from whisper_build.serving.transcription.backend import ServedModel

    wav = tmp_path / "long.wav"
    wav.write_bytes(samples.encode(samples.tone(65.0, 16000), 16000, "wav_s16"))
    backend = FakeBackend()
    backend.served = ServedModel("whisper", 16, multilingual=True, engine="fake")
    with running_gateway(GatewaySettings(), lambda _: backend) as url:
        env = {"WHISPER_GATEWAY_PORT": url.rsplit(":", 1)[1]}
        streamed = _make("transcribe", f"FILE={wav}", "STREAM=1", env=env)
        assert streamed.returncode == 0, streamed.stderr
        translated = _make("transcribe", f"FILE={wav}", "TRANSLATE=1", env=env)
        assert translated.returncode == 0, translated.stderr
        assert "Warning" not in translated.stderr, translated.stderr  # the text, and nothing after it
    text = streamed.stdout.strip().splitlines()[-1]
    assert text.startswith("w0:") and text.count("w0:") == 3  # three windows, each its own delta
    assert "<|translate|>" in backend.calls[-1][2] and translated.stdout.strip().splitlines()[-1].startswith("w0:")


@pytest.mark.integration
def test_a_file_too_long_to_answer_in_time_is_told_to_use_stream(tmp_path: Path, capsys) -> None:
    from whisper_build.workstation import cli

    wav = tmp_path / "long.wav"
    wav.write_bytes(samples.encode(samples.tone(65.0, 16000), 16000, "wav_s16"))
    settings = GatewaySettings(predicted_rtf=10.0, request_timeout_seconds=60)
    with running_gateway(settings, lambda _: FakeBackend()) as url:
        assert cli.main([str(wav), "--url", url]) == 1
    err = capsys.readouterr().err
    assert "gateway error 413" in err and 'make transcribe FILE="…" STREAM=1' in err
