"""Speakers in live sessions: words under the right label on the Festival dialogues, and what speakers add to latency.

``.venv/bin/python -m benchmarks.live_speakers --url http://127.0.0.1:8080`` (a running ``make serve``, speaker
model loaded) streams each dialogue of ``tests/data/speakers/`` (two voices: male_female, male_male; three:
three_speakers) as 24 kHz PCM16 in 100 ms appends at real-time pace with ``server_vad``, once with
``whisper-1-diarize`` and once with ``whisper-1``. A turn's words are spread evenly over its ``segment``
event's span; each word's true speaker is the one of ``truth.json`` at its middle; labels are mapped to true
speakers by the best one-to-one mapping (every assignment tried: a few labels). Per file:
the share of words under the right label, labels vs voices, and the finalisation latency (``speech_stopped``
→ ``completed``, wall seconds) with and without speakers. One JSON line per run. Docs: docs/gateway.md,
"Speakers in a session".
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import statistics
import time
from typing import Any

import numpy as np
import soxr
from openai import AsyncOpenAI

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.audio import decode_audio

SPEAKERS = REPO_ROOT / "tests" / "data" / "speakers"
TRUTH: dict[str, list[dict[str, Any]]] = json.loads((SPEAKERS / "truth.json").read_text())
CHUNK = 2400  # 100 ms at 24 kHz


def pcm24k(name: str) -> bytes:
    """The dialogue as 24 kHz PCM16, with 2 s of silence after (the last turn ends by VAD)."""
    samples = decode_audio((SPEAKERS / f"{name}.flac").read_bytes()).samples
    audio = np.concatenate([soxr.resample(samples, 16000, 24000), np.zeros(48000)])
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


def true_speaker(name: str, seconds: float) -> str:
    """The true speaker of the dialogue turn holding ``seconds``, else of the nearest turn."""

    def distance(turn: dict[str, Any]) -> float:
        return (
            0.0
            if turn["start"] <= seconds <= turn["end"]
            else min(abs(turn["start"] - seconds), abs(turn["end"] - seconds))
        )

    return str(min(TRUTH[name], key=distance)["speaker"])


def attribution(name: str, segments: list[dict[str, Any]]) -> tuple[float, int]:
    """(share of words under the right label after the best one-to-one mapping, labels used)."""
    words: list[tuple[str, str]] = []  # (label, true speaker)
    for segment in segments:
        count = len(segment["text"].split())
        span = (segment["end"] - segment["start"]) / max(count, 1)
        words += [(segment["speaker"], true_speaker(name, segment["start"] + (i + 0.5) * span)) for i in range(count)]
    labels = sorted({label for label, _ in words})
    truths = sorted({true for _, true in words})
    counts = np.zeros((len(labels), len(truths)))
    for label, true in words:
        counts[labels.index(label), truths.index(true)] += 1
    best = 0.0
    for perm in itertools.permutations(range(max(len(labels), len(truths)))):
        best = max(best, sum(counts[i, j] for i, j in enumerate(perm) if i < len(labels) and j < len(truths)))
    return float(best / max(len(words), 1)), len(labels)


async def session(url: str, name: str, model: str, silence_ms: int) -> dict[str, Any]:
    """Stream one dialogue at real-time pace; its segments and per-turn finalisation latency."""
    client = AsyncOpenAI(api_key="unused", base_url=f"{url}/v1", max_retries=0)
    audio = pcm24k(name)
    segments: list[dict[str, Any]] = []
    latencies: list[float] = []
    completed: list[dict[str, Any]] = []
    stopped: dict[str, float] = {}
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": model, "language": "en"},
            "turn_detection": {"type": "server_vad", "silence_duration_ms": silence_ms}}}}})  # fmt: skip

        async def send() -> None:
            began = time.monotonic()
            for i in range(0, len(audio), 2 * CHUNK):
                await conn.send({"type": "input_audio_buffer.append",
                                 "audio": base64.b64encode(audio[i : i + 2 * CHUNK]).decode()})  # fmt: skip
                await asyncio.sleep(max(0.0, began + (i + 2 * CHUNK) / 48000 - time.monotonic()))
            await conn.send({"type": "input_audio_buffer.commit"})

        sender = asyncio.create_task(send())
        committed: set[str] = set()
        while True:
            try:
                raw = json.loads(await asyncio.wait_for(conn.recv_bytes(), timeout=120))
            except TimeoutError:
                break
            kind = raw["type"]
            if kind == "input_audio_buffer.speech_stopped":
                stopped[raw["item_id"]] = time.monotonic()
            elif kind == "input_audio_buffer.committed":
                committed.add(raw["item_id"])
            elif kind.endswith("transcription.segment"):
                segments.append(raw)
            elif kind.endswith("transcription.completed") or kind.endswith("transcription.failed"):
                completed.append(raw)
                if raw["item_id"] in stopped and kind.endswith("completed"):
                    latencies.append(time.monotonic() - stopped[raw["item_id"]])
            elif kind == "error" and raw["error"]["code"] != "input_audio_buffer_commit_empty":
                print(json.dumps({"file": name, "error": raw["error"]}))
            finished = committed <= {c["item_id"] for c in completed}
            if sender.done() and finished and (kind == "error" or kind.endswith(("completed", "failed"))):
                break
        sender.cancel()
    return {"segments": segments, "latencies": latencies, "turns": len(completed), "completed": completed}


async def main_async(url: str, names: list[str], silence_ms: int, show: bool = False) -> None:
    """One line per dialogue: words right, labels, completed latency with and without speakers.

    ``show``: also one line per ``segment`` event of the speakers run (span, label, true speaker, text).
    """
    for name in names:
        voices = len({t["speaker"] for t in TRUTH[name]})
        on = await session(url, name, "whisper-1-diarize", silence_ms)
        for s in on["segments"] if show else []:
            truth = true_speaker(name, (s["start"] + s["end"]) / 2)
            print(f"  {s['start']:6.2f}-{s['end']:6.2f} {s['speaker']} ({truth}) {s['text']}")
        for c in on["completed"] if show else []:
            print(f"  {c['type'].rsplit('.', 1)[-1]} {c.get('speaker')}: {c.get('transcript', c.get('error'))}")
        off = await session(url, name, "whisper-1", silence_ms)
        share, labels = attribution(name, on["segments"])
        print(json.dumps({
            "file": name, "voices": voices, "labels": labels, "words_right": round(share, 3), "turns": on["turns"],
            "completed_latency_s": {"speakers_p50": _p50(on["latencies"]), "plain_p50": _p50(off["latencies"]),
                                    "speakers_mean": _mean(on["latencies"]), "plain_mean": _mean(off["latencies"])},
        }))  # fmt: skip


def _p50(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None


def main(argv: list[str] | None = None) -> int:
    """Run every dialogue (or ``--file``) against ``--url``; one JSON line each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--file", action="append", choices=sorted(TRUTH), help="a dialogue (default: all)")
    parser.add_argument("--silence-ms", type=int, default=400, help="server_vad silence_duration_ms")
    parser.add_argument("--show-segments", action="store_true", help="print each segment of the speakers run")
    args = parser.parse_args(argv)
    asyncio.run(main_async(args.url, args.file or sorted(TRUTH), args.silence_ms, args.show_segments))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
