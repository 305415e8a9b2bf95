"""Request fields: unknown ones refused (naming them), OpenAI's accepted, and ``param`` on every one-field error.

Fake backend (no Triton). OpenAI's own client (openai-python) sends the accepted fields, so the
form keys are the ones real clients send (``include[]``, ``chunking_strategy[type]``, …).
"""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines.base import EngineCapabilities
from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.pipeline import rejected_param
from whisper_build.serving.gateway.routes.form_fields import field_name
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.batching import RequestWindows, _check_model
from whisper_build.serving.triton_model.decoding import UnsupportedOption, check_supported

WAV = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")
TRANSCRIPTIONS, TRANSLATIONS = "/v1/audio/transcriptions", "/v1/audio/translations"


@pytest.fixture(scope="module")
def client_and_backend():
    backend = FakeBackend()
    with TestClient(create_app(GatewaySettings(), lambda _: backend)) as client:
        yield client, backend


def _invocation(client: TestClient, **fields: object):  # noqa: ANN202
    return client.post("/invocations", json={"audio_data": base64.b64encode(WAV).decode(), **fields})


def test_invocations_refuses_an_unknown_key_naming_it_and_the_closest_known_one(client_and_backend):
    client, backend = client_and_backend
    calls = len(backend.calls)
    r = _invocation(client, prompt="hi")
    assert r.status_code == 400, r.text
    assert r.json()["code"] == ErrorCode.INVALID_FIELD
    assert "unknown field 'prompt': did you mean whisper_prompt?" in r.json()["message"]
    r = _invocation(client, timestamp=True)
    assert r.status_code == 400 and "did you mean timestamps?" in r.json()["message"], r.text
    r = _invocation(client, zzz=1)
    assert r.status_code == 400 and "did you mean" not in r.json()["message"], r.text
    assert "known fields: audio_data, whisper_prompt" in r.json()["message"]
    assert len(backend.calls) == calls  # nothing refused reached the model
    ok = _invocation(client, whisper_prompt="hi", language="en", timestamps=False, repetition_penalty=1.0)
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (TRANSCRIPTIONS, "response-format"),  # a misspelling: was a 200 in JSON
        (TRANSCRIPTIONS, "prompt[]"),  # a single-valued field sent as an array
        (TRANSCRIPTIONS, "beam_size"),
        (TRANSLATIONS, "language"),  # OpenAI's translations take no language
        (TRANSLATIONS, "timestamp_granularities[]"),
    ],
)
def test_v1_audio_refuses_a_field_openai_does_not_accept_in_openais_words(client_and_backend, path, key):
    client, backend = client_and_backend
    calls = len(backend.calls)
    r = client.post(path, files={"file": ("a.wav", WAV, "audio/wav")}, data={key: "srt"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["message"] == f"Unrecognized request argument supplied: {key}"
    assert error["type"] == "invalid_request_error" and error["param"] == key
    assert len(backend.calls) == calls


def test_every_field_openais_client_sends_is_accepted(client_and_backend):
    client, backend = client_and_backend
    api = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    reference = "data:audio/wav;base64," + base64.b64encode(WAV).decode()
    verbose = api.audio.transcriptions.create(
        file=("a.wav", WAV),
        model="whisper-1",
        chunking_strategy={"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300},
        include=["logprobs"],
        known_speaker_names=["agent", "customer"],
        known_speaker_references=[reference, reference],
        language="en",
        prompt="Hello.",
        response_format="verbose_json",
        temperature=0.2,
        timestamp_granularities=["segment"],
        extra_body={"keywords": ["Triton"], "languages": ["en"]},
    )
    assert verbose.text == "w0:2.0" and backend.options[-1].temperature == pytest.approx(0.2)
    plain = api.audio.transcriptions.create(file=("a.wav", WAV), model="whisper-1", chunking_strategy="auto")
    assert plain.text == "w0:2.0"
    translated = api.audio.translations.create(
        file=("a.wav", WAV), model="whisper-1", prompt="Hello.", response_format="text", temperature=0.0
    )
    assert translated.strip() == "w0:2.0"


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("include[]", "include"),
        ("chunking_strategy[type]", "chunking_strategy"),
        ("timestamp_granularities", "timestamp_granularities"),
        ("file", "file"),
        ("file[]", None),
        ("chunking_strategy[]", None),
        ("include[a][b]", None),
    ],
)
def test_field_name_reads_openais_multipart_keys(key, name):
    assert field_name(key) == name


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ({"language": "klingon"}, "language"),
        ({"prompt": "<|startoftranscript|><|bogus|>"}, "prompt"),
        ({"temperature": "hot"}, "temperature"),
    ],
)
def test_a_field_error_on_v1_names_the_field_in_param(client_and_backend, data, param):
    client, _ = client_and_backend
    r = client.post(TRANSCRIPTIONS, files={"file": ("a.wav", WAV, "audio/wav")}, data=data)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_audio_errors_on_v1_name_the_file(client_and_backend):
    client, _ = client_and_backend
    r = client.post(TRANSCRIPTIONS, files={"file": ("a.wav", b"not audio at all" * 20, "audio/wav")})
    assert r.status_code == 400 and r.json()["error"]["param"] == "file", r.text


class _Engine:
    def __init__(self, multilingual: bool, words: bool) -> None:
        self.name = "fake"
        self.multilingual = multilingual
        self.capabilities = EngineCapabilities(timestamps=True, word_timestamps=words, sampling=True)


def _refusal(prompt: DecodePrompt, options: DecodeOptions | None = None) -> str:
    request = RequestWindows([np.zeros(16000, np.float32)], [prompt], [1.0], [options or DecodeOptions()])
    engine = _Engine(multilingual=False, words=False)
    refused = _check_model(engine, request)  # type: ignore[arg-type]
    assert isinstance(refused, Exception)
    return str(refused)


def test_the_models_refusals_map_to_the_field_at_fault():
    assert rejected_param(_refusal(DecodePrompt(language="de"))) == "language"
    assert rejected_param(_refusal(DecodePrompt(task="translate"))) == "model"
    assert rejected_param(_refusal(DecodePrompt(), DecodeOptions(word_timestamps=True))) == "timestamp_granularities"
    with pytest.raises(UnsupportedOption) as refused:
        engine = _Engine(multilingual=True, words=False)
        check_supported(engine, [DecodeOptions(timestamps=True, word_timestamps=True)])  # type: ignore[arg-type]
    assert rejected_param(str(refused.value)) == "timestamp_granularities"
