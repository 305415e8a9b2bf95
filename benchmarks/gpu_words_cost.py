"""GPU cost of word timings on the ``torch`` engine: windows/s with words ÷ without, large-v3-turbo shapes, RANDOM weights.

One process, no Triton: :meth:`TorchEngine.generate` over one batch of noise windows with timestamps,
alternately without and with ``words=True``, after a warm-up, a device sync around each call; random
weights decode exactly ``--new-tokens`` a window, so both modes decode the same work. The random model
has no ``alignment_heads``: openai/whisper's default (every head of the last half of the decoder
layers) is more than a real checkpoint lists, so the cost is an upper bound. ``--encoder-compile none``
starts in seconds but its slower encoder flatters the ratio: ``words_pass_s`` is the figure to carry.
Usage: ``python3 -m benchmarks.gpu_words_cost --tokenizer-dir DIR --out words.json``. Target: ratio ≥
0.85. Docs: docs/engines.md, "Word timings".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.gpu_whisper_random import random_model_dir


def _timed(call) -> float:
    import torch

    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    started = time.perf_counter()
    call()
    sync()
    return time.perf_counter() - started


def measure(
    model_dir: Path, batch: int, new_tokens: int, repeats: int, device: str = "cuda", encoder_compile: str = "default"
) -> dict[str, object]:
    """Median seconds of one ``generate`` over ``batch`` windows, without and with words, and their ratio."""
    import torch

    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.engines.torch_engine import TorchEngine
    from whisper_build.serving.prompt import DecodePrompt

    params = EngineParams(
        engine="torch", model_path=str(model_dir), beam_size=1, device=device,  # type: ignore[arg-type]
        random_weights_fixed_tokens=new_tokens, max_engine_batch=batch, encoder_compile=encoder_compile,  # type: ignore[arg-type]
    )  # fmt: skip
    engine = TorchEngine(params)
    rng = np.random.default_rng(0)
    windows = [(0.1 * rng.standard_normal(480_000)).astype(np.float32) for _ in range(batch)]
    prompts, penalties = [DecodePrompt()] * batch, [1.0] * batch

    def run(words: bool) -> None:
        engine.generate(windows, prompts, penalties, timestamps=True, temperature=0.0, words=words)

    for words in (False, True):  # warm-up: allocator, cuBLAS, numba
        run(words)
    aligned = engine.generate(windows, prompts, penalties, timestamps=True, temperature=0.0, words=True)
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(repeats):
        for words in (False, True):
            times[words].append(_timed(lambda words=words: run(words)))
    plain, worded = statistics.median(times[False]), statistics.median(times[True])
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else device,
        "weights": f"RANDOM ({model_dir.name} shapes)",
        "alignment_heads": len(engine.aligner.heads),
        "batch": batch,
        "new_tokens": new_tokens,
        "mean_words_per_window": sum(len(h.words or []) for h in aligned) / batch,
        "plain_s": times[False],
        "words_s": times[True],
        "encoder_compile": encoder_compile,
        "plain_windows_per_s": batch / plain,
        "words_windows_per_s": batch / worded,
        "ratio": plain / worded,
        "words_pass_s": worded - plain,
    }


def main(argv: list[str] | None = None) -> int:
    """Measure and write the JSON (see the module docstring); 0 on success."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokenizer-dir", type=Path, required=True, help="folder with a Whisper tokenizer.json")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/gpu-words-cost"))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=100)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--shape", default="large-v3-turbo", help="benchmarks.gpu_whisper_random MODEL_SHAPES key")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="cpu: a smoke run of the script only")
    p.add_argument("--encoder-compile", default="default", choices=["none", "default"])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    model = random_model_dir(args.tokenizer_dir, args.workdir / args.shape, args.shape)
    result = measure(model, args.batch, args.new_tokens, args.repeats, args.device, args.encoder_compile)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
