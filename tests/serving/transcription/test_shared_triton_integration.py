"""Another client keeps a shared Triton busy: the idle gateway's /ping stays 200 (real CPU Triton, tiny.en).

A second client — as bulk workers do, at ``contract.BULK_PRIORITY``, half a batch per call
(``whisper_build.bulk.worker.bulk_plan``) — keeps two calls of 8 speech windows in flight, while
the gateway has no request of its own. Triton batches them (16 windows; the engine is slowed to
:data:`SECONDS_PER_WINDOW` from outside, tests/support/slow_engine.py, so an execution takes ≥ 8 s on any CPU,
far longer than the canary timeout); the gateway's canary waits behind those batches, the model
scheduler's metrics (queued windows, finished windows) say the model is busy, so /ping, polled every
0.5 s, never turns 503 and the busy state is visible in ``whisper_gateway_model_busy_with_others``
and the gateway's log. (Two calls that fill a batch also keep a canary out of the first one: a
canary batched into another client's long first execution, with nothing queued, is the case
the scheduler's metrics cannot tell from a hang — docs/gateway.md ``GET /ping``.)
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile
import speech_samples as samples
from gateway_process import gateway_process
from slow_engine import SlowEngineControl

from whisper_build.serving import contract
from whisper_build.serving.prompt import parse_prompt
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import TritonBackend
from whisper_build.workstation.local_triton import LocalTriton

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUSY_SECONDS = 30.0
"""How long the other client keeps Triton busy."""


TEXT = "Good morning everyone, let's start with a quick review of last week's numbers."
"""About 5 s of speech at espeak-ng's pace."""
CANARY = {"canary_interval_seconds": "1", "canary_timeout_seconds": "2", "stale_after_seconds": "4"}
"""A canary timeout well below one batch (≥ 8 s: 16 windows × :data:`SECONDS_PER_WINDOW`)."""
SECONDS_PER_WINDOW = 0.5
"""The engine's added time per window."""
WINDOWS_PER_CALL = 8
"""Half the test model's ``max_batch_size`` (16), as bulk workers send."""


def _other_client(url: str, window: np.ndarray, stop: threading.Event, batches: list[float]) -> None:
    """Two bulk-priority calls of ``window`` × 8 in flight until ``stop``; each call's seconds in ``batches``."""

    async def calls() -> None:
        backend = TritonBackend(url, "whisper", priority=contract.BULK_PRIORITY)
        request = WindowRequest(parse_prompt("", None))

        async def one_slot() -> None:
            while not stop.is_set():
                started = time.monotonic()
                await backend.infer([window] * WINDOWS_PER_CALL, request, 300.0)
                batches.append(time.monotonic() - started)

        try:
            await asyncio.gather(one_slot(), one_slot())
        finally:
            await backend.close()

    asyncio.run(calls())


def _busy_gauge(metrics_url: str) -> float:
    match = re.search(r"^whisper_gateway_model_busy_with_others (\S+)$", httpx.get(metrics_url).text, re.M)
    return float(match.group(1)) if match else -1.0


@pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)")
@pytest.mark.xfail(
    reason="was one /ping 503 while another client's 8 s batch runs: staleness judged while a timed-out canary's "
    "load read was still pending (fixed: staleness waits for the verdict; 3 of 3 passed under load, 2026-12-07); "
    "kept non-strict until full-suite runs show it stable",
    strict=False,
)
def test_ping_stays_200_while_another_client_keeps_the_shared_triton_busy(
    slow_triton_server: tuple[LocalTriton, SlowEngineControl], tmp_path: Path
) -> None:
    triton_server, control = slow_triton_server
    metrics = triton_server.settings.metrics_url
    with (
        control.delay(SECONDS_PER_WINDOW),
        gateway_process(triton_server.settings.grpc_url, tmp_path, triton_metrics_url=metrics, **CANARY) as gateway,
    ):
        # GIVEN another client keeping the model busy with long bulk-priority batches
        speech, _ = soundfile.read(samples.speak(TEXT, tmp_path / "speech.wav"), dtype="float32")
        window = speech[: 30 * 16_000]  # one window
        stop, batches = threading.Event(), []
        other = threading.Thread(target=_other_client, args=(triton_server.settings.grpc_url, window, stop, batches))
        other.start()
        polls, busy = [], []
        started = time.monotonic()
        try:
            # THEN /ping answers 200 every 0.5 s throughout, and the gateway shows it knows the model is busy
            while time.monotonic() - started < BUSY_SECONDS or not batches:
                assert other.is_alive(), "the other client stopped"
                polls.append(httpx.get(f"{gateway.url}/ping", timeout=5).status_code)
                busy.append(_busy_gauge(gateway.metrics))
                time.sleep(0.5)
                assert time.monotonic() - started < 120, "no batch of the other client completed in 120 s"
        finally:
            stop.set()
            other.join(timeout=180)
        print(
            f"\nother client's calls: {[round(b, 1) for b in batches]} s; /ping polls: { {s: polls.count(s) for s in set(polls)} }"
        )
        assert max(batches) > float(CANARY["canary_timeout_seconds"]), batches  # a canary waited past its timeout
        assert set(polls) == {200}, polls
        assert 1.0 in busy, busy
        assert "busy with other clients' work" in gateway.log_text()
