"""Gateway + long audio with a fake backend: header refusal, bounded window groups in order with
true offsets, and admission by seconds of audio."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient
from long_audio import without_total_samples

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings

RATE = 16000


def _flac(seconds: float) -> bytes:
    return samples.encode(samples.tone(seconds, RATE), RATE, "flac")


def _openai(client: TestClient, audio: bytes, **form: str) -> httpx.Response:
    return client.post("/v1/audio/transcriptions", files={"file": ("a.flac", audio)}, data=form)


def test_windows_go_to_the_model_in_bounded_groups_in_order_with_true_offsets() -> None:
    backend = FakeBackend()
    settings = GatewaySettings(max_body_bytes=10_000_000, window_group_size=2)
    speech, pause = samples.tone(25.0, RATE), np.zeros(RATE, np.float32)
    silence = np.zeros(40 * RATE, np.float32)
    x = np.concatenate([speech, pause, speech, pause, silence, speech, pause, speech])  # 142 s
    with TestClient(create_app(settings, lambda _: backend)) as client:
        r = _openai(client, samples.encode(x, RATE, "flac"), response_format="verbose_json")
    assert r.status_code == 200, r.text
    assert [batch for batch, *_ in backend.calls] == [2, 2]  # 4 voiced windows, ≤ 2 per call
    segments = r.json()["segments"]
    starts = [s["start"] for s in segments]
    assert starts == sorted(starts) and starts[0] == 0
    assert starts[2] > 60  # the silent stretch was dropped, later windows keep their true offsets
    for i, segment in enumerate(segments):  # the fake answers "w<index in its call>:<window seconds>"
        index, seconds = segment["text"][1:].split(":")
        assert int(index) == i % 2 and float(seconds) == pytest.approx(segment["end"] - segment["start"], abs=0.06)
    assert r.json()["duration"] == pytest.approx(len(x) / RATE)


def test_over_long_audio_is_refused_from_its_header_without_decoding() -> None:
    backend = FakeBackend()
    with TestClient(create_app(GatewaySettings(max_audio_seconds=60), lambda _: backend)) as client:
        head = _flac(90.0)[:20_000]  # the header says 90 s; the rest of the file is not even sent
        r = _openai(client, head)
        error = r.json()["error"]  # /v1/* answers in OpenAI's error shape
        assert r.status_code == 413 and error["code"] == "audio_too_long"
        message = error["message"]
        assert "90.0 s long by its header, over the limit of 60 s: split it" in message
        assert "WHISPER_GATEWAY_MAX_AUDIO_SECONDS" in message
        # Without a declared length, decoding stops at the limit.
        r = _openai(client, without_total_samples(_flac(90.0)))
        assert r.status_code == 413 and "longer than 60 s" in r.json()["error"]["message"]
    assert not backend.calls


def test_admission_budgets_audio_seconds_429_for_a_long_upload_while_a_short_one_runs() -> None:
    async def scenario() -> None:
        backend = FakeBackend()
        backend.gate, backend.entered = asyncio.Event(), asyncio.Event()
        settings = GatewaySettings(max_audio_seconds=100, audio_budget_seconds=100, queue_size=0, retry_after_seconds=4)
        app = create_app(settings, lambda _: backend)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:

                async def post(seconds: float) -> httpx.Response:
                    return await client.post("/v1/audio/transcriptions", files={"file": ("a.flac", _flac(seconds))})

                first = asyncio.create_task(post(60))
                await asyncio.wait_for(backend.entered.wait(), 10)
                busy = await post(60)  # 60 + 60 > 100 s of audio: refused though 7 slots are free
                assert busy.status_code == 429 and busy.headers["retry-after"] == "4"
                assert "60 s of audio of a 100 s budget (this request: 60 s)" in busy.json()["error"]["message"]
                short = asyncio.create_task(post(20))  # fits beside the first
                while len(backend.calls) < 2:
                    await asyncio.sleep(0.01)
                backend.gate.set()
                assert [(await first).status_code, (await short).status_code] == [200, 200]
                assert app.state.runtime.admission.audio_seconds == 0

    asyncio.run(scenario())
