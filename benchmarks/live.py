"""Live transcription benchmark: N concurrent Realtime sessions against a running gateway (``make bench-live``).

Each session streams the same espeak-ng speech (the 24 sentences of ``benchmarks.speech``, 301 words,
1.5 s apart; 24 kHz PCM16) in 100 ms appends at real-time pace with ``server_vad``. Per turn:
first-delta latency (its sentence's first voiced audio sent → its first delta) and finalisation
latency (its last voiced audio sent → ``completed``; includes the 500 ms silence the VAD waits for);
per N: p50/p95 and the WER of the joined ``completed`` texts beside the file endpoint's WER on the
same audio (one request). Every line names the served weights (``--weights``): WER and latency
figures come from real weights only; with random weights every row is marked load-only (the server
then runs the test-only confirmation rule, ``WHISPER_GATEWAY_REALTIME_LOAD_TEST_CONFIRMATION``). Docs: docs/benchmarks.md,
"Live sessions".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import itertools
import json
import re
import subprocess
import tempfile
import time
import wave
from pathlib import Path
from typing import Any

import jiwer
import numpy as np
from openai import AsyncOpenAI

from benchmarks.speech import SENTENCES, say

CHUNK_SECONDS = 0.1


def utterance(folder: Path, count: int = len(SENTENCES)) -> tuple[bytes, str, list[tuple[float, float]]]:
    """24 kHz PCM16 of ``count`` sentences (all 24: 301 words), 1.5 s apart, 0.5 s before and 2 s after.

    Returns the audio, the spoken text and each sentence's voiced span (s from the start).
    """
    sentences = list(itertools.islice(itertools.cycle(SENTENCES), count))
    spans = []
    parts = []
    for i, sentence in enumerate(sentences):
        wav = say([sentence], folder / f"s{i}.wav")
        out = folder / f"s{i}-24k.wav"
        subprocess.run(["sox", str(wav), "-r", "24000", str(out)], check=True, capture_output=True)
        with wave.open(str(out)) as w:
            parts.append(np.frombuffer(w.readframes(w.getnframes()), "<i2"))
    audio, cursor = [np.zeros(12000, "<i2")], 0.5
    for part in parts:
        voiced = np.flatnonzero(np.abs(part) > 300)
        spans.append((cursor + voiced[0] / 24000, cursor + voiced[-1] / 24000))
        audio += [part, np.zeros(36000, "<i2")]
        cursor += len(part) / 24000 + 1.5
    audio.append(np.zeros(24000, "<i2"))
    return np.concatenate(audio).tobytes(), " ".join(sentences), spans


def _nearest(spans: list[tuple[float, float]], seconds: float, edge: int) -> int:
    return min(range(len(spans)), key=lambda i: abs(spans[i][edge] - seconds))


async def session(url: str, key: str, pcm: bytes, spans: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """One session at real-time pace; per turn: first_delta_s, final_s, text (turns matched to spans by audio time)."""
    client = AsyncOpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0)
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        update = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}
        await conn.send({"type": "session.update", "session": update})  # type: ignore[arg-type]
        step = int(48000 * CHUNK_SECONDS)
        begin = time.monotonic()
        turns: list[dict[str, Any]] = []
        started: dict[str, int] = {}  # item → the span its speech started in
        stopped: dict[str, int] = {}  # item → the span its speech stopped in
        first: dict[str, float] = {}

        async def send() -> None:
            for i, start in enumerate(range(0, len(pcm), step)):
                await asyncio.sleep(max(0.0, begin + i * CHUNK_SECONDS - time.monotonic()))
                chunk = base64.b64encode(pcm[start : start + step]).decode()
                await conn.send({"type": "input_audio_buffer.append", "audio": chunk})

        sender = asyncio.create_task(send())
        quiet = 0.0  # seconds without an event since the last audio was sent
        while quiet < 10:  # until 10 s after the last audio with nothing more to say
            try:
                raw = await asyncio.wait_for(conn.recv_bytes(), 1.0)
            except TimeoutError:
                quiet += 1.0 if sender.done() else 0.0
                continue
            quiet = 0.0
            event, now = json.loads(raw), time.monotonic() - begin
            item = event.get("item_id", "")
            if event["type"] == "input_audio_buffer.speech_started":
                started[item] = _nearest(spans, (event["audio_start_ms"] + 300) / 1000, 0)  # its prefix padding
            elif event["type"] == "input_audio_buffer.speech_stopped":
                stopped[item] = _nearest(spans, event["audio_end_ms"] / 1000 - 0.5, 1)  # the silence it waited
            elif event["type"].endswith(".delta") and item not in first and item in started:
                first[item] = now - spans[started[item]][0]
            elif event["type"].endswith(".completed"):
                end = spans[stopped[item]][1] if item in stopped else None
                turns.append({"first_delta_s": first.get(item), "final_s": None if end is None else now - end,
                              "text": event["transcript"]})  # fmt: skip
        await sender
        return turns


async def file_wer(url: str, key: str, pcm: bytes, text: str) -> float:
    """WER of the file endpoint (``/v1/audio/transcriptions``) on the same audio, as one WAV."""
    body = io.BytesIO()
    with wave.open(body, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(pcm)
    client = AsyncOpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0, timeout=600)
    result = await client.audio.transcriptions.create(model="whisper-1", file=("live.wav", body.getvalue()))
    return wer(text, result.text)


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after lower-casing and dropping punctuation."""
    return float(jiwer.wer(_words(reference), _words(hypothesis)))


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9']+", text.lower()))


