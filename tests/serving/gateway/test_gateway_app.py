"""Gateway HTTP behaviour with an injected fake backend (Triton-free): errors, formats,
windows, admission, drain, metrics. The same error table also runs against real Triton in
tests/serving/gateway/test_gateway_integration.py."""

from __future__ import annotations

import asyncio
import base64
import re
import time

import httpx
import numpy as np
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from fastapi.testclient import TestClient
from gateway_cases import BAD_REQUESTS, BadRequest, error_message, send_bad_request

from whisper_build.serving.gateway.app import create_app
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.transcription.backend import BackendError, BackendTimeout, BackendUnavailable
from whisper_build.serving.transcription.triton_inputs import pack_batch

WAV = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")


def metrics_text(app) -> str:
    """The app's Prometheus exposition (served on the metrics port by ``serve.serve``, not by the app)."""
    return app.state.runtime.metrics.render().decode()


def make_client(**overrides: object) -> tuple[TestClient, FakeBackend]:
    backend = FakeBackend()
    settings = GatewaySettings(**{"max_body_bytes": 1_000_000, "max_audio_seconds": 120, **overrides})
    return TestClient(create_app(settings, lambda _: backend)), backend


@pytest.fixture(scope="module")
def client_and_backend():
    client, backend = make_client()
    with client:
        yield client, backend
    assert backend.closed  # lifespan closed the backend


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c.name for c in BAD_REQUESTS])
def test_bad_requests_get_shaped_4xx(client_and_backend, case: BadRequest) -> None:
    client, backend = client_and_backend
    calls_before = len(backend.calls)
    status, body = send_bad_request(client, case, max_body_bytes=1_000_000, max_audio_seconds=120)
    assert status == case.status, body
    message = error_message(case.path, body)
    assert case.message.lower() in message.lower(), message
    assert len(backend.calls) == calls_before  # nothing bad reached the model
    # the service keeps serving after every bad request
    ok = client.post("/invocations", json={"audio_data": b64(WAV)})
    assert ok.status_code == 200 and ok.json()["transcribe_text"] == "w0:2.0"


def test_invocations_success_shape_prompt_and_penalty(client_and_backend) -> None:
    client, backend = client_and_backend
    r = client.post(
        "/invocations",
        json={
            "audio_data": "data:audio/wav;base64," + b64(WAV),
            "whisper_prompt": "<|startofprev|>Triton<|startoftranscript|><|en|><|transcribe|><|notimestamps|>",
            "repetition_penalty": 1.3,
        },
    )
    assert r.status_code == 200
    assert r.json() == {
        "code": 0,
        "message": "Success",
        "transcribe_text": "w0:2.0",
        "duration": 2.0,
        "language": "en",
    }
    _, _, prefix, penalty = backend.calls[-1]
    assert prefix == "<|startofprev|>Triton<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"
    assert penalty == pytest.approx(1.3)


def test_plain_prompt_and_language_become_text_prefix(client_and_backend) -> None:
    client, backend = client_and_backend
    r = client.post("/invocations", json={"audio_data": b64(WAV), "whisper_prompt": "HyperPod", "language": "EN"})
    assert r.status_code == 200
    assert backend.calls[-1][2] == "<|startofprev|>HyperPod<|startoftranscript|><|en|><|transcribe|><|notimestamps|>"


def test_long_prompt_is_truncated_not_rejected(client_and_backend) -> None:
    client, backend = client_and_backend
    r = client.post("/invocations", json={"audio_data": b64(WAV), "whisper_prompt": "word " * 5000})
    assert r.status_code == 200
    assert len(backend.calls[-1][2]) < 5000


