"""The pod under pressure, through real Triton (CPU tiny.en) and the gateway's worker processes.

* A long request keeps the model busy: ``/ping``, polled every second on fresh connections (so
  every worker answers some), stays 200 — busy is not dead (health judged per pod). The engine is
  slowed from outside (tests/support/slow_engine.py, fallback off) so the request keeps it busy at least
  :data:`BUSY_AT_LEAST_S` on any CPU, longer than the canary's timeout; the test checks it did.
* The python stub is killed with 8 requests in flight: none gets 502; at least one completes
  through the single retry on the reloaded model (counted in ``whisper_gateway_window_retries_total``),
  the others get 503 with ``Retry-After``; ``/ping`` turns 503 within 10 s and back to 200.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
import speech_samples as samples
from fixtures_triton import cpu_triton_settings, no_fallback
from gateway_process import gateway_process
from long_audio import tone_flac
from slow_engine import slow_triton

from whisper_build.workstation.local_triton import LocalTriton

pytestmark = pytest.mark.integration

TEXT = "Please remember to turn off the lights when you leave the office tonight."
LONG_WINDOWS = 2
"""The long request: one minute of tone, at least two windows (≤ 30 s each), one decode each (fallback off)."""
BUSY_AT_LEAST_S = 10.0
"""Engine time of the long request: at least ``LONG_WINDOWS`` × :data:`BUSY_SECONDS_PER_WINDOW`."""
BUSY_SECONDS_PER_WINDOW = BUSY_AT_LEAST_S / LONG_WINDOWS  # 5 s
KILL_SECONDS_PER_WINDOW = 0.5
"""While the stub is killed: a batch of the 8 short requests takes ≥ 4 s, so they are in flight 1.5 s in."""


def _post(url: str, audio: bytes, name: str, out: list[httpx.Response], timeout: float = 600) -> None:
    files = {"file": (name, audio, "audio/flac" if name.endswith(".flac") else "audio/wav")}
    out.append(httpx.post(f"{url}/v1/audio/transcriptions", files=files, timeout=timeout))


def _ping(url: str, reasons: list[str] | None = None) -> int:
    """``/ping``'s status on a new connection (0: no answer); a non-200's body goes to ``reasons``."""
    try:
        answer = httpx.get(f"{url}/ping", timeout=5)
    except httpx.HTTPError as exc:
        status = 0
        if reasons is not None:
            reasons.append(repr(exc))
    else:
        status = answer.status_code
        if reasons is not None and status != 200:
            reasons.append(answer.text)
    return status


def _health_lines(*logs: str) -> list[str]:
    """The lines of the gateway's and Triton's logs that say why the model was judged unable to serve."""
    marks = ("cannot serve", "engine core", "busy with other", "reloading", "Stub process", "Killed")
    return [line[-300:] for text in logs for line in text.splitlines() if any(m in line for m in marks)][-20:]


def _retries_ok(metrics_url: str) -> float:
    match = re.search(
        r'^whisper_gateway_window_retries_total\{outcome="ok"\} (\S+)$', httpx.get(metrics_url).text, re.M
    )
    return float(match.group(1)) if match else 0.0


def _kill_stub(server: LocalTriton) -> None:
    assert server.process is not None
    stubs = [p for p in psutil.Process(server.process.pid).children() if p.name().startswith("triton_python_b")]
    assert stubs
    for stub in stubs:
        stub.send_signal(signal.SIGKILL)


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
@pytest.mark.parametrize("workers", [pytest.param(2, id="2-workers"), pytest.param(4, id="4-workers")])
def test_busy_is_not_dead_and_a_killed_stub_costs_no_502(tmp_path: Path, workers: int) -> None:
    short = samples.speak(TEXT, tmp_path / "speech.wav").read_bytes()
    with (
        slow_triton(no_fallback(cpu_triton_settings()), tmp_path / "slow") as (server, control),
        gateway_process(server.settings.grpc_url, tmp_path, workers=workers, request_timeout_seconds="900") as gw,
    ):
        # GIVEN a long request keeping the model busy (at least BUSY_AT_LEAST_S of engine time)
        control.seconds_per_window = BUSY_SECONDS_PER_WINDOW
        long: list[httpx.Response] = []
        thread = threading.Thread(target=_post, args=(gw.url, tone_flac(1).read_bytes(), "long.flac", long))
        started = time.monotonic()
        thread.start()
        # THEN /ping answers 200 every second while it runs, from whichever worker the connection reaches
        polls, reasons = [], []
        while thread.is_alive():
            polls.append(_ping(gw.url, reasons))
            time.sleep(1.0)
        thread.join()
        busy = time.monotonic() - started
        assert long and long[0].status_code == 200, long[0].text if long else "no answer"
        print(f"\nbusy {busy:.0f} s, /ping polls {len(polls)}: {sorted(set(polls))}")
        assert control.windows_started() >= LONG_WINDOWS and busy >= BUSY_AT_LEAST_S, busy  # the condition held
        why = (polls, reasons[:3], _health_lines(gw.log_text(), server.log_tail(400)))
        assert len(polls) >= 10 and set(polls) == {200}, why  # polled throughout, never unready

        control.seconds_per_window = KILL_SECONDS_PER_WINDOW

        # WHEN the stub is killed with 8 requests in flight
        answers: list[httpx.Response] = []
        clients = [threading.Thread(target=_post, args=(gw.url, short, f"{i}.wav", answers, 120)) for i in range(8)]
        for client in clients:
            client.start()
        time.sleep(1.5)
        _kill_stub(server)
        killed = time.monotonic()
        # THEN /ping turns 503 within 10 s
        while _ping(gw.url) != 503:
            assert time.monotonic() - killed < 10, "/ping still 200 10 s after the stub died"
            time.sleep(0.2)
        unready = time.monotonic() - killed
        for client in clients:
            client.join(timeout=180)
        statuses = sorted(r.status_code for r in answers)
        print(f"/ping 503 after {unready:.1f} s; the 8 requests: {statuses}")
        # ... none of the 8 gets 502; those not served get 503 with Retry-After; one at least was retried
        assert len(answers) == 8 and 502 not in statuses, statuses
        assert set(statuses) <= {200, 503}, [r.text for r in answers if r.status_code not in (200, 503)]
        assert all("retry-after" in r.headers for r in answers if r.status_code == 503)
        assert 200 in statuses and _retries_ok(gw.metrics) >= 1, (statuses, httpx.get(gw.metrics).text[-2000:])
        # ... and the pod heals: /ping 200 again, transcriptions succeed
        while _ping(gw.url) != 200:
            assert time.monotonic() - killed < 120, "/ping not 200 again within 120 s"
            time.sleep(0.5)
        again: list[httpx.Response] = []
        _post(gw.url, short, "again.wav", again, 120)
        assert again[0].status_code == 200, again[0].text
