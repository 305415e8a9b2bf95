"""WHISPER_GATEWAY_WORKERS: the budget split between worker processes, and the processes themselves."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.serving.gateway.workers import worker_settings
from whisper_build.workstation.local_triton import free_ports


def test_capacity_queue_and_audio_budget_are_split_and_add_up_to_the_pod_totals() -> None:
    settings = GatewaySettings(workers=3, capacity=10, queue_size=5, max_audio_seconds=600)
    shares = [worker_settings(settings, i) for i in range(3)]
    assert [s.admission.capacity for s in shares] == [4, 3, 3]
    assert [s.admission.queue_size for s in shares] == [2, 2, 1]
    assert [s.effective_audio_budget_seconds for s in shares] == pytest.approx([400.0] * 3)  # 2 × 600 / 3
    assert all(s.requests.max_audio_seconds == 600 and s.server.port == settings.server.port for s in shares)
    with pytest.raises(ValueError, match=r"worker index 3 is not in \[0, 3\)"):
        worker_settings(settings, 3)


def test_one_worker_keeps_the_settings() -> None:
    settings = GatewaySettings(capacity=8)
    assert worker_settings(settings, 0) is settings


def test_more_workers_than_capacity_is_refused_naming_both_settings() -> None:
    with pytest.raises(ValidationError, match="WHISPER_GATEWAY_WORKERS <= WHISPER_GATEWAY_CAPACITY"):
        GatewaySettings(workers=4, capacity=2)


def _metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():  # type: ignore[operator]
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def two_workers() -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    """``python -m whisper_build.serving.gateway`` with two workers and no Triton (port 1 refuses)."""
    port, metrics_port = free_ports(2)
    env = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), WHISPER_GATEWAY_WORKERS="2", WHISPER_GATEWAY_CAPACITY="5",
        WHISPER_GATEWAY_PORT=str(port), WHISPER_GATEWAY_METRICS_PORT=str(metrics_port),
        WHISPER_GATEWAY_TRITON_URL="127.0.0.1:1", WHISPER_GATEWAY_LOG_LEVEL="warning",
    )  # fmt: skip
    process = subprocess.Popen([sys.executable, "-m", "whisper_build.serving.gateway"], env=env, cwd=REPO_ROOT)
    url, metrics = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}/metrics"
    try:
        _wait(lambda: httpx.get(f"{url}/live", timeout=2).status_code == 200, 60, "the workers to serve /live")
        yield process, url, metrics
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _workers(process: subprocess.Popen[bytes]) -> set[int]:
    """Pids of the gateway's live worker processes (a killed one is a zombie until the parent reaps it)."""
    pids = set()
    for child in psutil.Process(process.pid).children():
        try:
            if "multiprocessing.spawn" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                pids.add(child.pid)
        except psutil.NoSuchProcess:
            pass
    return pids


@pytest.mark.slow
def test_workers_share_the_port_sum_their_metrics_heal_and_stop_on_sigterm(
    two_workers: tuple[subprocess.Popen[bytes], str, str],
) -> None:
    process, url, metrics = two_workers
    workers = _workers(process)
    assert len(workers) == 2
    for _ in range(6):  # new connections: the kernel hands them to either worker
        response = httpx.post(f"{url}/invocations", content=b"{}", headers={"Connection": "close"}, timeout=10)
        assert response.status_code == 400 and "audio_data" in response.json()["message"]
    capacity = lambda: _metric(httpx.get(metrics, timeout=5).text, "whisper_gateway_capacity_requests")  # noqa: E731
    # 3 + 2: the pod's capacity, not a worker's (/ping answers once one worker is up; the other
    # publishes its share when its app starts, which lags on a busy box)
    _wait(lambda: capacity() == 5, 30, "both workers' shares of the capacity")
    text = httpx.get(metrics, timeout=5).text
    assert _metric(text, "whisper_gateway_requests_total", route="/invocations", status="400") == 6
    assert _metric(text, "whisper_gateway_inflight_requests") == 0

    os.kill(next(iter(workers)), signal.SIGKILL)  # a crashed worker is started again
    _wait(lambda: len(_workers(process)) == 2 and _workers(process) != workers, 30, "a new worker")
    _wait(lambda: capacity() == 5, 30, "the new worker's share (the dead one's left the sum)")
    assert httpx.get(f"{url}/live", timeout=5).status_code == 200
    text = httpx.get(metrics, timeout=5).text
    assert _metric(text, "whisper_gateway_requests_total", route="/invocations", status="400") == 6  # kept

    children = _workers(process)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert not [pid for pid in children if _running(pid)]


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