def test_long_audio_is_one_batch_of_windows_joined_in_order(client_and_backend) -> None:
    client, backend = client_and_backend
    x = np.concatenate([samples.tone(20.0, 16000), np.zeros(8000, np.float32)] * 4)  # 82 s
    r = client.post("/invocations", json={"audio_data": b64(samples.encode(x, 16000, "flac"))})
    assert r.status_code == 200
    batch, lengths, _, _ = backend.calls[-1]
    assert batch == 3 and sum(lengths) == len(x)  # one call, nothing lost
    assert all(n <= 30 * 16000 for n in lengths)
    assert r.json()["transcribe_text"].split() == [f"w{i}:{n / 16000:.1f}" for i, n in enumerate(lengths)]
    assert r.json()["duration"] == pytest.approx(82.0)


def test_silence_returns_empty_text_without_calling_the_model(client_and_backend) -> None:
    client, backend = client_and_backend
    calls = len(backend.calls)
    silence = samples.encode(np.zeros(16000 * 45, np.float32), 16000, "flac")
    r = client.post("/invocations", json={"audio_data": b64(silence)})
    assert r.status_code == 200 and r.json()["transcribe_text"] == "" and r.json()["duration"] == 45.0
    assert len(backend.calls) == calls


def openai(client: TestClient, audio: bytes, **form: str) -> httpx.Response:
    return client.post("/v1/audio/transcriptions", files={"file": ("a.flac", audio)}, data=form)


