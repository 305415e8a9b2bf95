"""The yield gate (whisper_build.bulk.yielding): bulk Triton calls wait while a sharing gateway has requests.

Real prometheus-client HTTP endpoints for the gateway's gauge (one process, and the gateway's own
multiprocess exposition over two worker processes' files); a TCP port that does not speak HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from bulk_support import REPO_ROOT, until
from fake_backend import FakeBackend
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from whisper_build.bulk.yielding import GATEWAY_INFLIGHT, YieldGate, YieldingBackend, read_gauge
from whisper_build.contracts.live_metrics import SESSIONS_ACTIVE
from whisper_build.serving.gateway.metrics import start_metrics_server
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.workstation.local_triton import free_ports


@pytest.fixture
def gateway_gauge() -> Iterator[tuple[Gauge, str]]:
    registry = CollectorRegistry()
    gauge = Gauge(GATEWAY_INFLIGHT, "in flight", registry=registry)
    port = free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    yield gauge, f"http://127.0.0.1:{port}/metrics"
    server.shutdown()
    thread.join(5)


GAUGE_WRITER = """
import sys
from whisper_build.serving.gateway.metrics import GatewayMetrics
GatewayMetrics(capacity=1).inflight.inc(int(sys.argv[1]))
"""


@pytest.mark.integration
def test_read_gauge_sums_a_multiprocess_gateways_workers(tmp_path, monkeypatch) -> None:
    """The gateway parent's /metrics over two worker processes' files (prometheus-client livesum)."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(REPO_ROOT)}
    for inflight in (1, 2):
        subprocess.run([sys.executable, "-c", GAUGE_WRITER, str(inflight)], env=env, check=True, timeout=120)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    server, thread = start_metrics_server(None, "127.0.0.1", 0)
    try:
        assert read_gauge(f"http://127.0.0.1:{server.server_port}/metrics", GATEWAY_INFLIGHT, 10.0) == 3
    finally:
        server.shutdown()
        thread.join(5)


