"""Error codes as docs/gateway.md documents them: each code names one failure."""

from __future__ import annotations

import base64

from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings


def test_codes_are_distinct() -> None:
    values = [code.value for code in ErrorCode]
    assert len(values) == len(set(values)) == len(ErrorCode.__members__)


def test_unknown_model_is_model_not_found_and_wrong_method_is_method_not_allowed() -> None:
    app = create_app(GatewaySettings(), lambda _: FakeBackend())
    with TestClient(app) as client:
        unknown = client.get("/v1/models/gpt-4o")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
        wrong = client.get("/v1/audio/transcriptions")
        assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
        assert client.get("/v1/nothing").json()["error"]["code"] == "not_found"
        assert client.get("/invocations").json()["code"] == 1011


def test_a_field_sent_twice_is_a_400_naming_it() -> None:
    import speech_samples as samples

    wav = samples.encode(samples.tone(1.0, 16000), 16000, "wav_s16")
    app = create_app(GatewaySettings(), lambda _: FakeBackend())
    with TestClient(app) as client:
        two_files = [("file", ("a.wav", wav, "audio/wav")), ("file", ("b.wav", wav, "audio/wav"))]
        r = client.post("/v1/audio/transcriptions", files=two_files)
        assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text
        assert "sent 2 times" in r.json()["error"]["message"]
        one_file = [("file", ("a.wav", wav, "audio/wav"))]
        r = client.post("/v1/audio/transcriptions", files=one_file, data={"model": ["whisper-1", "whisper"]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "model", r.text
        assert client.post("/v1/audio/transcriptions", files=one_file, data={"model": "whisper-1"}).status_code == 200


def test_audio_shorter_than_the_minimum_is_audio_too_short_before_the_model() -> None:
    import speech_samples as samples

    backend = FakeBackend()
    app = create_app(GatewaySettings(), lambda _: backend)
    with TestClient(app) as client:
        for seconds, rate in ((0.05, 16000), (0.099, 44100)):
            wav = samples.encode(samples.tone(seconds, rate), rate, "wav_s16")
            r = client.post("/v1/audio/transcriptions", files={"file": ("short.wav", wav, "audio/wav")})
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "audio_too_short" and error["param"] == "file"
            assert "Minimum audio length is 0.1 seconds" in error["message"]
        assert backend.calls == []
        at_minimum = samples.encode(samples.tone(0.1, 16000), 16000, "wav_s16")
        r = client.post("/v1/audio/transcriptions", files={"file": ("min.wav", at_minimum, "audio/wav")})
        assert r.status_code == 200 and r.json()["text"] == "w0:0.1", r.text
        r = client.post("/invocations", json={"audio_data": base64.b64encode(wav).decode()})
        assert r.status_code == 400 and r.json()["code"] == ErrorCode.AUDIO_TOO_SHORT, r.text
    off = create_app(GatewaySettings(min_audio_seconds=0), lambda _: FakeBackend())
    with TestClient(off) as client:
        r = client.post("/v1/audio/transcriptions", files={"file": ("short.wav", wav, "audio/wav")})
        assert r.status_code == 200, r.text