def test_openai_formats(client_and_backend) -> None:
    client, _ = client_and_backend
    x = np.concatenate([samples.tone(25.0, 16000), np.zeros(16000, np.float32), samples.tone(10.0, 16000)])
    audio = samples.encode(x, 16000, "flac")
    plain = openai(client, audio).json()
    assert list(plain) == ["text", "usage"] and [t.split(":")[0] for t in plain["text"].split()] == ["w0", "w1"]
    assert plain["usage"] == {"type": "duration", "seconds": 36}
    text = openai(client, audio, response_format="text")
    assert text.headers["content-type"].startswith("text/plain") and text.text.startswith("w0:")
    verbose = openai(client, audio, response_format="verbose_json", language="en", model="whisper-1").json()
    assert verbose["language"] == "english" and verbose["duration"] == pytest.approx(36.0)
    segments = verbose["segments"]
    assert [s["id"] for s in segments] == [0, 1] and segments[0]["start"] == 0.0
    assert segments[0]["end"] == segments[1]["start"] and segments[1]["end"] == pytest.approx(36.0)
    assert 25.0 <= segments[0]["end"] <= 26.0  # cut in the 1 s pause
    srt = openai(client, audio, response_format="srt").text
    assert srt.startswith("1\n00:00:00,000 --> 00:00:25,") and "\n\n2\n00:00:25," in srt
    vtt = openai(client, audio, response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:25.") and "w1:" in vtt


@pytest.mark.parametrize(
    ("error", "status", "code", "message"),
    [
        (BackendUnavailable("Triton is unavailable: connection refused"), 503, 2002, "unavailable"),
        (BackendError("Triton failed the request: boom"), 502, 2003, "boom"),
        (BackendTimeout("Triton did not answer"), 504, 2004, "longer than"),
    ],
)
def test_backend_failures_map_to_5xx(error: Exception, status: int, code: int, message: str) -> None:
    client, backend = make_client()
    with client:
        backend.error = error
        r = client.post("/invocations", json={"audio_data": b64(WAV)})
        assert (r.status_code, r.json()["code"]) == (status, code) and message in r.json()["message"]
        backend.error = None
        assert client.post("/invocations", json={"audio_data": b64(WAV)}).status_code == 200


FAST_CANARY = {"canary_interval_seconds": 0.05, "canary_timeout_seconds": 0.5, "stale_after_seconds": 5}


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def test_ping_follows_the_canary_the_repair_and_drain() -> None:
    client, backend = make_client(**FAST_CANARY)
    with client:
        # GIVEN a model whose canary succeeds, no client traffic at all
        _until(lambda: client.get("/ping").status_code == 200)
        # WHEN the model's runtime dies (every inference fails; Triton's own health stays green)
        backend.reload_heals = False
        backend.error = BackendError("Stub process 'whisper_0_0' is not healthy.")
        # THEN /ping turns 503 with the reason, from the canary alone, and failures are counted
        _until(lambda: client.get("/ping").status_code == 503)
        r = client.get("/ping")
        assert "cannot serve" in r.json()["message"] and "not healthy" in r.json()["message"]
        metrics = metrics_text(client.app)
        assert 'whisper_gateway_backend_failures_total{source="canary"}' in metrics
        assert "whisper_gateway_model_healthy 0.0" in metrics
        # ... the gateway asks for a reload, and while it does not help, backs off (1 s, 2 s, ...)
        _until(lambda: backend.reloads >= 1)
        time.sleep(0.5)
        assert backend.reloads == 1
        # WHEN a reload brings the model back THEN /ping is 200 again, with no client request
        backend.reload_heals = True
        # the next attempt comes after the back-off (up to 4 s by now); slack for a CPU shared with other work
        _until(lambda: client.get("/ping").status_code == 200, timeout=30.0)
        assert backend.reloads == 2 and backend.calls == []
        assert "whisper_gateway_model_healthy 1.0" in metrics_text(client.app)
        # draining wins over health
        client.app.state.runtime.admission.start_drain()
        assert client.get("/ping").status_code == 503
        r = client.post("/invocations", json={"audio_data": b64(WAV)})
        assert r.status_code == 503 and "shutting down" in r.json()["message"]


def test_ping_is_unready_until_the_first_canary_succeeds() -> None:
    client, backend = make_client(**FAST_CANARY)
    backend.error = BackendUnavailable("Triton is unavailable: failed to connect")
    backend.reload_heals = False
    with client:
        _until(lambda: backend.canaries >= 2)
        r = client.get("/ping")
        assert r.status_code == 503 and "failed to connect" in r.json()["message"]
        backend.error = None  # e.g. the supervisor's restart of tritonserver finished loading
        _until(lambda: client.get("/ping").status_code == 200)


def test_client_failures_count_and_client_successes_keep_a_busy_model_healthy() -> None:
    client, backend = make_client(canary_interval_seconds=5, canary_timeout_seconds=1, stale_after_seconds=7)
    with client:
        _until(lambda: client.get("/ping").status_code == 200)
        backend.error = BackendError("Triton failed the request: boom")
        for _ in range(2):
            assert client.post("/invocations", json={"audio_data": b64(WAV)}).status_code == 502
        assert 'whisper_gateway_backend_failures_total{source="request"} 2.0' in metrics_text(client.app)
        assert client.get("/ping").status_code == 503  # two failures in a row
        backend.error = None
        assert client.post("/invocations", json={"audio_data": b64(WAV)}).status_code == 200
        assert client.get("/ping").status_code == 200  # a client success is evidence too


def test_body_limit_checked_while_streaming_without_content_length() -> None:
    client, backend = make_client(max_body_bytes=10_000)
    with client:

        def chunks():
            for _ in range(20):
                yield b"x" * 1000

        r = client.post("/invocations", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "10000 bytes" in r.json()["message"]
        assert not backend.calls
        assert client.post("/invocations", json={"audio_data": b64(WAV[:4000])}).status_code != 413


def test_overload_queue_full_gets_429_then_recovers() -> None:
    asyncio.run(_overload_scenario())


async def _overload_scenario() -> None:
    backend = FakeBackend()
    backend.gate, backend.entered = asyncio.Event(), asyncio.Event()
    app = create_app(GatewaySettings(capacity=1, queue_size=0, retry_after_seconds=2), lambda _: backend)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"audio_data": b64(WAV)}
            first = asyncio.create_task(client.post("/invocations", json=body))
            await asyncio.wait_for(backend.entered.wait(), 10)
            second = await client.post("/invocations", json=body)
            assert second.status_code == 429 and second.headers["retry-after"] == "2"
            assert second.json()["code"] == 2001 and "busy" in second.json()["message"]
            metrics = metrics_text(app)
            assert "whisper_gateway_inflight_requests 1.0" in metrics
            backend.gate.set()
            assert (await first).status_code == 200
            assert (await client.post("/invocations", json=body)).status_code == 200


def test_request_timeout_gives_504() -> None:
    asyncio.run(_timeout_scenario())


async def _timeout_scenario() -> None:
    backend = FakeBackend()
    backend.gate = asyncio.Event()  # never released
    app = create_app(GatewaySettings(request_timeout_seconds=0.2, predicted_rtf=0.001), lambda _: backend)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client,
    ):
        r = await client.post("/invocations", json={"audio_data": b64(WAV)})
        assert r.status_code == 504 and "WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS" in r.json()["message"]
        assert "whisper_gateway_inflight_requests 0.0" in metrics_text(app)


