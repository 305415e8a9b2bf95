"""Live transcription end to end: the official ``openai`` client against a real gateway and the session's Triton (tiny.en).

espeak-ng speech is streamed faster than real time as 24 kHz PCM16 and G.711 μ-law (8 kHz: tiny.en
hears it worse); audio time, not wall time, decides turns and deltas, so "deltas before the speech
ended" is checked on audio time: deltas sent before ``speech_stopped`` decoded audio inside the speech.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import time
import wave
from typing import Any

import httpx
import numpy as np
import pytest
import speech_samples as samples
from gateway_server import running_gateway
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosed, InvalidStatus

from whisper_build.serving import contract
from whisper_build.serving.gateway.settings import GatewaySettings

pytestmark = pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox")

KEY = "sk-live-test"
TEXT = " ".join(samples.SENTENCES[:2])
SHORT = "Good morning everyone."
"""The concurrent sessions' utterance: short, so that 8 sessions cost few decodes on a CPU."""
PCM = {"type": "audio/pcm", "rate": 24000}
PCMU = {"type": "audio/pcmu"}


@pytest.fixture(scope="module")
def gateway(triton_server) -> Any:
    settings = GatewaySettings(
        triton_url=triton_server.settings.grpc_url,
        api_keys=KEY,
        realtime_max_sessions=9,
        realtime_max_event_bytes=256 * 1024,
        realtime_update_seconds=1.0,
        body_timeout_seconds=1.0,  # a WebSocket outlives the slow-upload timer of its upgrade request
    )
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> dict[str, bytes]:
    """TEXT spoken, with 0.5 s of silence before and 1.5 s after: raw 24 kHz PCM16 and 8 kHz μ-law."""
    folder = tmp_path_factory.mktemp("live")
    wav = samples.speak(TEXT, folder / "speech.wav", rate=24000)
    padded = folder / "padded.wav"
    subprocess.run(["sox", str(wav), str(padded), "pad", "0.5", "2"], check=True)
    with wave.open(str(padded)) as w:
        pcm = w.readframes(w.getnframes())
    short = samples.speak(SHORT, folder / "short.wav", rate=24000)
    short_ulaw = folder / "short.ul"
    subprocess.run(["sox", str(short), "-r", "8000", "-e", "u-law", "-t", "raw", str(short_ulaw), "pad", "0", "2"],
                   check=True)  # fmt: skip
    with wave.open(str(short)) as w:
        one = w.readframes(w.getnframes()) + bytes(48000 * 2)  # then 2 s of silence
    return {"audio/pcm": pcm, "short/pcm": one, "short/pcmu": short_ulaw.read_bytes(), "wav/pcm": padded.read_bytes()}


def _client(url: str, key: str = KEY) -> AsyncOpenAI:
    return AsyncOpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0)


ONE_TURN = {"type": "server_vad", "silence_duration_ms": 1200}
"""espeak-ng's pause between sentences is shorter: the three sentences are one turn."""


def _update(fmt: dict[str, Any], turn_detection: Any = ONE_TURN) -> dict[str, Any]:
    audio: dict[str, Any] = {"format": fmt, "transcription": {"model": "whisper-1", "language": "en"}}
    audio["turn_detection"] = turn_detection
    return {"type": "session.update", "session": {"type": "transcription", "audio": {"input": audio}}}


