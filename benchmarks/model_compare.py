"""Whisper base vs tiny.en on this CPU: the Triton model's decoding layer over the bundled models, in process.

``.venv/bin/python -m benchmarks.model_compare [--rounds 3]`` says every sentence of
``benchmarks/speech.py`` once with espeak-ng (about 2 minutes of English with pauses), cuts it
into plain 30 s windows (a cut may fall inside a word, for both models alike), and for each bundled
model (:mod:`whisper_build.serving.engines.bundled`) decodes all windows in ONE
:func:`whisper_build.serving.triton_model.batching.run_batch` call (what the model's ``execute()``
runs; ctranslate2, beam 5, 2 threads), ``rounds`` times after one warm-up. Prints one JSON object:
per model the median wall and CPU seconds (CPU: all threads of the process, the steadier figure on a
shared machine), RTFx (audio seconds ÷ wall seconds) and WER against the spoken
text; for ``base`` also the Spanish file of ``tests/data/languages/`` (language detected once + decode).
Docs: docs/benchmarks.md, "Whisper base vs tiny.en on the CPU".
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import jiwer
import numpy as np
import soundfile

from benchmarks import speech
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.bundled import bundled_model_path
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.batching import RequestWindows, run_batch
from whisper_build.serving.triton_model.decoding import DecodingPolicy

RATE = 16000
WINDOW = 30 * RATE


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate (jiwer) of lower-cased words, punctuation removed."""

    def words(text: str) -> str:
        return " ".join("".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split())

    return float(jiwer.wer(words(reference), words(hypothesis) or "<empty>"))


def _windows(audio: np.ndarray) -> list[np.ndarray]:
    return [audio[k : k + WINDOW] for k in range(0, len(audio), WINDOW)]


def _timed(engine: object, windows: list[np.ndarray], rounds: int) -> tuple[float, float, str]:
    """Median wall seconds, median CPU seconds (all threads of this process) and the text of one call."""
    request = RequestWindows(windows, [DecodePrompt()] * len(windows), [1.0] * len(windows))
    run_batch(engine, [request], DecodingPolicy())  # type: ignore[arg-type]  # warm-up
    walls, cpus, text = [], [], ""
    for _ in range(rounds):
        wall, cpu = time.perf_counter(), time.process_time()
        [result] = run_batch(engine, [request], DecodingPolicy())  # type: ignore[arg-type]
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        text = " ".join(w.text for w in result if w.text)  # type: ignore[union-attr]
    return statistics.median(walls), statistics.median(cpus), text


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its JSON; 0 on success."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    speech.require_tools()
    with tempfile.TemporaryDirectory() as tmp:
        audio, _ = soundfile.read(speech.say(list(speech.SENTENCES), Path(tmp) / "long.wav"), dtype="float32")
    spoken = " ".join(speech.SENTENCES)
    windows = _windows(audio)
    spanish, _ = soundfile.read(REPO / "tests/data/languages/es_hospital.flac", dtype="float32")
    corpus = json.loads((REPO / "tests/data/languages/corpus.json").read_text())
    out: dict[str, object] = {"audio_seconds": round(len(audio) / RATE, 1), "windows": len(windows)}
    for name in ("tiny.en", "base"):
        params = EngineParams(model_path=str(bundled_model_path(name)), cpu_threads=2)
        engine = load_engine(params)
        seconds, cpu, text = _timed(engine, windows, args.rounds)
        row: dict[str, object] = {
            "wall_s": round(seconds, 2),
            "cpu_s": round(cpu, 2),
            "rtfx": round(len(audio) / RATE / seconds, 1),
            "wer": round(wer(spoken, text), 3),
        }
        if engine.multilingual:
            es_seconds, es_cpu, es_text = _timed(engine, [spanish], args.rounds)
            row["spanish_wall_s"] = round(es_seconds, 2)
            row["spanish_cpu_s"] = round(es_cpu, 2)
            row["spanish_wer"] = round(wer(corpus["es_hospital"]["text"], es_text), 3)
        out[name] = row
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