def test_metrics_have_exactly_the_contract_names(client_and_backend) -> None:
    client, _ = client_and_backend
    client.post("/invocations", json={"audio_data": b64(WAV)})
    text = metrics_text(client.app)
    names = {
        line.split()[2]
        for line in text.splitlines()
        if line.startswith("# TYPE") and not line.split()[2].endswith("_created")
    }
    assert names == {
        "whisper_gateway_requests_total",
        "whisper_gateway_request_duration_seconds",
        "whisper_gateway_audio_seconds_total",
        "whisper_gateway_inflight_requests",
        "whisper_gateway_capacity_requests",
        "whisper_gateway_backend_failures_total",
        "whisper_gateway_model_healthy",
        "whisper_gateway_model_busy_with_others",
        "whisper_gateway_speaker_model_failed",
        "whisper_gateway_model_reloaded_timestamp_seconds",
        "whisper_gateway_window_decodes_total",
        "whisper_gateway_window_retries_total",
        "whisper_realtime_sessions_active",
        "whisper_realtime_sessions_refused_total",
        "whisper_realtime_session_duration_seconds",
        "whisper_realtime_first_delta_seconds",
        "whisper_realtime_finalisation_seconds",
        "whisper_realtime_updates_total",
        "whisper_realtime_updates_dropped_total",
        "whisper_realtime_update_windows_total",
        "whisper_realtime_turns_failed_total",
        "whisper_realtime_final_retries_total",
    }
    assert 'whisper_gateway_requests_total{route="/invocations",status="200"}' in text
    assert 'whisper_gateway_audio_seconds_total{route="/invocations"}' in text
    assert "whisper_gateway_capacity_requests 8.0" in text
    assert 'whisper_gateway_window_decodes_total{temperature="0.0"}' in text


def test_latency_histogram_counts_successes_only(client_and_backend) -> None:
    client, _ = client_and_backend

    def sample(name: str) -> float:
        match = re.search(rf"^{re.escape(name)} (\S+)$", metrics_text(client.app), re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    timed = 'whisper_gateway_request_duration_seconds_count{route="/invocations"}'
    rejected = 'whisper_gateway_requests_total{route="/invocations",status="400"}'
    timed_before, rejected_before = sample(timed), sample(rejected)
    assert client.post("/invocations", json={"audio_data": b64(WAV)}).status_code == 200
    assert client.post("/invocations", content=b"not json").status_code == 400  # counted, not timed
    assert sample(timed) == timed_before + 1
    assert sample(rejected) == rejected_before + 1


def test_pack_batch_zero_pads_and_reports_lengths() -> None:
    wav, lens = pack_batch([np.ones(3, np.float32), np.ones(5, np.float32)])
    assert wav.shape == (2, 5) and wav.dtype == np.float32 and lens.dtype == np.int32
    assert lens.tolist() == [[3], [5]] and wav[0].tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError):
        pack_batch([])


