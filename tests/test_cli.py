"""whisper_build.workstation.cli against a real gateway socket (fake model backend)."""

from __future__ import annotations

from pathlib import Path

import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from gateway_server import running_gateway

from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.cli import main
from whisper_build.workstation.local_triton import free_ports


@pytest.fixture(scope="module")
def gateway() -> str:
    with running_gateway(GatewaySettings(), lambda _: FakeBackend()) as url:
        yield url


def test_prints_transcript(gateway: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wav = tmp_path / "x.wav"
    wav.write_bytes(samples.encode(samples.tone(3.0, 16000), 16000, "wav_s16"))
    assert main([str(wav), "--url", gateway]) == 0
    assert capsys.readouterr().out.strip() == "w0:3.0"


def test_errors_have_distinct_exit_codes(gateway: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_audio = tmp_path / "notes.txt"
    not_audio.write_text("not audio at all " * 20)
    assert main([str(not_audio), "--url", gateway]) == 1
    assert "gateway error 400" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.wav"), "--url", gateway]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([str(not_audio), "--url", f"http://127.0.0.1:{free_ports(1)[0]}"]) == 3
    assert "cannot reach the gateway" in capsys.readouterr().err
