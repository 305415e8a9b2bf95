"""Live transcription's completed text against the file endpoint on 301 words (official client, CPU Triton).

The session is streamed faster than real time, so audio time decides turns and updates and the run is
deterministic. Docs: docs/gateway.md, "Live transcription"; docs/benchmarks.md, "Live sessions".
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
from typing import Any

import pytest
import speech_samples as samples
from fixtures_triton import cpu_triton_settings
from gateway_server import running_gateway
from openai import AsyncOpenAI

from benchmarks import live
from whisper_build.serving.gateway.settings import GatewaySettings
from whisper_build.workstation.local_triton import LocalTriton

OPT_IN = "WHISPER_TEST_LIVE_WER"
"""Set to 1 to run this module (``make test-live-wer``): ~15 min of one xdist worker on 2 cores, a known regression."""

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox"),
    pytest.mark.skipif(
        os.environ.get(OPT_IN) != "1",
        reason="15 min on 2 cores and a known regression (live WER 16.3 % vs 13.0 %): make test-live-wer runs it",
    ),
]

KEY = "sk-live-wer"


@pytest.fixture(scope="module")
def gateway() -> Any:
    """A gateway over a Triton of its own: the session's shared one died twice during this test in full
    suite runs (cause not found yet), taking every later module of that worker with it."""
    with LocalTriton(cpu_triton_settings()) as triton:
        settings = GatewaySettings(
            triton_url=triton.settings.grpc_url, api_keys=KEY, realtime_update_seconds=1.0, body_timeout_seconds=1.0
        )
        with running_gateway(settings) as url:
            yield url


async def _events(conn: Any, until: str, idle_seconds: float) -> list[dict[str, Any]]:
    """Events up to ``until``; fails when none comes for ``idle_seconds`` (no progress), however long the whole takes."""
    out: list[dict[str, Any]] = []
    while not out or out[-1]["type"] != until:
        async with asyncio.timeout(idle_seconds):
            out.append(json.loads(await conn.recv_bytes()))
    return out


@pytest.mark.slow
@pytest.mark.xfail(
    strict=False,
    reason="known regression, open: on an idle 2-core AMD EPYC the live WER was 16.3 % against the file "
    "endpoint's 13.0 % (2026-12-07); in full suite runs the Triton under this session died mid-test",
)
def test_completed_text_of_300_words_is_within_one_wer_point_of_the_file_endpoint(gateway, tmp_path) -> None:
    # ~121 decodes of up to 30 s (every update awaited), each after up to ~60 forced words: 206 s alone and
    # ~370 s at load 3.5 where it was written, longer on a slower CPU: no wall-clock bound on the whole. The
    # wait is bounded by progress: each event comes within one decode of the previous, and one decode (≤ 30 s
    # of audio) costs less than the file endpoint's decode of the whole ~2 min, timed first on this machine.
    # GIVEN benchmarks/live.py's speech (24 sentences, 301 words, 1.5 s pauses) streamed faster than real
    # time (audio time decides turns and updates, so the run is deterministic) and sent to the file endpoint
    pcm, text, _spans = live.utterance(tmp_path)

    async def run() -> tuple[list[dict[str, Any]], float]:
        started = time.monotonic()
        file_wer = await live.file_wer(gateway, KEY, pcm, text)
        idle_seconds = 60.0 + 4 * (time.monotonic() - started)
        async with AsyncOpenAI(api_key=KEY, base_url=f"{gateway}/v1", max_retries=0).realtime.connect(
            extra_query={"intent": "transcription"}
        ) as conn:
            await conn.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": {"type": "server_vad"},
                "transcription": {"model": "whisper-1", "language": "en"}}}}})  # fmt: skip
            for start in range(0, len(pcm), 4800):
                chunk = base64.b64encode(pcm[start : start + 4800]).decode()
                await conn.send({"type": "input_audio_buffer.append", "audio": chunk})
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.clear"}))  # answered after every turn
            return await _events(conn, "input_audio_buffer.cleared", idle_seconds), file_wer

    events, file_wer = asyncio.run(run())
    completed = [e for e in events if e["type"].endswith(".completed")]
    deltas: dict[str, str] = {}
    for e in events:
        if e["type"].endswith(".delta"):
            deltas[e["item_id"]] = deltas.get(e["item_id"], "") + e["delta"]
    # THEN every turn's completed text is its deltas joined, and the session's WER is within 1 point of the file's
    assert len(completed) >= 20 and all(deltas.get(c["item_id"], "") == c["transcript"] for c in completed)
    live_wer = live.wer(text, " ".join(c["transcript"] for c in completed))
    assert live_wer <= file_wer + 0.01, (live_wer, file_wer, [c["transcript"] for c in completed])