@pytest.fixture
def not_http() -> Iterator[str]:
    """A TCP port that answers every connection with a line that is not HTTP (say, a gRPC port)."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(4096)
                connection.sendall(b"garbage\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    listener.close()


@pytest.mark.integration
def test_read_gauge_is_none_when_unreachable_or_not_http(not_http) -> None:
    assert read_gauge(f"http://127.0.0.1:{free_ports(1)[0]}/metrics", GATEWAY_INFLIGHT, 1.0) is None
    assert read_gauge(not_http, GATEWAY_INFLIGHT, 5.0) is None


def test_a_gate_url_that_is_not_http_fails_at_start() -> None:
    with pytest.raises(ValueError, match="http"):
        YieldGate("127.0.0.1:8081/metrics")


@pytest.mark.integration
def test_an_unreadable_gateway_is_logged_once_and_polled_on(not_http, caplog) -> None:
    def unreadable() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "unreadable" in r.getMessage()]

    async def scenario() -> YieldGate:
        gate = YieldGate(not_http, poll_seconds=0.05)
        gate.start()
        await until(lambda: len(unreadable()) >= 3, 120)  # three readings, however slow this CPU is
        await gate.close()
        return gate

    with caplog.at_level(logging.DEBUG, logger="whisper.bulk"):
        asyncio.run(scenario())
    records = unreadable()
    assert [r.levelno for r in records].count(logging.WARNING) == 1
    assert len(records) >= 3  # the poller kept reading (one debug line per reading)


class RecordingGate(YieldGate):
    """A YieldGate that records each reading (monotonic time, value)."""

    readings: list[tuple[float, float | None]]

    def observe(self, inflight: float | None) -> None:
        self.readings = [*getattr(self, "readings", []), (time.monotonic(), inflight)]
        super().observe(inflight)


@pytest.mark.integration
def test_bulk_calls_wait_while_the_gateway_has_requests_then_for_the_hold(gateway_gauge) -> None:
    gauge, url = gateway_gauge

    async def scenario() -> tuple[float, float, RecordingGate]:
        gate = RecordingGate(url, hold_seconds=1.5, poll_seconds=0.05, max_wait_seconds=60)
        backend = FakeBackend()
        yielding = YieldingBackend(backend, gate)  # type: ignore[arg-type]
        gauge.set(1)
        gate.start()
        await until(lambda: not gate.is_open)  # the first reading
        call = asyncio.create_task(yielding.infer([], WindowRequest(), 10.0))
        await asyncio.sleep(1.0)
        assert not backend.arrivals  # held while the gateway has a request
        dropped = time.monotonic()
        gauge.set(0)
        await asyncio.wait_for(call, 30)
        await yielding.close()
        return dropped, backend.arrivals[0][0], gate

    dropped, called, gate = asyncio.run(scenario())
    last_busy = max(at for at, value in gate.readings if value)
    assert called >= last_busy + gate.hold_seconds  # the hold after the last reading with a request
    assert called - dropped >= 0.5  # and it was not a stale reading: 1 s of slack for a slow read


@pytest.mark.integration
def test_the_gate_lets_one_call_through_after_the_longest_wait_and_opens_without_a_gateway(gateway_gauge) -> None:
    gauge, url = gateway_gauge

    async def scenario() -> tuple[float, float]:
        gauge.set(2)
        # hold 1 s: a reading delayed by a loaded CPU (the other test worker) must not open the gate, or two
        # waiters would go together for a reason other than the one this test checks
        busy = YieldGate(url, hold_seconds=1.0, poll_seconds=0.05, max_wait_seconds=0.5)
        busy.start()
        await until(lambda: not busy.is_open)
        waited = await busy.wait()
        # calls that began waiting together go one per max_wait_seconds while the gateway stays busy
        started = time.monotonic()
        gone: list[float] = []

        async def one() -> None:
            await busy.wait()
            gone.append(time.monotonic() - started)

        await asyncio.wait_for(asyncio.gather(one(), one(), one()), 20)
        await busy.close()
        assert gone[1] - gone[0] >= 0.45 and gone[2] - gone[1] >= 0.45, gone
        away = YieldGate(f"http://127.0.0.1:{free_ports(1)[0]}/metrics", poll_seconds=0.05)
        away.start()
        await asyncio.sleep(0.3)
        nothing = await away.wait()
        await away.close()
        return waited, nothing

    waited, nothing = asyncio.run(scenario())
    assert 0.5 <= waited < 5.0
    assert nothing == 0.0


@pytest.mark.integration
def test_the_first_call_yields_and_an_idle_gate_stops_polling(gateway_gauge, monkeypatch) -> None:
    import whisper_build.bulk.yielding as yielding_module

    monkeypatch.setattr(yielding_module, "IDLE_STOP_SECONDS", 0.5)
    gauge, url = gateway_gauge

    async def scenario() -> tuple[float, bool, int]:
        gauge.set(1)
        gate = RecordingGate(url, hold_seconds=0.1, poll_seconds=0.05, max_wait_seconds=0.5)
        waited = await gate.wait()  # no poller yet: the call reads the gauge itself first
        gauge.set(0)
        await until(lambda: gate._poller is None, 10)  # nobody asked for 0.5 s: the poller ended
        polling_after_idle = gate._poller is not None
        readings = len(gate.readings)
        await asyncio.sleep(0.5)
        return waited, polling_after_idle, len(gate.readings) - readings

    waited, polling_after_idle, later_readings = asyncio.run(scenario())
    assert waited >= 0.5  # the first call waited (up to the longest wait) for the request in flight
    assert not polling_after_idle and later_readings == 0


@pytest.mark.integration
def test_a_call_waiting_longer_than_the_idle_stop_keeps_the_gate_reading(gateway_gauge, monkeypatch) -> None:
    """The poller stops when no call asks; a call still waiting is asking (else the stale gate opened)."""
    import whisper_build.bulk.yielding as yielding_module

    monkeypatch.setattr(yielding_module, "IDLE_STOP_SECONDS", 0.3)
    gauge, url = gateway_gauge

    async def scenario() -> tuple[bool, float]:
        gauge.set(1)
        gate = YieldGate(url, hold_seconds=0.2, poll_seconds=0.05, max_wait_seconds=60)
        call = asyncio.create_task(gate.wait())
        await asyncio.sleep(1.5)  # five idle stops, seven holds: still held while the gateway is busy
        held = not call.done()
        gauge.set(0)
        waited = await asyncio.wait_for(call, 10)
        await gate.close()
        return held, waited

    held, waited = asyncio.run(scenario())
    assert held and waited >= 1.5


def test_open_live_sessions_do_not_hold_bulk() -> None:
    """A gateway with live sessions open and no request in flight leaves the gate open (sessions are KEDA's, not its)."""
    registry = CollectorRegistry()
    Gauge(GATEWAY_INFLIGHT, "in flight", registry=registry).set(0)
    Gauge(SESSIONS_ACTIVE, "open live sessions", registry=registry).set(12)
    port = free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        gate = YieldGate(f"http://127.0.0.1:{port}/metrics", poll_seconds=0.05)
        asyncio.run(gate.read())
        assert gate.is_open and read_gauge(gate.url, SESSIONS_ACTIVE, 5.0) == 12
    finally:
        server.shutdown()
        thread.join(5)
