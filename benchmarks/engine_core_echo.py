"""What the hand-over to the engine core costs, on the CPU: Triton → stub → ZMQ → echo core → stub → Triton.

Starts a real tritonserver (``LocalTriton``) whose model's core loads no engine and answers every request
``delay`` ms after it arrives (``WHISPER_ENGINE_CORE_ECHO_MS``, :mod:`whisper_build.serving.engine_core.echo`),
then sends 1 s windows of 16 kHz audio over ONE gRPC stream (``tritonclient.grpc``: the model is decoupled),
closed loop, keeping ``c`` requests in flight, for each ``c`` of ``--concurrency``. Prints and writes (``--out``)
answers/s and latency p50/p99 per level; ``added_ms`` = p50 − the delay (what the path adds at c=1).

    python -m benchmarks.engine_core_echo --concurrency 1,8,32 --seconds 20 --out core_echo.json

Docs: docs/benchmarks.md, "The engine core on the CPU".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient

from whisper_build.serving import contract
from whisper_build.serving.engine_core.echo import ECHO_VARIABLE
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton

STATUS_HEADERS = {"triton_grpc_error": "true"}


def _inputs(samples: int) -> list[grpcclient.InferInput]:
    rng = np.random.default_rng(0)
    wav = (rng.standard_normal((1, samples)) * 0.1).astype(np.float32)
    lens = np.array([[samples]], dtype=np.int32)
    out = []
    for name, array, kind in ((contract.WAV.name, wav, "FP32"), (contract.WAV_LENS.name, lens, "INT32")):
        tensor = grpcclient.InferInput(name, list(array.shape), kind)
        tensor.set_data_from_numpy(array)
        out.append(tensor)
    return out


def closed_loop(url: str, concurrency: int, seconds: float, samples: int = 16000) -> dict[str, Any]:
    """``concurrency`` requests in flight on one stream for ``seconds``; answers/s and latency percentiles."""
    inputs = _inputs(samples)
    sent: dict[str, float] = {}
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    stop_at = [0.0]
    ids = iter(range(10**9))
    client = grpcclient.InferenceServerClient(url)

    def send() -> None:
        request_id = str(next(ids))
        with lock:
            sent[request_id] = time.perf_counter()
        client.async_stream_infer("whisper", inputs, request_id=request_id)

    def on_answer(result: Any, error: Any) -> None:
        now = time.perf_counter()
        request_id = (error if result is None else result).get_response().id if result is not None else None
        with lock:
            if error is not None:
                errors.append(str(error))
            if request_id is not None and request_id in sent:
                latencies.append(now - sent.pop(request_id))
        if now < stop_at[0] and error is None:
            send()

    client.start_stream(callback=on_answer, headers=STATUS_HEADERS)
    try:
        stop_at[0] = time.perf_counter() + 1.0  # warm-up second, not counted
        for _ in range(concurrency):
            send()
        time.sleep(1.0)
        while True:
            with lock:
                if not sent:
                    break
            time.sleep(0.01)
        with lock:
            latencies.clear()
        start = time.perf_counter()
        stop_at[0] = start + seconds
        for _ in range(concurrency):
            send()
        while time.perf_counter() < stop_at[0] or sent:
            time.sleep(0.01)
            if time.perf_counter() > stop_at[0] + 60:
                break
        elapsed = time.perf_counter() - start
    finally:
        client.stop_stream()
        client.close()
    return _level(concurrency, latencies, errors, elapsed)


def _level(concurrency: int, latencies: list[float], errors: list[str], elapsed: float) -> dict[str, Any]:
    """One closed-loop level's record: answers/s over ``elapsed`` s, p50/p99 latency (ms), errors."""
    ordered = sorted(latencies)
    return {
        "concurrency": concurrency,
        "answers": len(ordered),
        "answers_per_s": round(len(ordered) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 2) if ordered else None,
        "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 2) if ordered else None,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the levels; print one JSON line per level and the c=1 added latency."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", default="1,8,32", help="levels, e.g. 1,8,32")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per level")
    parser.add_argument("--delay-ms", type=float, default=8.0, help="the echo core's answer delay")
    parser.add_argument("--out", type=Path, default=None, help="JSON file of the levels")
    args = parser.parse_args(argv)
    os.environ[ECHO_VARIABLE] = str(args.delay_ms)
    os.environ["WHISPER_TRITON_SPEAKER__ENABLED"] = "false"  # the speaker model is not on this path
    levels = []
    settings = TritonSettings(http_port=0, grpc_port=0, metrics_port=0)
    with tempfile.TemporaryDirectory() as workdir, LocalTriton(settings, Path(workdir)) as triton:
        url = triton.settings.grpc_url
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            level = closed_loop(url, concurrency, args.seconds)
            level["added_ms"] = None if level["p50_ms"] is None else round(level["p50_ms"] - args.delay_ms, 2)
            print(json.dumps(level), flush=True)
            levels.append(level)
    record = {"delay_ms": args.delay_ms, "window_s": 1.0, "cpu_cores": os.cpu_count(), "levels": levels}
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
