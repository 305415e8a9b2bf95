"""Work nobody waits for stops: a client disconnect and a request timeout stop the model within one window group.

Real Triton (CPU tiny.en, fallback off) and the gateway with 2 workers; the measure is the model's own
counter ``whisper_model_engine_windows_total`` (windows handed to the engine) on Triton's metrics port.
The engine is slowed to :data:`SECONDS_PER_WINDOW` (tests/support/slow_engine.py), so the file takes at least
``FILE_WINDOWS`` × that, far past the client's 3 s and the 8 s timeout on any CPU; "settled" means the
gateway has no request in progress and the engine no call (not a quiet spell, which a slow engine
call could outlast).
"""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx
import pytest
from gateway_process import gateway_process
from long_audio import tone_flac
from slow_engine import SlowEngineControl, wait_until_idle

from whisper_build.serving.triton_model.cancellation import WINDOWS_METRIC
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = pytest.mark.integration

GROUP = 2
"""Windows per Triton call in these tests (WHISPER_GATEWAY_WINDOW_GROUP_SIZE): many groups per file."""
FILE_WINDOWS = 20
"""The 10-minute tone: 20 windows of 30 s, every one non-silent (decoded once each: fallback off)."""
SECONDS_PER_WINDOW = 1.5
"""The engine's added time per window: a group of 2 takes ≥ 3 s, the file ≥ 30 s."""


def _metric(metrics_url: str, pattern: str) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    match = re.search(rf"^{pattern} (\S+)$", text, flags=re.MULTILINE)
    assert match, f"{pattern} not on Triton's metrics port"
    return float(match.group(1))


def _windows(metrics_url: str) -> float:
    return _metric(metrics_url, WINDOWS_METRIC)


def _cancelled(metrics_url: str) -> float:
    """Triton's own count of requests its clients cancelled."""
    return _metric(metrics_url, r'nv_inference_request_failure\{model="whisper",reason="CANCELED",version="1"\}')


def _settled(metrics_url: str, control: SlowEngineControl, gateway_metrics: str) -> float:
    """The counter once the gateway has no request in progress and the engine no call."""
    wait_until_idle(control, gateway_metrics)
    return _windows(metrics_url)


def _post_then_close(url: str, body: bytes, after_s: float) -> None:
    host, port = url.removeprefix("http://").split(":")
    head = (
        f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: gw\r\nContent-Length: {len(body)}\r\n"
        "Content-Type: multipart/form-data; boundary=b\r\n\r\n"
    ).encode()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + body)
        time.sleep(after_s)  # the client gives up 3 s in (no answer read)


def _multipart(audio: bytes) -> bytes:
    return (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="long.flac"\r\n'
        b"Content-Type: audio/flac\r\n\r\n" + audio + b"\r\n--b--\r\n"
    )


def test_a_disconnect_and_a_request_timeout_stop_the_model_within_one_window_group(
    slow_triton_server: tuple[LocalTriton, SlowEngineControl], tmp_path: Path
) -> None:
    server, control = slow_triton_server
    metrics = server.settings.metrics_url
    audio = tone_flac(10).read_bytes()
    with (
        control.delay(SECONDS_PER_WINDOW),
        gateway_process(
            server.settings.grpc_url,
            tmp_path,
            window_group_size=str(GROUP),
            request_timeout_seconds="8",
            predicted_rtf="0.0001",
        ) as gw,
    ):
        cancels = 0.0
        for case in ("disconnect", "timeout"):
            before, cancelled = _settled(metrics, control, gw.metrics), _cancelled(metrics)
            engine_before = control.windows_started()
            # WHEN the client leaves 3 s in / the request hits its 8 s timeout
            if case == "disconnect":
                _post_then_close(gw.url, _multipart(audio), after_s=3.0)
            else:
                files = {"file": ("long.flac", audio, "audio/flac")}
                r = httpx.post(f"{gw.url}/v1/audio/transcriptions", files=files, timeout=60)
                assert r.status_code == 504 and r.headers["x-should-retry"] == "false", r.text
            at_end = _windows(metrics)
            # THEN the model computes at most the group in flight then, and never the whole file
            after = _settled(metrics, control, gw.metrics)
            # (the condition held: the engine was still decoding this file when the client's end came)
            assert 0 < control.windows_started() - engine_before == after - before < FILE_WINDOWS
            print(f"\n{case}: windows before the end {at_end - before:g}, after it {after - at_end:g}")
            assert after - at_end <= GROUP, (case, before, at_end, after, gw.log_text()[-3000:])
            assert after - before < FILE_WINDOWS, (case, before, after)
            cancels += _cancelled(metrics) - cancelled
        print(f"requests Triton counted CANCELED (a call in flight at the end): {cancels:g}")
