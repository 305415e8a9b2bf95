"""Live transcription benchmark: N concurrent Realtime sessions against a running gateway (``make bench-live``).

Each session streams the same espeak-ng utterance (one sentence, a pause, one sentence; 24 kHz PCM16) in
100 ms appends at real-time pace with ``server_vad`` and reports, per turn, first-delta latency (the
wall time the turn's first voiced audio was sent → its first delta), finalisation latency (the wall
time its last voiced audio was sent → ``completed``; includes the 500 ms silence the VAD waits for) and
the WER of ``completed`` against the spoken text. Prints p50/p95 per N as JSON. Docs: docs/gateway.md,
"Live transcription".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
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


def utterance(folder: Path) -> tuple[bytes, str, list[tuple[float, float]]]:
    """24 kHz PCM16 of two sentences with a 1.5 s pause, 0.5 s before and 2 s after; the text and the voiced spans (s)."""
    sentences = list(SENTENCES[:2])
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


async def session(url: str, key: str, pcm: bytes, spans: list[tuple[float, float]]) -> list[dict[str, Any]]:
    """One session at real-time pace; per turn: first_delta_s, final_s, transcript."""
    client = AsyncOpenAI(api_key=key, base_url=f"{url}/v1", max_retries=0)
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        update = {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}}
        await conn.send({"type": "session.update", "session": update})  # type: ignore[arg-type]
        step = int(48000 * CHUNK_SECONDS)
        begin = time.monotonic()
        turns: list[dict[str, Any]] = []

        async def send() -> None:
            for i, start in enumerate(range(0, len(pcm), step)):
                await asyncio.sleep(max(0.0, begin + i * CHUNK_SECONDS - time.monotonic()))
                chunk = base64.b64encode(pcm[start : start + step]).decode()
                await conn.send({"type": "input_audio_buffer.append", "audio": chunk})

        sender = asyncio.create_task(send())
        first: float | None = None
        while len(turns) < len(spans):
            event = json.loads(await conn.recv_bytes())
            now, index = time.monotonic() - begin, len(turns)
            if event["type"].endswith(".delta") and first is None:
                first = now - spans[index][0]
            elif event["type"].endswith(".completed"):
                turns.append({"first_delta_s": first, "final_s": now - spans[index][1], "text": event["transcript"]})
                first = None
        await sender
        return turns


def percentile(values: list[float], q: float) -> float | None:
    """``q``-quantile (0–1) of ``values``, ``None`` when empty."""
    return float(np.quantile(values, q)) if values else None


async def run(url: str, key: str, sessions: list[int], folder: Path) -> list[dict[str, Any]]:
    """One row per session count in ``sessions`` (printed as JSON lines as each finishes)."""
    pcm, text, spans = utterance(folder)
    rows = []
    for n in sessions:
        results = await asyncio.gather(*(session(url, key, pcm, spans) for _ in range(n)))
        turns = [t for r in results for t in r]
        firsts = [t["first_delta_s"] for t in turns if t["first_delta_s"] is not None]
        finals = [t["final_s"] for t in turns]
        hypothesis = " ".join(" ".join(t["text"] for t in r) for r in results)
        rows.append({
            "sessions": n, "turns": len(turns), "turns_without_delta": len(turns) - len(firsts),
            "first_delta_p50_s": percentile(firsts, 0.5), "first_delta_p95_s": percentile(firsts, 0.95),
            "final_p50_s": percentile(finals, 0.5), "final_p95_s": percentile(finals, 0.95),
            "wer": jiwer.wer(" ".join([text] * n).lower(), hypothesis.lower().replace(".", "").replace(",", "")),
        })  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.live --url … --sessions 1,2,4``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="gateway base URL")
    parser.add_argument("--api-key", default="unused", help="API key (WHISPER_GATEWAY_API_KEYS of the gateway)")
    parser.add_argument("--sessions", default="1,2,4", help="comma-separated concurrent session counts")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(run(args.url, args.api_key, [int(n) for n in args.sessions.split(",")], Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