async def _events(conn: Any, until: str, count: int = 1, timeout: float = 600) -> list[dict[str, Any]]:
    """Raw server events up to and including the ``count``-th of type ``until``."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        while sum(e["type"] == until for e in out) < count:
            out.append(json.loads(await conn.recv_bytes()))
    return out


async def _stream(conn: Any, audio: bytes, chunk: int) -> None:
    for start in range(0, len(audio), chunk):
        await conn.send(
            {"type": "input_audio_buffer.append", "audio": base64.b64encode(audio[start : start + chunk]).decode()}
        )


async def _transcribe(
    url: str, fmt: dict[str, Any], audio: bytes, chunk: int, timeout: float = 600
) -> list[dict[str, Any]]:
    async with _client(url).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = json.loads(await conn.recv_bytes())
        assert created["type"] == "session.created" and created["session"]["id"].startswith("sess_")
        await conn.send(_update(fmt))
        await _stream(conn, audio, chunk)
        return await _events(conn, "conversation.item.input_audio_transcription.completed", timeout=timeout)


def test_speech_gives_confirmed_deltas_during_speech_and_a_completed_equal_to_them(gateway, speech) -> None:
    fmt = PCM
    events = asyncio.run(_transcribe(gateway, fmt, speech["audio/pcm"], 4800))  # 100 ms appends, sent at once
    kinds = [e["type"] for e in events]
    assert kinds[0] == "session.updated"
    started = next(e for e in events if e["type"] == "input_audio_buffer.speech_started")
    stopped = next(e for e in events if e["type"] == "input_audio_buffer.speech_stopped")
    assert 0 < started["audio_start_ms"] <= 500 < stopped["audio_end_ms"]
    assert kinds.index("input_audio_buffer.speech_stopped") < kinds.index("input_audio_buffer.committed")
    deltas = [e["delta"] for e in events if e["type"] == "conversation.item.input_audio_transcription.delta"]
    completed = events[-1]
    assert completed["item_id"] == started["item_id"] == stopped["item_id"]
    assert "".join(deltas) == completed["transcript"]
    offline = httpx.post(f"{gateway}/v1/audio/transcriptions", headers={"Authorization": f"Bearer {KEY}"},
                         files={"file": ("a.wav", speech["wav/pcm"])}, timeout=120)  # fmt: skip
    live_wer, file_wer = samples.wer(TEXT, completed["transcript"]), samples.wer(TEXT, offline.json()["text"])
    assert live_wer <= file_wer + 0.1, (completed["transcript"], offline.json()["text"])
    # deltas decoded during the speech, by audio time: those sent before speech_stopped
    during = deltas[: sum(1 for k in kinds[: kinds.index("input_audio_buffer.speech_stopped")] if k.endswith(".delta"))]
    assert len(" ".join(during).split()) >= 3, (during, deltas)


def test_silence_and_noise_sent_fast_give_no_words(gateway) -> None:
    rng = np.random.default_rng(7)
    quiet = np.zeros(24000 * 30, dtype=np.int16)
    noise = (rng.normal(0, 0.02, 24000 * 30) * 32767).astype(np.int16)
    audio = np.concatenate([quiet, noise, quiet[: 24000 * 2]]).astype("<i2").tobytes()

    async def run() -> list[dict[str, Any]]:
        async with _client(gateway).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.send(_update(PCM))
            await _stream(conn, audio, 48000)
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.clear"}))
            return await _events(conn, "input_audio_buffer.cleared")

    events = asyncio.run(run())
    words = [e for e in events if e["type"].startswith("conversation.item.input_audio_transcription")]
    assert all(not (e.get("delta") or e.get("transcript")) for e in words), words


def test_bad_input_gets_error_events_and_the_session_goes_on(gateway, speech) -> None:
    async def run() -> list[dict[str, Any]]:
        async with _client(gateway).realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await _events(conn, "session.created")
            await asyncio.sleep(1.5)  # past body_timeout_seconds: the session must not be cut
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "AAAA"}))  # before update
            await conn.send(_update(PCM, turn_detection=None))
            await conn.send_raw(json.dumps({"type": "response.create", "event_id": "c1"}))
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "not base64!"}))
            await conn.send_raw(
                json.dumps(
                    {
                        "type": "session.update",
                        "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
                    }
                )
            )
            spanish = {"audio": {"input": {"transcription": {"language": "es"}}}}  # tiny.en is English-only
            await conn.send_raw(json.dumps({"type": "session.update", "session": spanish}))
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * 300_000}))
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.commit"}))  # empty
            await _stream(conn, speech["audio/pcm"], 4800)
            await conn.send_raw(json.dumps({"type": "input_audio_buffer.commit"}))
            return await _events(conn, "conversation.item.input_audio_transcription.completed")

    events = asyncio.run(run())
    errors = [e["error"] for e in events if e["type"] == "error"]
    assert [e["code"] for e in errors] == [
        "session_not_configured", "invalid_event_type", "invalid_value", "invalid_value", "invalid_value",
        "event_too_large", "input_audio_buffer_commit_empty",
    ]  # fmt: skip
    assert errors[1]["event_id"] == "c1" and errors[3]["param"] == "session.audio.input.format.rate"
    assert errors[4]["param"] == "session.audio.input.transcription.language" and "English-only" in errors[4]["message"]
    assert samples.wer(TEXT, events[-1]["transcript"]) <= 0.15


def _wait_for_no_open_session(gateway: Any) -> None:
    """Sessions of earlier tests end on the server a moment after their clients left."""
    for _ in range(50):
        text = httpx.get(f"{gateway.metrics}/metrics", timeout=10).text
        if re.search(r"^whisper_realtime_sessions_active 0\.0$", text, re.M):
            return
        time.sleep(0.1)
    raise AssertionError("sessions of earlier tests are still open")


def test_handshake_refusals_model_with_intent_and_full_pod(gateway) -> None:
    _wait_for_no_open_session(gateway)

    async def run() -> tuple[int, dict[str, Any], list[int]]:
        with pytest.raises(InvalidStatus) as refused:
            async with _client(gateway, "sk-wrong").realtime.connect(extra_query={"intent": "transcription"}) as conn:
                await conn.recv_bytes()
        async with _client(gateway).realtime.connect(
            model="whisper-1", extra_query={"intent": "transcription"}
        ) as conn:
            invalid = json.loads(await conn.recv_bytes())
        opened, codes = [], []
        for _ in range(10):  # 9 slots
            client = _client(gateway)
            try:
                conn = await client.realtime.connect(extra_query={"intent": "transcription"}).enter()
                opened.append(conn)
                await conn.recv_bytes()
            except ConnectionClosed as exc:
                codes.append(exc.rcvd.code if exc.rcvd else 0)
        for conn in opened:
            await conn.close()
        return refused.value.response.status_code, invalid, codes

    status, invalid, codes = asyncio.run(run())
    assert status == 401
    assert invalid["error"]["code"] == "invalid_model"
    assert codes == [1013]


def test_concurrent_sessions_share_triton_batches(gateway, triton_server, speech) -> None:
    def counts() -> tuple[float, float]:
        text = httpx.get(triton_server.settings.metrics_url, timeout=10).text
        values = [float(re.search(rf'^{n}{{model="whisper"}} (\S+)$', text, re.M).group(1))  # type: ignore[union-attr]
                  for n in (contract.SCHEDULER_STEP_ROWS, contract.SCHEDULER_STEPS)]  # fmt: skip
        return values[0], values[1]

    before = counts()

    pings: list[int] = []

    async def run() -> list[list[dict[str, Any]]]:
        # 8 sessions' live updates keep 2 cores busy: 35 s alone, over 120 s beside other tests
        sessions = asyncio.gather(
            *(_transcribe(gateway, PCM, speech["short/pcm"], 4800, timeout=300) for _ in range(4)),
            *(_transcribe(gateway, PCMU, speech["short/pcmu"], 800, timeout=300) for _ in range(4)),
        )
        async with httpx.AsyncClient(base_url=gateway, timeout=10) as client:
            while not sessions.done():  # readiness while live updates keep the model busy
                pings.append((await client.get("/ping")).status_code)
                await asyncio.wait([sessions], timeout=0.5)
        return await sessions

    results = asyncio.run(run())
    assert pings and set(pings) == {200}, pings
    after = counts()
    for events in results:
        deltas = [e["delta"] for e in events if e["type"].endswith(".delta")]
        assert "".join(deltas) == events[-1]["transcript"]
    assert all(samples.wer(SHORT, r[-1]["transcript"]) == 0 for r in results[:4]), results
    assert all(samples.wer(SHORT, r[-1]["transcript"]) <= 0.34 for r in results[4:]), results  # 8 kHz
    rows, steps = after[0] - before[0], after[1] - before[1]  # the model scheduler's batches
    assert rows / steps > 1.5, (rows, steps)
    metrics = httpx.get(f"{gateway.metrics}/metrics", timeout=10).text
    assert "whisper_realtime_first_delta_seconds_count" in metrics
    assert re.search(r"^whisper_gateway_inflight_requests \S+", metrics, re.M).group(0).endswith(" 0.0")  # type: ignore[union-attr]
