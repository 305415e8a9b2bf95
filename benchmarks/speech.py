"""Benchmark speech made locally with espeak-ng + sox (no downloads).

Short utterances and a long recording of many sentences with pauses between them.

``espeak-ng`` reads SSML with ``-m``; ``<break time="…ms"/>`` inserts the pauses. ``sox``
converts its 22.05 kHz output to 16 kHz mono 16-bit WAV (Whisper's rate) and trims the long
recording to the exact length asked for. Both are Debian packages (.ci/apt-packages.txt).
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

import soundfile

SENTENCES = (
    "Good morning everyone, let's start with a quick review of last week's numbers.",
    "The new cluster in the second region came online on Tuesday without any incidents.",
    "We processed about four hundred thousand requests per hour at the peak.",
    "Latency stayed under one second for ninety nine percent of the traffic.",
    "The larger instances are more expensive, but they handle twice the load.",
    "Please send me the capacity plan before the end of the day on Friday.",
    "I think we should test the smaller model on the older graphics cards first.",
    "Our customers mostly upload recordings of meetings that last about an hour.",
    "The dashboard now shows the utilization of every group of machines.",
    "When the queue grows, the autoscaler adds nodes within a few minutes.",
    "Let's make sure the engines are rebuilt for every new driver version.",
    "Security asked us to rotate the access keys once a quarter.",
    "The weather forecast says it will rain in the afternoon, so bring an umbrella.",
    "My favourite part of the project was watching the first transcript appear.",
    "Could you explain again how the batching window affects the response time?",
    "Short requests wait a few milliseconds so that the server can group them.",
    "The benchmark sends real audio files and measures the time of every answer.",
    "Seven hundred and twenty five people joined the conference call yesterday.",
    "The train to the airport leaves every fifteen minutes from platform three.",
    "If the model is not ready, the health check returns an error and traffic moves away.",
    "We need more memory on the gateway only when very long files arrive.",
    "The report will include a plot of throughput against concurrency.",
    "Thank you all for joining, and see you at the same time next week.",
    "One more thing: the office will be closed on Monday for maintenance.",
)
"""Plain English sentences (meeting-style speech), said in order and cycled for long audio."""


def require_tools() -> None:
    """Raises RuntimeError naming the Debian packages when espeak-ng or sox is missing."""
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not found: apt-get install -y espeak-ng sox (or make system-deps)")


def _ssml(sentences: list[str], pause_ms: int) -> str:
    pause = f'<break time="{pause_ms}ms"/>'
    return "<speak>" + pause.join(escape(s) for s in sentences) + "</speak>"


def say(
    sentences: list[str], path: Path, pause_ms: int = 700, words_per_minute: int = 165, voice: str = "en-us"
) -> Path:
    """Speak ``sentences`` with ``pause_ms`` of silence between them into a 16 kHz mono WAV.

    ``voice`` is an espeak-ng voice (``espeak-ng --voices``: ``en-us``, ``de``, ``fr``, ``es``, …).

    Raises:
        RuntimeError: espeak-ng or sox missing.
        subprocess.CalledProcessError: a tool failed.
    """
    require_tools()
    with tempfile.TemporaryDirectory() as tmp:
        ssml = Path(tmp) / "speech.ssml"
        raw = Path(tmp) / "raw.wav"
        ssml.write_text(_ssml(sentences, pause_ms))
        subprocess.run(
            ["espeak-ng", "-m", "-v", voice, "-s", str(words_per_minute), "-w", str(raw), "-f", str(ssml)],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            ["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path)], check=True, capture_output=True
        )
    return path


def utterances(folder: Path, count: int = 4, sentences_each: int = 2) -> list[Path]:
    """``count`` short files (``sentences_each`` sentences, roughly 6–10 s each) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    pool = itertools.cycle(SENTENCES)
    return [say([next(pool) for _ in range(sentences_each)], folder / f"utterance_{i}.wav") for i in range(count)]


RECORDING_SENTENCES = (4, 6, 12, 18)
"""Sentences per file of :func:`recordings`, cycled: about 19, 28, 56 and 84 s (1 to 3 Whisper windows)."""


def recordings(folder: Path, count: int = 8, sentence_counts: tuple[int, ...] = RECORDING_SENTENCES) -> list[Path]:
    """``count`` recordings of mixed length (:data:`RECORDING_SENTENCES`; about 19–84 s) in ``folder``.

    The mix a job archive has: most files longer than one 30 s window, not all of one length.
    """
    folder.mkdir(parents=True, exist_ok=True)
    pool = itertools.cycle(SENTENCES)
    lengths = itertools.cycle(sentence_counts)
    return [say([next(pool) for _ in range(next(lengths))], folder / f"recording_{i}.wav") for i in range(count)]


def long_recording(path: Path, seconds: float = 600.0, pause_ms: int = 900) -> Path:
    """A recording of exactly ``seconds`` (default 10 minutes).

    :data:`SENTENCES` cycled with pauses, said until long enough, then trimmed by sox.
    """
    count = len(SENTENCES)
    while True:
        sentences = [s for s, _ in zip(itertools.cycle(SENTENCES), range(count))]
        say(sentences, path, pause_ms)
        duration = soundfile.info(str(path)).duration
        if duration >= seconds:
            break
        count = int(count * seconds / duration) + len(SENTENCES)
    trimmed = path.with_suffix(".trim.wav")
    subprocess.run(["sox", str(path), str(trimmed), "trim", "0", f"{seconds}"], check=True, capture_output=True)
    trimmed.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.speech --out DIR``: write sample speech files for the bench tool; exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.speech",
        description="Write sample English speech (espeak-ng + sox, 16 kHz mono WAV) for `make bench`.",
    )
    parser.add_argument("--out", type=Path, default=Path("bench-audio"), help="folder (default bench-audio)")
    parser.add_argument("--count", type=int, default=8, help="short utterances, about 6-10 s each (default 8)")
    parser.add_argument(
        "--long-seconds", type=float, default=0.0, help="also write long.wav of this many seconds (default none)"
    )
    args = parser.parse_args(argv)
    try:
        written = utterances(args.out, args.count)
        if args.long_seconds > 0:
            written.append(long_recording(args.out / "long.wav", args.long_seconds))
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    total = sum(soundfile.info(str(p)).duration for p in written)
    print(f"wrote {len(written)} files ({total:.0f} s of speech) to {args.out}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