def test_real_triton_client_against_a_closed_port_gives_503() -> None:
    """The real TritonBackend (no fake) when nothing listens: /ping and requests answer 503."""
    from whisper_build.workstation.local_triton import free_ports

    (port,) = free_ports(1)  # bound and closed again at once: nothing listens there
    settings = GatewaySettings(triton_url=f"127.0.0.1:{port}", request_timeout_seconds=10)
    with TestClient(create_app(settings)) as client:
        ping = client.get("/ping")
        assert ping.status_code == 503 and ping.headers["retry-after"] == "1"
        assert f"127.0.0.1:{port}" in ping.json()["message"]
        r = client.post("/invocations", json={"audio_data": b64(WAV)})
        assert r.status_code == 503 and r.json()["code"] == 2002, r.json()
        assert "unavailable" in r.json()["message"].lower()
        # GET /v1/models reads the Triton model config: unreachable → 503 in OpenAI's shape.
        models = client.get("/v1/models")
        assert models.status_code == 503 and models.json()["error"]["type"] == "server_error", models.text


def test_models_report_the_model_config(client_and_backend) -> None:
    client, backend = client_and_backend
    listed = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["multilingual"], m["engine"]) for m in listed] == [
        ("whisper", False, "fake"),
        ("whisper-1", False, "fake"),
    ]
    assert client.get("/v1/models/whisper-1").json()["multilingual"] is False


def test_served_model_reads_multilingual_from_the_triton_config_json() -> None:
    from whisper_build.serving.transcription.backend import ServedModel

    config = {"name": "whisper", "max_batch_size": 8,
              "parameters": {"multilingual": {"string_value": "true"}, "engine": {"string_value": "tensorrt_llm"}}}  # fmt: skip
    assert ServedModel.from_triton_config(config) == ServedModel("whisper", 8, True, "tensorrt_llm")
    assert ServedModel.from_triton_config({"name": "whisper"}) == ServedModel("whisper", 1, None, None)
    with pytest.raises(BackendError, match="without a name"):
        ServedModel.from_triton_config({})


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_body_limit_over_a_real_socket(chunked: bool) -> None:
    """The 413 must reach a client that is still sending (uvicorn on a real TCP socket)."""
    from gateway_server import running_gateway

    backend = FakeBackend()
    with running_gateway(GatewaySettings(max_body_bytes=1_000_000), lambda _: backend) as url:
        body = b"x" * 8_000_000
        content = (body[i : i + 65536] for i in range(0, len(body), 65536)) if chunked else body
        r = httpx.post(f"{url}/invocations", content=content, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["code"] == 1005 and "1000000 bytes" in r.json()["message"]
        ok = httpx.post(f"{url}/invocations", json={"audio_data": b64(WAV)})
        assert ok.status_code == 200 and not backend.calls[:-1]


def test_a_refused_body_that_never_ends_is_answered_after_the_linger_time() -> None:
    """Dropping a refused body is bounded by time: an endless upload still gets its 413."""
    from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware

    async def scenario() -> None:
        reads, sent = 0, []

        async def endless() -> dict:
            nonlocal reads
            reads += 1
            await asyncio.sleep(0.01)
            return {"type": "http.request", "body": b"x" * 1000, "more_body": True}

        async def send(message: dict) -> None:
            sent.append(message)

        async def never_called(*_: object) -> None:
            raise AssertionError("the app must not see a refused body")

        limited = BodyLimitMiddleware(never_called, 10_000, "X", linger_seconds=0.3)
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/invocations",
            "headers": [(b"content-length", b"99999999")],
        }
        await asyncio.wait_for(limited(scope, endless, send), 10)
        assert sent[0]["status"] == 413 and reads > 1

        # a finite body 50x the limit is read to its end before the answer (no unread tail to reset)
        chunks = [{"type": "http.request", "body": b"x" * 10_000, "more_body": i < 49} for i in range(50)]

        async def finite() -> dict:
            return chunks.pop(0)

        sent.clear()
        await asyncio.wait_for(BodyLimitMiddleware(never_called, 10_000, "X")(scope, finite, send), 10)
        assert sent[0]["status"] == 413 and not chunks

    asyncio.run(scenario())


