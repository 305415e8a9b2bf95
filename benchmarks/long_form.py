"""Long-form WER: this endpoint's windows against faster-whisper, sequential and batched, on the same CTranslate2 weights.

``python -m benchmarks.long_form [--model tiny.en] [--out long_form.json]``: four recordings (the three
committed Festival dialogues joined, with pauses; their 24 turns joined without pauses; espeak-ng
sentences with and without pauses), each decoded three ways on the CPU at beam 5: ``endpoint`` (windows
cut at silences, decoded independently in one batch through ``decode_windows``), ``fw_sequential``
(faster-whisper ``WhisperModel.transcribe``, previous text as prompt) and ``fw_batched``
(``BatchedInferencePipeline``, batch 8). Prints WER per recording and system and pooled (jiwer over
lower-cased words, punctuation removed). Docs: docs/serving.md, "Long recordings".
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import jiwer
import numpy as np
import soundfile

from benchmarks import speech
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.audio import is_silent, iter_windows
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.bundled import bundled_model_path
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.triton_model.decoding import DecodingPolicy, decode_windows

RATE = 16000
SPEAKERS = REPO / "tests" / "data" / "speakers"
DIALOGUES = ("male_female", "male_male", "three_speakers")


def words(text: str) -> str:
    """Lower-cased words, punctuation removed."""
    return " ".join("".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split())


def festival_recordings() -> dict[str, tuple[np.ndarray, str]]:
    """The committed dialogues joined with pauses, and their turns' speech joined without any."""
    truth = json.loads((SPEAKERS / "truth.json").read_text())
    paused, solid, texts = [], [], []
    for name in DIALOGUES:
        audio, rate = soundfile.read(str(SPEAKERS / f"{name}.flac"), dtype="float32")
        assert rate == RATE, f"{name}: {rate} Hz"
        paused += [audio, np.zeros(RATE, np.float32)]
        for turn in truth[name]:
            solid.append(audio[round(turn["start"] * RATE) : round(turn["end"] * RATE)])
            texts.append(turn["text"])
    text = " ".join(texts)
    return {"festival_dialogues": (np.concatenate(paused), text), "festival_no_pauses": (np.concatenate(solid), text)}


def espeak_recordings(folder: Path) -> dict[str, tuple[np.ndarray, str]]:
    """Eight sentences with 900 ms pauses, and eight others without pauses."""
    out = {}
    for name, sentences, pause in (
        ("espeak_pauses", list(speech.SENTENCES[:8]), 900),
        ("espeak_no_pauses", list(speech.SENTENCES[8:16]), 0),
    ):
        path = speech.say(sentences, folder / f"{name}.wav", pause_ms=pause)
        audio, _ = soundfile.read(str(path), dtype="float32")
        out[name] = (audio, " ".join(sentences))
    return out


def endpoint_text(engine: object, audio: np.ndarray) -> str:
    """The endpoint's transcript: windows cut at silences, decoded independently in one batch."""
    windows = [w.copy() for _, w in iter_windows([audio], 30.0, 5.0) if not is_silent(w)]
    n = len(windows)
    prompts, options = [DecodePrompt(language="en")] * n, [DecodeOptions.transcript()] * n
    results = decode_windows(engine, windows, prompts, [1.0] * n, options, DecodingPolicy())  # type: ignore[arg-type]
    return " ".join(r.text for r in results if r.text)


def main(argv: list[str] | None = None) -> int:
    """Decode every recording three ways; print and write the WER table (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="tiny.en", choices=["tiny.en", "base"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    folder = bundled_model_path(args.model)
    engine = load_engine(EngineParams(engine="ctranslate2", model_path=str(folder), cpu_threads=args.threads))
    model = WhisperModel(str(folder), device="cpu", cpu_threads=args.threads)
    batched = BatchedInferencePipeline(model)
    systems = {
        "endpoint": lambda a: endpoint_text(engine, a),
        "fw_sequential": lambda a: " ".join(s.text for s in model.transcribe(a, beam_size=5, language="en")[0]),
        "fw_batched": lambda a: " ".join(
            s.text for s in batched.transcribe(a, beam_size=5, language="en", batch_size=8)[0]
        ),
    }
    with tempfile.TemporaryDirectory() as tmp:
        recordings = {**festival_recordings(), **espeak_recordings(Path(tmp))}
    table: dict[str, dict[str, object]] = {}
    pooled = {name: [0.0, 0] for name in systems}  # errors, reference words
    for name, (audio, reference) in recordings.items():
        row: dict[str, object] = {"seconds": round(len(audio) / RATE, 1), "words": len(words(reference).split())}
        for system, transcribe in systems.items():
            started = time.perf_counter()
            text = transcribe(audio)
            out = jiwer.process_words(words(reference), words(text) or "<empty>")
            errors = out.substitutions + out.deletions + out.insertions
            row[system] = {
                "wer": round(out.wer, 4),
                "errors": errors,
                "wall_s": round(time.perf_counter() - started, 1),
            }
            pooled[system][0] += errors
            pooled[system][1] += len(words(reference).split())
        table[name] = row
        print(name, json.dumps(row), flush=True)
    result = {
        "model": args.model,
        "recordings": table,
        "pooled_wer": {s: round(e / max(1, n), 4) for s, (e, n) in pooled.items()},
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
