"""Up-front 413 audio_too_long from the throughput table; stream=true is exempt."""

from __future__ import annotations

import httpx
import speech_samples as samples
from fake_backend import FakeBackend
from gateway_server import running_gateway

from k8s_charts.sizing import predicted_rtf
from settings import gpu_catalog, throughput
from settings.loader import DEFAULT_CONFIG_PATH, load_config
from whisper_build.serving.gateway.settings import GatewaySettings


def _wav(seconds: float) -> bytes:
    return samples.encode(samples.tone(seconds, 16000), 16000, "wav_s16")


def test_predicted_time_over_the_timeout_is_refused_up_front_and_streaming_is_exempt() -> None:
    # GIVEN a pod whose conservative RTF is 0.5 and whose request timeout is 10 s
    settings = GatewaySettings(request_timeout_seconds=10, predicted_rtf=0.5)
    backend = FakeBackend()
    with running_gateway(settings, lambda _: backend) as url:
        post = lambda audio, **data: httpx.post(  # noqa: E731
            f"{url}/v1/audio/transcriptions", files={"file": ("a.wav", audio, "audio/wav")}, data=data, timeout=30
        )
        # WHEN 30 s of audio arrive (predicted 15 s) THEN 413 before the model is asked, naming the other paths
        refused = post(_wav(30.0))
        error = refused.json()["error"]
        assert refused.status_code == 413 and error["code"] == "audio_too_long", refused.text
        assert "stream=true" in error["message"] and "bulk" in error["message"] and "15 s" in error["message"]
        assert refused.headers["x-should-retry"] == "false" and backend.calls == []
        # ... while 10 s (predicted 5 s) are served, and 30 s with stream=true are streamed
        assert post(_wav(10.0)).status_code == 200
        streamed = post(_wav(30.0), stream="true")
        assert streamed.status_code == 200 and "transcript.text.done" in streamed.text, streamed.text


def test_the_charts_set_the_groups_conservative_rtf_from_the_table() -> None:
    config = load_config(DEFAULT_CONFIG_PATH)
    for group in config.gpu_groups:
        device = throughput.device_for_instance_type(group.instance_type)
        expected = throughput.throughput_at(device, group.serving_engine, config.model.name, 16).rtf
        if group.mig is not None:
            expected *= gpu_catalog.MIG_COMPUTE_SLICES / group.mig.compute_slices
        assert predicted_rtf(config, group) == expected
        # a large-v3-turbo hour fits the default 300 s timeout on every catalog GPU, not on the CPU row
        assert 3600 * expected < config.serving.request_timeout_seconds
    requests = GatewaySettings().requests
    assert 3600 * requests.predicted_rtf > requests.request_timeout_seconds
