"""Slow clients are bounded: header deadline, minimum upload rate, and uploads do not take request slots.

The protocol layer (whisper_build/serving/gateway/client_timeouts.py) answers 408 to a connection
whose headers or body trickle in; the body-limit middleware counts a request against capacity +
queue only once its body has arrived, with a separate, larger budget for uploads in progress.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import speech_samples as samples
from fake_backend import FakeBackend
from gateway_process import gateway_process
from gateway_server import running_gateway

from whisper_build.serving.gateway.settings import GatewaySettings

WAV = samples.encode(samples.tone(2.0, 16000), 16000, "wav_s16")


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _upload_head(length: int, key: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: gw\r\n{auth}"
        f"Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.fixture
def gateway():
    settings = GatewaySettings(header_timeout_seconds=0.5, body_timeout_seconds=0.5, min_upload_bytes_per_second=500)
    with running_gateway(settings, lambda _: FakeBackend()) as url:
        yield url


def test_an_idle_connection_and_trickled_headers_get_408_and_are_closed(gateway) -> None:
    # GIVEN a connection that sends nothing WHEN the header deadline (0.5 s) passes THEN 408, closed
    with _connect(gateway) as idle:
        started = time.monotonic()
        answer = _read_all(idle)
        assert answer.startswith(b"HTTP/1.1 408") and b"WHISPER_GATEWAY_HEADER_TIMEOUT_SECONDS" in answer
        assert time.monotonic() - started >= 0.45
    # GIVEN headers sent a byte every 0.1 s (bytes keep coming: the keep-alive timer would be reset)
    with _connect(gateway) as trickle:
        started = time.monotonic()
        for byte in b"GET /ping HTTP/1.1\r\nHost: gw\r\nX-Slow: " + b"a" * 200:
            try:
                trickle.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
        answer = _read_all(trickle)
        # THEN it is cut at the deadline, not after all 230 bytes (23 s)
        assert answer.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 10


def test_a_trickled_body_gets_408_while_a_fast_large_upload_is_not_cut(gateway) -> None:
    # GIVEN a body trickled at ~100 B/s (below 500 B/s) after its headers
    with _connect(gateway) as slow:
        slow.sendall(_upload_head(100_000))
        started = time.monotonic()
        try:
            while time.monotonic() - started < 15:
                slow.sendall(b"x" * 10)
                time.sleep(0.1)
        except OSError:
            pass  # closed by the gateway
        answer = _read_all(slow)
    # THEN 408 in the OpenAI shape (a /v1/ path), naming the settings, once the rate-earned time ran out
    assert answer.startswith(b"HTTP/1.1 408") and b"request_timeout" in answer
    assert b"WHISPER_GATEWAY_MIN_UPLOAD_BYTES_PER_SECOND" in answer
    assert 0.5 <= time.monotonic() - started < 10
    # ... while a 4 MB upload (far longer than the 0.5 s grace at 500 B/s, but fast) goes through
    big = WAV + b"\0" * 4_000_000
    files = {"file": ("a.wav", big, "audio/wav")}
    response = httpx.post(f"{gateway}/v1/audio/transcriptions", files=files, data={"model": "whisper-1"}, timeout=30)
    assert response.status_code != 408, response.text


@pytest.mark.integration
@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
def test_80_slow_uploads_with_a_valid_key_leave_normal_requests_at_200(triton_server, tmp_path: Path) -> None:
    # a normal request: a spoken sentence (a tone makes the model fall back through every temperature)
    speech = samples.speak("Please turn off the lights when you leave tonight.", tmp_path / "speech.wav").read_bytes()
    # GIVEN the gateway with 2 workers on real Triton, API keys on, default capacity 8 + queue 64
    with gateway_process(triton_server.settings.grpc_url, tmp_path, api_keys="k1") as gw:
        # WHEN 80 connections with a valid key start uploads and then send 1 byte a second
        stop = threading.Event()
        slow = [_connect(gw.url) for _ in range(80)]
        for sock in slow:
            sock.sendall(_upload_head(1_000_000, key="k1"))

        def trickle() -> None:
            while not stop.wait(1.0):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.sendall(b"x")

        worker = threading.Thread(target=trickle, daemon=True)
        worker.start()
        try:
            time.sleep(1.0)  # every slow upload is in (its headers parsed, its body pending)
            # THEN normal requests with the same key are served, one after another, while they last
            statuses = []
            headers = {"Authorization": "Bearer k1"}
            for _ in range(6):
                files = {"file": ("a.wav", speech, "audio/wav")}
                r = httpx.post(f"{gw.url}/v1/audio/transcriptions", files=files, headers=headers, timeout=60)
                statuses.append(r.status_code)
            assert statuses == [200] * 6, statuses
        finally:
            stop.set()
            worker.join(timeout=10)
            for sock in slow:
                sock.close()


def test_uploads_beyond_their_budget_are_refused_unread_and_bytes_are_budgeted() -> None:
    import asyncio

    from fastapi.responses import JSONResponse

    from whisper_build.serving.gateway.body_limit import BodyLimitMiddleware

    async def scenario() -> None:
        seen: list[int] = []

        async def inner(scope, receive, send) -> None:
            size, more = 0, True
            while more:
                message = await receive()
                size, more = size + len(message["body"]), message["more_body"]
            seen.append(size)
            await JSONResponse({"code": 0})(scope, receive, send)

        limited = BodyLimitMiddleware(inner, 10_000, "X", max_concurrent=5, max_uploads=1, max_buffered_bytes=150)
        opened, release = asyncio.Event(), asyncio.Event()

        async def stalled_body():  # an upload that has sent its headers and 10 bytes, then waits
            yield b"a" * 10
            opened.set()
            await release.wait()
            yield b"a" * 10

        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=limited), base_url="http://gw") as client:
            first = asyncio.create_task(client.post("/invocations", content=stalled_body()))
            await asyncio.wait_for(opened.wait(), 10)
            # a second upload while the only upload slot is taken: 429, unread
            busy = await client.post("/invocations", content=b"b" * 20)
            assert busy.status_code == 429 and "1 uploads in progress" in busy.json()["message"]
            release.set()
            assert (await first).status_code == 200
            # a body larger than the byte budget (150) is refused, a smaller one served
            assert (await client.post("/invocations", content=b"c" * 200)).status_code == 429
            assert (await client.post("/invocations", content=b"d" * 100)).status_code == 200
        assert seen == [20, 100]
        assert limited._buffered == 0 and limited._uploading == 0  # everything given back

    asyncio.run(scenario())