def test_bodies_beyond_the_concurrency_limit_are_refused_before_they_reach_the_app() -> None:
    from fastapi.responses import JSONResponse

    from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware

    async def scenario() -> None:
        entered, release, seen = asyncio.Event(), asyncio.Event(), []

        async def inner(scope, receive, send) -> None:
            seen.append(len((await receive())["body"]))
            entered.set()
            await release.wait()
            await JSONResponse({"code": 0})(scope, receive, send)

        limited = BodyLimitMiddleware(inner, 10_000, "X", max_concurrent=1, retry_after_seconds=3)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://gw") as client:
            first = asyncio.create_task(client.post("/invocations", content=b"a" * 100))
            await asyncio.wait_for(entered.wait(), 10)
            busy = await client.post("/invocations", content=b"b" * 200)
            assert busy.status_code == 429 and busy.headers["retry-after"] == "3"
            assert busy.json()["code"] == 2001 and "retry later" in busy.json()["message"]
            release.set()
            assert (await first).status_code == 200
            assert (await client.post("/invocations", content=b"c" * 300)).status_code == 200
        assert seen == [100, 300]  # the refused body never reached the app

    asyncio.run(scenario())


def test_inflight_counts_waiting_requests_so_utilization_can_exceed_one() -> None:
    async def scenario() -> None:
        backend = FakeBackend()
        backend.gate, backend.entered = asyncio.Event(), asyncio.Event()
        app = create_app(GatewaySettings(capacity=1, queue_size=1), lambda _: backend)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                body = {"audio_data": b64(WAV)}
                running = asyncio.create_task(client.post("/invocations", json=body))
                await asyncio.wait_for(backend.entered.wait(), 10)
                waiting = asyncio.create_task(client.post("/invocations", json=body))
                deadline = asyncio.get_running_loop().time() + 10
                while "whisper_gateway_inflight_requests 2.0" not in metrics_text(app):
                    assert asyncio.get_running_loop().time() < deadline, "waiting request not counted"
                    await asyncio.sleep(0.01)
                assert "whisper_gateway_capacity_requests 1.0" in metrics_text(app)
                backend.gate.set()
                assert [(await running).status_code, (await waiting).status_code] == [200, 200]
                assert "whisper_gateway_inflight_requests 0.0" in metrics_text(app)

    asyncio.run(scenario())


def test_live_answers_without_the_model_and_fails_on_a_stale_supervisor_heartbeat(tmp_path) -> None:
    import os
    import time

    heartbeat = tmp_path / "heartbeat"
    client, backend = make_client(supervisor_heartbeat_file=heartbeat, supervisor_heartbeat_max_age_seconds=30)
    with client:
        # no heartbeat file yet: the supervisor is not running
        r = client.get("/live")
        assert r.status_code == 503 and "unreadable" in r.json()["message"]
        heartbeat.touch()
        backend.error = BackendUnavailable("dead")  # a dead or loading model is readiness' business
        assert client.get("/live").status_code == 200
        old = time.time() - 31
        os.utime(heartbeat, (old, old))
        r = client.get("/live")
        assert r.status_code == 503 and "heartbeat" in r.json()["message"] and "31 s old" in r.json()["message"]
    # without a heartbeat file configured (make serve, tests) only the event loop counts
    client, backend = make_client()
    with client:
        backend.error = BackendUnavailable("dead")
        assert client.get("/live").json() == {"status": "alive"}


def test_ping_is_200_as_soon_as_the_startup_is_complete() -> None:
    # GIVEN a model that serves, whose canary takes a moment
    client, backend = make_client(**FAST_CANARY)
    backend.answer_seconds = 0.3
    # WHEN the app has started (uvicorn logs "Application startup complete" at this point)
    with client:
        # THEN the very first /ping is 200: the start waited for the first canary
        assert client.get("/ping").status_code == 200
        assert backend.canaries >= 1


def test_a_model_that_is_down_does_not_hold_the_startup() -> None:
    # GIVEN Triton unreachable: the first canary fails
    client, backend = make_client(**FAST_CANARY)
    backend.error = BackendUnavailable("Triton is unavailable: failed to connect")
    backend.reload_heals = False
    with client:
        # THEN the app started anyway, and /ping says why it cannot serve
        r = client.get("/ping")
        assert r.status_code == 503 and "failed to connect" in r.json()["message"]