def percentile(values: list[float], q: float) -> float | None:
    """``q``-quantile (0–1) of ``values``, ``None`` when empty."""
    return float(np.quantile(values, q)) if values else None


LOAD_ONLY = "LOAD ONLY (random weights): latency under load; WER meaningless"


async def run(
    url: str, key: str, sessions: list[int], speech: tuple[bytes, str, list[tuple[float, float]]], weights: str
) -> list[dict[str, Any]]:
    """One row per session count in ``sessions`` on ``speech`` (:func:`utterance`'s), printed as JSON lines.

    With random weights every row says it is load-only (``figures``).
    """
    pcm, text, spans = speech
    figures = "real weights: latency and WER" if weights == "real" else LOAD_ONLY
    print(json.dumps({"weights": weights, "words": len(text.split()), "audio_s": round(len(pcm) / 48000, 1),
                      "figures": figures}), flush=True)  # fmt: skip
    reference = await file_wer(url, key, pcm, text)
    rows = []
    for n in sessions:
        results = await asyncio.gather(*(session(url, key, pcm, spans) for _ in range(n)))
        turns = [t for r in results for t in r]
        firsts = [t["first_delta_s"] for t in turns if t["first_delta_s"] is not None]
        finals = [t["final_s"] for t in turns if t["final_s"] is not None]
        live = float(np.mean([wer(text, " ".join(t["text"] for t in r)) for r in results]))
        rows.append({
            "sessions": n, "weights": weights, "figures": figures, "turns": len(turns), "turns_without_delta": len(turns) - len(firsts),
            "first_delta_p50_s": percentile(firsts, 0.5), "first_delta_p95_s": percentile(firsts, 0.95),
            "final_p50_s": percentile(finals, 0.5), "final_p95_s": percentile(finals, 0.95),
            "wer": round(live, 4), "file_wer": round(reference, 4), "wer_minus_file_wer": round(live - reference, 4),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`run`'s rows (seconds; WER in points); a load-only row says so in its first cell."""

    def cell(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
        return "—" if value is None else f"{value * scale:.{digits}f}"

    lines = ["| sessions | weights | first delta p50 / p95 s | completed p50 / p95 s | WER % (file) | turns without delta |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        load = r["figures"] == LOAD_ONLY
        lines.append(
            f"| {r['sessions']}{' (load only)' if load else ''} | {r.get('model', r['weights'])} "
            f"| {cell(r['first_delta_p50_s'])} / {cell(r['first_delta_p95_s'])} "
            f"| {cell(r['final_p50_s'])} / {cell(r['final_p95_s'])} "
            f"| {'—' if load else cell(r['wer'], 100, 1) + ' (' + cell(r['file_wer'], 100, 1) + ')'} "
            f"| {r['turns_without_delta']} of {r['turns']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.live --url … --sessions 1,2,4``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="gateway base URL")
    parser.add_argument("--api-key", default="unused", help="API key (WHISPER_GATEWAY_API_KEYS of the gateway)")
    parser.add_argument("--sessions", default="1,2,4", help="comma-separated concurrent session counts")
    parser.add_argument("--weights", choices=("real", "random"), default="real",
                        help="the served model's weights, printed with every figure (random: load only)")  # fmt: skip
    args = parser.parse_args(argv)
    sessions = [int(n) for n in args.sessions.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        rows = asyncio.run(run(args.url, args.api_key, sessions, utterance(Path(tmp)), args.weights))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
