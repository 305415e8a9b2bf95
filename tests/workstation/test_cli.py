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


def _stubbed_runtime():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client(
        "sagemaker-runtime", region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )
    return client, Stubber(client)


def test_sagemaker_endpoint_mode_sends_the_invocations_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import base64
    import io
    import json

    from botocore.response import StreamingBody

    wav = tmp_path / "x.wav"
    wav.write_bytes(samples.encode(samples.tone(1.0, 16000), 16000, "wav_s16"))
    answer = json.dumps({"code": 0, "message": "Success", "transcribe_text": "hello there"}).encode()
    client, stubber = _stubbed_runtime()
    expected_body = json.dumps(
        {"audio_data": base64.b64encode(wav.read_bytes()).decode(), "whisper_prompt": "", "language": "en"}
    ).encode()
    stubber.add_response(
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(answer), len(answer)), "ContentType": "application/json"},
        {
            "EndpointName": "whisper-hyperpod",
            "ContentType": "application/json",
            "Accept": "application/json",
            "Body": expected_body,
        },
    )
    with stubber:
        assert main([str(wav), "--sagemaker-endpoint", "whisper-hyperpod", "--language", "en"], client) == 0
    stubber.assert_no_pending_responses()
    assert capsys.readouterr().out.strip() == "hello there"


def test_sagemaker_model_error_and_unreachable_have_their_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from botocore.exceptions import EndpointConnectionError

    wav = tmp_path / "x.wav"
    wav.write_bytes(samples.encode(samples.tone(1.0, 16000), 16000, "wav_s16"))
    client, stubber = _stubbed_runtime()
    stubber.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message='Received client error (413) from primary: {"code": 413, "message": "audio too long"}',
        http_status_code=424,
        response_meta={},
    )
    with stubber:
        assert main([str(wav), "--sagemaker-endpoint", "whisper-hyperpod"], client) == 1
    err = capsys.readouterr().err
    assert "SageMaker endpoint whisper-hyperpod error ModelError" in err and "audio too long" in err

    class Unreachable:
        def invoke_endpoint(self, **_: object) -> None:
            raise EndpointConnectionError(endpoint_url="https://runtime.sagemaker.us-east-1.amazonaws.com")

    assert main([str(wav), "--sagemaker-endpoint", "whisper-hyperpod"], Unreachable()) == 3
    assert "cannot call SageMaker endpoint whisper-hyperpod: Could not connect" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.wav"), "--sagemaker-endpoint", "whisper-hyperpod"], client) == 2
