"""The table of bad requests every gateway must answer with a 4xx in the error shape.

Shared by the fake-backend tests (tests/serving/gateway/test_gateway_app.py) and the real-Triton integration
tests (tests/serving/gateway/test_gateway_integration.py). Each case builds its request from the gateway's
limits so the same table fits any settings.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile
import speech_samples as samples

Kwargs = dict[str, Any]


@dataclass(frozen=True)
class BadRequest:
    """One bad request: ``build(max_body_bytes, max_audio_seconds)`` returns request kwargs."""

    name: str
    method: str
    path: str
    build: Callable[[int, float], Kwargs]
    status: int
    message: str  # case-insensitive substring of the answer's "message"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _wav(seconds: float) -> bytes:
    return samples.encode(samples.tone(seconds, 16000), 16000, "wav_s16")


def _header_only_wav() -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, np.zeros(0, np.float32), 16000, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def _too_long_flac(max_audio_seconds: float) -> bytes:
    # Digital silence compresses ~1000x in FLAC, so the body stays far under the size limit.
    return samples.encode(np.zeros(int((max_audio_seconds + 5) * 8000), np.float32), 8000, "flac")


def _json(body: Any) -> Callable[[int, float], Kwargs]:
    return lambda _size, _secs: {"json": body}


def _invocation(**fields: Any) -> Callable[[int, float], Kwargs]:
    return lambda _size, _secs: {"json": {"audio_data": _b64(_wav(1.0)), **fields}}


def _form(audio: bytes | None, **data: str) -> Callable[[int, float], Kwargs]:
    files = {"file": ("speech.wav", audio)} if audio is not None else None
    return lambda _size, _secs: {"files": files, "data": data} if files else {"data": data or {"model": "whisper"}}


INV, OAI = "/invocations", "/v1/audio/transcriptions"
BAD_REQUESTS: list[BadRequest] = [
    BadRequest("body_not_json", "POST", INV, lambda *_: {"content": b"{not json", "headers": {"Content-Type": "application/json"}}, 400, "not valid JSON"),
    BadRequest("body_empty", "POST", INV, lambda *_: {"content": b""}, 400, "body is empty"),
    BadRequest("json_array", "POST", INV, _json([1, 2]), 400, "must be a JSON object, got list"),
    BadRequest("json_string", "POST", INV, _json("audio"), 400, "must be a JSON object, got str"),
    BadRequest("audio_data_missing", "POST", INV, _json({"whisper_prompt": "x"}), 400, "audio_data: Field required"),
    BadRequest("audio_data_empty", "POST", INV, _json({"audio_data": ""}), 400, "audio_data is empty"),
    BadRequest("audio_data_not_string", "POST", INV, _json({"audio_data": 12345}), 400, "audio_data: Input should be a valid string"),
    BadRequest("audio_data_not_base64", "POST", INV, _json({"audio_data": "%%% not base64 %%%"}), 400, "not valid base64"),
    BadRequest("bytes_not_audio", "POST", INV, _json({"audio_data": _b64(b"just some text, no audio here" * 10)}), 400, "not a decodable audio file"),
    BadRequest("audio_zero_length", "POST", INV, _json({"audio_data": _b64(_header_only_wav())}), 400, "zero length"),
    BadRequest("body_over_size_limit", "POST", INV, lambda size, _: {"content": b"x" * (size + 1), "headers": {"Content-Type": "application/json"}}, 413, "over the limit"),
    BadRequest("audio_over_duration_limit", "POST", INV, lambda _, secs: {"json": {"audio_data": _b64(_too_long_flac(secs))}}, 413, "WHISPER_GATEWAY_MAX_AUDIO_SECONDS"),
    BadRequest("repetition_penalty_not_number", "POST", INV, _invocation(repetition_penalty="abc"), 400, "repetition_penalty: Input should be a valid number"),
    BadRequest("repetition_penalty_negative", "POST", INV, _invocation(repetition_penalty=-1), 400, "repetition_penalty: Input should be greater than 0"),
    BadRequest("repetition_penalty_nan", "POST", INV, lambda *_: {"content": json.dumps({"audio_data": _b64(_wav(1.0)), "repetition_penalty": float("nan")}).encode()}, 400, "repetition_penalty: Input should be a finite number"),
    BadRequest("language_not_string", "POST", INV, _invocation(language=5), 400, "language: Input should be a valid string"),
    BadRequest("language_unknown", "POST", INV, _invocation(language="klingon"), 400, "unknown language 'klingon'"),
    BadRequest("prompt_not_string", "POST", INV, _invocation(whisper_prompt=["a"]), 400, "whisper_prompt: Input should be a valid string"),
    BadRequest("prompt_bad_special_token", "POST", INV, _invocation(whisper_prompt="<|startoftranscript|><|bogus|>"), 400, "unexpected special token <|bogus|>"),
    BadRequest("openai_file_missing", "POST", OAI, _form(None, model="whisper-1"), 400, "file: Field required"),
    BadRequest("openai_bad_response_format", "POST", OAI, lambda *_: _form(_wav(1.0), response_format="xml")(0, 0), 400, "unknown response_format 'xml'"),
    BadRequest("openai_file_not_audio", "POST", OAI, _form(b"PK\x03\x04 a zip, not audio" * 20), 400, "not a decodable audio file"),
    BadRequest("openai_temperature_not_number", "POST", OAI, lambda *_: _form(_wav(1.0), temperature="hot")(0, 0), 400, "temperature: Input should be a valid number"),
    BadRequest("unknown_route", "POST", "/v1/nope", _json({}), 404, "not found"),
    BadRequest("wrong_method", "GET", INV, lambda *_: {}, 405, "method not allowed"),
]  # fmt: skip


def error_message(path: str, body: Any) -> str:
    """The error's message, after asserting the shape for ``path``: OpenAI's
    ``{"error": {message, type, param, code}}`` under ``/v1/``, else ``{code: int != 0, message}``."""
    assert isinstance(body, dict), body
    if path.startswith("/v1/"):
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        assert isinstance(body["error"]["code"], str) and body["error"]["type"], body
        return str(body["error"]["message"])
    assert set(body) == {"code", "message"}, body
    assert isinstance(body["code"], int) and body["code"] != 0, body
    return str(body["message"])


def send_bad_request(client: Any, case: BadRequest, max_body_bytes: int, max_audio_seconds: float) -> tuple[int, Any]:
    """Send ``case`` with an httpx-compatible ``client``; return (status, decoded JSON body)."""
    response = client.request(case.method, case.path, **case.build(max_body_bytes, max_audio_seconds))
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text
