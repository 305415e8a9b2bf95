"""Uploads named through RFC 5987 ``filename*`` are files (routes/multipart_form.py), through the real ASGI app."""

from __future__ import annotations

import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.routes.multipart_form import extended_filename
from whisper_build.serving.gateway.settings import GatewaySettings

BOUNDARY = "whisper-test-boundary"


def _body(disposition: str, payload: bytes) -> bytes:
    """A multipart/form-data body by hand: one audio part with ``disposition``, then ``model``."""
    return (
        f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\nContent-Type: audio/wav\r\n\r\n".encode()
        + payload
        + f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n'
        f"--{BOUNDARY}--\r\n".encode()
    )


def _post(client: TestClient, disposition: str, payload: bytes):  # type: ignore[no-untyped-def]
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    return client.post("/v1/audio/transcriptions", content=_body(disposition, payload), headers=headers)


def test_extended_filename_is_decoded_and_plain_names_are_not_extended() -> None:
    assert extended_filename(b"form-data; name=\"file\"; filename*=UTF-8''n%C3%A4me%22%3B.wav") == 'näme";.wav'
    assert extended_filename(b'form-data; name="file"; filename="a.wav"; filename*=UTF-8\'\'b%C3%A9.wav') == "bé.wav"
    assert extended_filename(b'form-data; name="file"; filename="a.wav"') is None
    assert extended_filename(b'form-data; name="model"') is None


def test_upload_named_only_by_filename_star_is_transcribed() -> None:
    wav = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")
    backend = FakeBackend()
    app = create_app(GatewaySettings(), lambda _: backend)
    with TestClient(app) as client:
        only_star = _post(client, "form-data; name=\"file\"; filename*=UTF-8''%E9%9F%B3%E5%A3%B0.wav", wav)
        assert only_star.status_code == 200, only_star.text
        assert only_star.json()["text"] == "w0:2.0"
        both = _post(client, 'form-data; name="file"; filename="a.wav"; filename*=UTF-8\'\'b%C3%A9.wav', wav)
        assert both.status_code == 200, both.text
        plain = _post(client, 'form-data; name="file"; filename="a.wav"', wav)
        assert plain.status_code == 200, plain.text
        # A part with no file name at all is still a text field, refused as before.
        text_field = _post(client, 'form-data; name="file"', b"not a file")
        assert text_field.status_code == 400, text_field.text
    assert len(backend.calls) == 3
