"""Word error rate with and without Whisper's timestamp tokens, on the bundled models, in process.

``.venv/bin/python -m benchmarks.timestamp_mode`` decodes the committed speech corpora twice per
bundled model (:mod:`whisper_build.serving.engines.bundled`: tiny.en and base) through
:func:`whisper_build.serving.triton_model.batching.run_batch` (what the Triton model's
``execute()`` runs; CTranslate2 on the CPU): once with ``DecodeOptions(timestamps=False)`` (plain
text), once with ``timestamps=True`` (openai/whisper's ``transcribe()`` default). Corpora: every
sentence of ``benchmarks/speech.py`` said alone (one window each), all of them in one recording cut
into windows as the gateway cuts them, the sentences of ``tests/support/speech_samples.py`` (the transcript tests' corpus)
said alone, and the files of ``tests/data/languages/`` (base: all; tiny.en: the English one). Prints one JSON object: per model, corpus and mode the WER (jiwer, lower case,
punctuation removed) over the corpus's words and the decode's CPU seconds (the steadier figure on a
shared machine); ``--show`` adds every hypothesis that differs by mode. The choice it supports: docs/serving.md
("One transcript per audio").
"""

from __future__ import annotations

import argparse
import ast
import json
import tempfile
import time
from pathlib import Path

import jiwer
import numpy as np
import soundfile

from benchmarks import speech
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.audio.windows import is_silent, iter_windows
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.bundled import bundled_model_path
from whisper_build.serving.prompt import DecodePrompt
from whisper_build.serving.results import WindowResult
from whisper_build.serving.triton_model.batching import RequestWindows, run_batch
from whisper_build.serving.triton_model.decoding import DecodingPolicy

MODES = {"plain": DecodeOptions(timestamps=False), "timestamps": DecodeOptions(timestamps=True)}
"""The two decoding modes compared (the gateway's ``TIMESTAMPS`` input off / on)."""
Utterance = tuple[str, list[np.ndarray]]
"""Reference text and the 16 kHz windows of one audio file."""


def _words(text: str) -> str:
    return " ".join("".join(c if c.isalnum() or c.isspace() else " " for c in text.lower()).split())


def _read(path: Path) -> np.ndarray:
    audio, rate = soundfile.read(path, dtype="float32")
    assert rate == 16000, f"{path}: {rate} Hz, expected 16000"
    return audio


def _gateway_windows(audio: np.ndarray) -> list[np.ndarray]:
    """Non-silent windows cut as the gateway cuts them (30 s, cut at the quietest point of the last 5 s)."""
    return [w for _, w in iter_windows([audio], 30.0, 5.0) if not is_silent(w)]


def test_sentences(path: Path = REPO / "tests/support/speech_samples.py") -> list[str]:
    """The ``SENTENCES`` literal of the tests' speech helpers (read, not imported: benchmarks do not import tests)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SENTENCES" for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise LookupError(f"{path}: no SENTENCES list")


def corpora(tmp: Path) -> dict[str, list[Utterance]]:
    """Per corpus name, its utterances (reference text, windows); the English-only subset is ``*_en``."""
    sentences = [(s, [_read(speech.say([s], tmp / f"s{i}.wav"))]) for i, s in enumerate(speech.SENTENCES)]
    tests = [(s, [_read(speech.say([s], tmp / f"t{i}.wav"))]) for i, s in enumerate(test_sentences())]
    long = _read(speech.say(list(speech.SENTENCES), tmp / "long.wav"))
    table = json.loads((REPO / "tests/data/languages/corpus.json").read_text())
    languages = [(row["text"], [_read(REPO / f"tests/data/languages/{name}.flac")]) for name, row in table.items()]
    english = [
        (row["text"], [_read(REPO / f"tests/data/languages/{n}.flac")]) for n, row in table.items() if n[:2] == "en"
    ]
    return {
        "sentences": sentences,
        "recording": [(" ".join(speech.SENTENCES), _gateway_windows(long))],
        "test_sentences": tests,
        "languages": languages,
        "languages_en": english,
    }


def corpus_wer(engine: object, utterances: list[Utterance], options: DecodeOptions) -> tuple[float, float, list[str]]:
    """WER over all words of ``utterances``, the decode's CPU seconds, and each hypothesis.

    The utterances are one request each, decoded in one batch; CPU seconds count all threads of this process.
    """
    requests = [
        RequestWindows(windows, [DecodePrompt()] * len(windows), [1.0] * len(windows), [options] * len(windows))
        for _, windows in utterances
    ]
    cpu = time.process_time()
    results = run_batch(engine, requests, DecodingPolicy())  # type: ignore[arg-type]
    cpu = time.process_time() - cpu
    hypotheses = []
    for result in results:
        if isinstance(result, Exception):
            raise result
        hypotheses.append(" ".join(w.text for w in result if isinstance(w, WindowResult) and w.text))
    references = [_words(text) for text, _ in utterances]
    return float(jiwer.wer(references, [_words(h) or "<empty>" for h in hypotheses])), cpu, hypotheses


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print its JSON; 0 on success."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["tiny.en", "base"], help="bundled models (default both)")
    parser.add_argument("--show", action="store_true", help="also print every hypothesis that differs by mode")
    args = parser.parse_args(argv)
    speech.require_tools()
    with tempfile.TemporaryDirectory() as tmp:
        sets = corpora(Path(tmp))
    out: dict[str, object] = {}
    for name in args.models:
        engine = load_engine(EngineParams(model_path=str(bundled_model_path(name)), cpu_threads=2))
        rows: dict[str, object] = {}
        for corpus, utterances in sets.items():
            if corpus == ("languages_en" if engine.multilingual else "languages"):
                continue
            scores = {mode: corpus_wer(engine, utterances, options) for mode, options in MODES.items()}
            words = sum(len(_words(text).split()) for text, _ in utterances)
            rows[corpus] = {
                "words": words,
                **{f"wer_{mode}": round(wer, 4) for mode, (wer, _, _) in scores.items()},
                **{f"cpu_s_{mode}": round(cpu, 1) for mode, (_, cpu, _) in scores.items()},
            }
            if args.show:
                pairs = zip(scores["plain"][2], scores["timestamps"][2], strict=True)
                rows[corpus]["differs"] = [{"plain": p, "timestamps": t} for p, t in pairs if p != t]  # type: ignore[index]
        out[name] = rows
    print(json.dumps(out, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
