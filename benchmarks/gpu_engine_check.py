"""Real weights through the ``torch`` engine: graphed = eager token ids per bucket, WER, languages, translate.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/benchmarks.md, "GPU, engine".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np

MULTILINGUAL = (
    ("de", "de", "Guten Morgen. Heute ist das Wetter sehr schön, und wir gehen in den Park."),
    ("fr", "fr", "Bonjour, je voudrais un café et un croissant, s'il vous plaît."),
    ("es", "es", "Buenos días. Mañana vamos a la playa con nuestros amigos."),
)
"""(espeak-ng voice, Whisper language code, text) of the non-English windows."""


def prepare(folder: Path, english: int = 6) -> None:
    """Write ``speech.npz`` (int16 windows) and ``references.json`` with espeak-ng (here, not on the GPU)."""
    import soundfile

    from benchmarks.speech import SENTENCES, say

    folder.mkdir(parents=True, exist_ok=True)
    items = [("en-us", "en", " ".join(SENTENCES[2 * i : 2 * i + 2])) for i in range(english)] + list(MULTILINGUAL)
    windows, references = {}, []
    for k, (voice, language, text) in enumerate(items):
        wav = say([text], folder / f"w{k}.wav", voice=voice)
        samples, rate = soundfile.read(str(wav), dtype="int16")
        assert rate == 16000
        windows[f"w{k}"] = samples
        references.append({"key": f"w{k}", "language": language, "text": text})
        wav.unlink()
    np.savez_compressed(folder / "speech.npz", **windows)
    (folder / "references.json").write_text(json.dumps(references, indent=2))


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate after lower-casing and dropping punctuation (Levenshtein over words)."""
    ref, hyp = (re.sub(r"[^\w\s']", " ", t.lower()).split() for t in (reference, hypothesis))
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1] / max(1, len(ref))


def _graphs_vs_eager(
    engine: Any, run: Callable[..., list], buckets: list[int], use: list[int], refs: list[dict]
) -> tuple[list[dict], bool]:
    """Per bucket, greedy and timestamped: do graphed and eager decodes give the same tokens (greedy: its WER)."""
    comparisons, equal = [], True
    for bucket in buckets:
        idx = [use[k % len(use)] for k in range(bucket)]
        for label, kw in (
            ("greedy", {"timestamps": False, "temperature": 0.0}),
            ("timestamps", {"timestamps": True, "temperature": 0.0}),
        ):
            graphed, eager = run(idx, "graphs", **kw), run(idx, "eager", **kw)
            same = [g.tokens for g in graphed] == [e.tokens for e in eager]
            equal &= same
            comparisons.append({"bucket": bucket, "decode": label, "token_ids_equal": same,
                                "windows_differing": sum(g.tokens != e.tokens for g, e in zip(graphed, eager, strict=True))})  # fmt: skip
            if label == "greedy":
                texts = [engine.decode_text(h.tokens).strip() for h in graphed]
                comparisons[-1]["wer"] = float(
                    np.mean([wer(refs[i]["text"], t) for i, t in zip(idx, texts, strict=True)])
                )
    return comparisons, equal


