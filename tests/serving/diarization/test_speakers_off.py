"""A server without the speaker model (the speakers install set not installed): speakers answer 400 with how
to turn them on, never 500, and ``make serve`` starts Triton without the speaker model.

The gateway learns it from Triton's repository index (``TritonBackend.speakers_served``); the
integration test asks a real tritonserver whose repository has no ``speaker`` model.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient
from gateway_server import running_gateway

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.routes.speaker_fields import SPEAKERS_OFF
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.triton_model.repository import SpeakerConfig
from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args
from whisper_build.workstation import local_triton

WAV = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")
TRANSCRIPTIONS = "/v1/audio/transcriptions"


def _post(client: TestClient | httpx.Client, **fields: str) -> httpx.Response:
    return client.post(TRANSCRIPTIONS, files={"file": ("a.wav", WAV, "audio/wav")}, data=fields)


@pytest.fixture(scope="module")
def client_and_backend():
    backend = FakeBackend()
    backend.speakers = False
    with TestClient(create_app(GatewaySettings(), lambda _: backend)) as client:
        yield client, backend


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"response_format": "diarized_json"}, "response_format"),
        ({"response_format": "rttm"}, "response_format"),
        ({"response_format": "diarized_json", "min_speakers": "2", "max_speakers": "3"}, "response_format"),
        ({"response_format": "verbose_json", "model": "whisper-diarize"}, "model"),
    ],
)
def test_speakers_on_a_server_without_them_are_400_saying_how_to_turn_them_on(client_and_backend, fields, param):
    client, backend = client_and_backend
    calls = len(backend.calls)
    response = _post(client, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["message"] == SPEAKERS_OFF and error["param"] == param
    assert error["code"] == ErrorCode.INVALID_FIELD.name.lower()
    assert "make serve SPEAKERS=1" in SPEAKERS_OFF
    assert len(backend.calls) == calls  # refused before any window reached the model


def test_requests_without_speakers_are_served_as_before(client_and_backend):
    client, _ = client_and_backend
    for fields in ({}, {"response_format": "verbose_json"}, {"response_format": "srt", "model": "whisper"}):
        response = _post(client, **fields)
        assert response.status_code == 200, (fields, response.text)


@pytest.mark.integration
def test_a_real_triton_without_the_speaker_model_makes_diarized_json_a_400(triton_server):
    # the session's CPU Triton renders its repository without the speaker model (tests/support/fixtures_triton.py)
    assert not triton_server.settings.speaker.enabled
    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url)
    with running_gateway(settings) as url, httpx.Client(base_url=url, timeout=120) as client:
        refused = _post(client, response_format="diarized_json")
        ready = client.get("/ping")
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"] == SPEAKERS_OFF
    assert ready.status_code == 200, ready.text  # the server itself is up: only speakers are off


def test_make_serve_starts_without_the_speaker_model_when_the_speakers_set_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(local_triton, "speakers_installed", lambda: False)
    default = TritonSettings()  # what make serve reads: speaker.enabled not set
    settings = local_triton.speakers_if_installed(default)
    assert default.speaker.enabled and not settings.speaker.enabled
    assert "--load-model=speaker" in tritonserver_args(default, Path("repository"))
    assert "--load-model=speaker" not in tritonserver_args(settings, Path("repository"))
    assert "make serve SPEAKERS=1" in capsys.readouterr().err
    # asked for explicitly (WHISPER_TRITON_SPEAKER__ENABLED=true): refused in one line, with the way to install it
    monkeypatch.setenv("WHISPER_TRITON_SPEAKER__ENABLED", "true")
    with pytest.raises(local_triton.TritonStartError) as refused:
        local_triton.speakers_if_installed(TritonSettings())
    assert "\n" not in str(refused.value) and "make serve SPEAKERS=1" in str(refused.value)
    # with the set installed nothing changes
    monkeypatch.setattr(local_triton, "speakers_installed", lambda: True)
    assert local_triton.speakers_if_installed(default) is default
    assert not local_triton.speakers_if_installed(TritonSettings(speaker=SpeakerConfig(enabled=False))).speaker.enabled


def test_cli_flags_keep_the_speaker_default_unset(monkeypatch):
    # make serve MODEL=base passes a flag: the settings are rebuilt, and speaker.enabled must stay "not set"
    monkeypatch.delenv("WHISPER_TRITON_SPEAKER__ENABLED", raising=False)
    monkeypatch.setenv("WHISPER_TRITON_SPEAKER__WARMUP", "false")
    args = local_triton._parse_args(["--engine", "ctranslate2"])
    settings = local_triton.settings_from_args(args)
    assert "enabled" not in settings.speaker.model_fields_set and settings.speaker.warmup is False
