"""Per-request cost of gRPC ``stream_infer`` (one stream per request) against unary ``infer`` on one Triton.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/benchmarks.md, "Reference run (CPU, this machine)".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import numpy as np

from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import stream_request
from whisper_build.serving.transcription.triton_inputs import infer_inputs
from whisper_build.serving.triton_model.repository import MODEL_NAME
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton


async def _measure(url: str, window: np.ndarray, requests: int) -> dict[str, list[float]]:
    """``requests`` sequential single-window calls of each kind, interleaved; milliseconds per call."""
    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc.aio import InferenceServerClient

    outputs = [InferRequestedOutput(contract.RESULT.name)]
    times: dict[str, list[float]] = {"unary": [], "stream": []}
    async with InferenceServerClient(url) as client:
        for i in range(requests + 2):  # the first two are warm-up
            for kind in ("unary", "stream") if i % 2 else ("stream", "unary"):
                inputs = infer_inputs([window], WindowRequest())
                started = time.perf_counter()
                if kind == "unary":
                    await client.infer(MODEL_NAME, inputs, outputs=outputs, client_timeout=60)
                else:
                    await stream_request(client, MODEL_NAME, inputs, 60, outputs=outputs)
                if i >= 2:
                    times[kind].append((time.perf_counter() - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``).

    Starts a CPU Triton (bundled tiny.en, CTranslate2) unless ``--triton-url`` names one, then sends
    ``--requests`` single-window requests one at a time as unary ``ModelInfer`` and as
    :func:`~whisper_build.serving.transcription.triton.stream_request`, interleaved, and prints each
    kind's p50 / p90 in ms and the p50 difference as JSON. The window is ``--seconds`` of silence, so
    the decode is short and the difference is the wire's.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--triton-url", default="", help="host:port of a running Triton gRPC (default: start one)")
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--seconds", type=float, default=1.0)
    args = p.parse_args(argv)
    window = np.zeros(int(16000 * args.seconds), dtype=np.float32)
    if args.triton_url:
        times = asyncio.run(_measure(args.triton_url, window, args.requests))
    else:
        engine = EngineParams(engine="ctranslate2", device="cpu", cpu_threads=2)
        settings = TritonSettings(http_port=0, grpc_port=0, metrics_port=0, engine=engine)
        with LocalTriton(settings) as server:
            times = asyncio.run(_measure(server.settings.grpc_url, window, args.requests))
    p50 = {kind: statistics.median(v) for kind, v in times.items()}
    report: dict[str, object] = {
        kind: {"p50_ms": round(p50[kind], 2), "p90_ms": round(float(np.percentile(v, 90)), 2), "n": len(v)}
        for kind, v in times.items()
    }
    report["stream_minus_unary_p50_ms"] = round(p50["stream"] - p50["unary"], 2)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