def check_model(
    name: str,
    folder: Path,
    audio: list[np.ndarray],
    refs: list[dict],
    buckets: list[int],
    device: Literal["cpu", "cuda"],
) -> dict:
    """Every check for one model; returns its record."""
    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.engines.buckets import DecodeMode
    from whisper_build.serving.engines.torch_engine import TorchEngine
    from whisper_build.serving.prompt import DecodePrompt

    started = time.perf_counter()
    engine = TorchEngine(
        EngineParams(engine="torch", model_path=str(folder), beam_size=1, device=device, max_engine_batch=max(buckets),
                     encoder_compile="none")
    )  # fmt: skip
    record: dict = {"model": name, "startup_s": time.perf_counter() - started, "multilingual": engine.multilingual}
    use = [i for i, r in enumerate(refs) if engine.multilingual or r["language"] == "en"]
    prompts = [DecodePrompt("", None, "transcribe")]  # no language: multilingual models detect it

    def run(idx: list[int], mode: DecodeMode, **kw) -> list:
        engine._decoder.mode = mode if engine.mode == "graphs" else "eager"  # --device cpu: a smoke run only
        return engine.generate([audio[i] for i in idx], [prompts[0]] * len(idx), [1.0] * len(idx), **kw)

    comparisons, equal = _graphs_vs_eager(engine, run, buckets, use, refs)
    engine._decoder.mode = "graphs"
    hyps = run(use, "graphs", timestamps=False, temperature=0.0)
    record["windows"] = [
        {"reference": refs[i]["text"], "language": refs[i]["language"], "detected": h.language,
         "transcript": engine.decode_text(h.tokens).strip(), "wer": wer(refs[i]["text"], engine.decode_text(h.tokens)),
         "no_speech_prob": h.no_speech_prob, "avg_logprob": h.sum_logprob / max(1, len(h.tokens) + 1)}
        for i, h in zip(use, hyps, strict=True)
    ]  # fmt: skip
    stamped = run(use[:1], "graphs", timestamps=True, temperature=0.0)[0]
    record["timestamps_example"] = {"tokens": stamped.tokens, "timestamp_begin": engine.timestamp_begin}
    sampled = run(use[:2], "graphs", timestamps=False, temperature=0.5)
    record["sampled_t0.5"] = [engine.decode_text(h.tokens).strip() for h in sampled]
    if engine.multilingual:
        foreign = [i for i in use if refs[i]["language"] != "en"]
        translate = DecodePrompt("", None, "translate")
        out = engine.generate([audio[i] for i in foreign], [translate] * len(foreign), [1.0] * len(foreign),
                              timestamps=False, temperature=0.0)  # fmt: skip
        record["translate"] = [{"language": refs[i]["language"], "detected": h.language, "english": engine.decode_text(h.tokens).strip()}
                               for i, h in zip(foreign, out, strict=True)]  # fmt: skip
        record["languages_correct"] = sum(w["detected"] == w["language"] for w in record["windows"])
    record["comparisons"], record["transcripts_equal"] = comparisons, equal
    record["wer_english"] = float(np.mean([w["wer"] for w in record["windows"] if w["language"] == "en"]))
    return record


def main(argv: list[str] | None = None) -> int:
    """``--prepare`` the speech here, or run the checks on the GPU and write ``--out``.

    For each model folder (Hugging Face layout, e.g. :mod:`whisper_build.workstation.ct2_whisper_to_hf` output of
    tiny.en and of Systran faster-whisper-base): the engine is loaded once with ``cuda_graphs=true``;
    for every bucket the same padded batch (the speech windows cycled to the bucket's size) is
    decoded with the captured graphs and then eagerly — the same decoder, buffers, encoder output and
    kernels, ``StaticDecoder.mode`` switched — greedy without timestamps, greedy with timestamps,
    and sampled at temperature 0.5 (sampling is reported, not compared: graph replays draw other
    random numbers than eager calls). Token ids must be identical for the greedy runs. Transcripts
    are scored against the spoken text (WER, jiwer-free: word-level edit distance here); multilingual
    models also detect each window's language and translate the non-English ones.

    Speech: espeak-ng made here (``--prepare``), 16 kHz int16 in ``speech.npz`` with
    ``references.json`` (text and language per window), since the GPU machine has neither espeak-ng
    nor an audio reader.

    Usage::

        python -m benchmarks.gpu_engine_check --prepare DIR            # here: speech.npz, references.json
        python3 -m benchmarks.gpu_engine_check --speech DIR --model tiny.en=HF_DIR --model base=HF_DIR --out check.json
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prepare", type=Path, help="write speech.npz and references.json here, then exit")
    p.add_argument("--speech", type=Path)
    p.add_argument("--model", action="append", default=[], help="NAME=HF_FOLDER, repeatable")
    p.add_argument("--buckets", type=lambda s: [int(b) for b in s.split(",")], default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument(
        "--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of this script (graphs need a GPU)"
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if args.prepare:
        prepare(args.prepare)
        return 0
    data = np.load(args.speech / "speech.npz")
    refs = json.loads((args.speech / "references.json").read_text())
    audio = [data[r["key"]].astype(np.float32) / 32768.0 for r in refs]
    records = []
    for spec in args.model:
        name, _, folder = spec.partition("=")
        records.append(check_model(name, Path(folder), audio, refs, args.buckets, args.device))
        print(
            json.dumps({k: v for k, v in records[-1].items() if k not in ("windows", "timestamps_example")}), flush=True
        )
        for w in records[-1]["windows"]:
            print(f"  [{w['language']}→{w['detected']}] WER {w['wer']:.2f}  {w['transcript']!r}", flush=True)
        args.out.write_text(
            json.dumps({"models": records, "transcripts_equal": all(r["transcripts_equal"] for r in records)}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
