"""The gateway's CPU cost per request, stage by stage, in this process (no server, no model).

One single-window request goes through the same functions the gateway runs, each stage timed on its
own (:func:`stages`); :func:`whole_app` times the whole app through Starlette's ``TestClient``;
``--served SECONDS`` (:func:`served`) measures the served path against a real tritonserver instead.
usage: ``python -m benchmarks.gateway_profile [--audio FILE] [--repeat 30] [--json OUT]`` or
``… --served 20 [--concurrency 16] [--workers 2] [--json OUT]``.
Docs: docs/benchmarks.md, "Gateway cost, after".
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving import contract
from whisper_build.serving.audio import decode_base64, is_silent, iter_windows, open_audio
from whisper_build.serving.contract import DecodeOptions
from whisper_build.serving.diarization.speakers import Turn
from whisper_build.serving.gateway.routes.sagemaker import InvocationRequest
from whisper_build.serving.prompt import parse_prompt
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import ServedModel
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton_inputs import infer_inputs, scheduler_parameters

_RESULT = json.dumps({"text": " Good morning everyone.", "segments": [], "temperature": 0.0, "temperatures": [0.0]})


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall milliseconds of ``fn`` over ``repeat`` calls, and its last result."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def grpc_request_bytes(windows: Sequence[npt.NDArray[np.float32]], options: DecodeOptions) -> bytes:
    """The serialized ``ModelInferRequest`` the gateway's Triton client sends on its stream for ``windows``."""
    from tritonclient.grpc import InferRequestedOutput
    from tritonclient.grpc._utils import _get_inference_request

    inputs = infer_inputs(windows, WindowRequest(parse_prompt(""), 1.0, options))
    request = _get_inference_request(
        model_name="whisper", inputs=inputs, model_version="", request_id="", outputs=[InferRequestedOutput(contract.RESULT.name)],
        sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
        parameters=scheduler_parameters(0, 60.0),
    )  # fmt: skip
    return bytes(request.SerializeToString())


def _multipart(data: bytes) -> tuple[bytes, bytes]:
    """A multipart/form-data body as the ``openai`` client sends it, and its boundary."""
    boundary = b"----whisperprofile7MA4YWxkTrZu0gW"
    head = (
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper\r\n'
        b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        b"Content-Type: audio/wav\r\n\r\n"
    )
    return head + data + b"\r\n--" + boundary + b"--\r\n", boundary


def _parse_multipart(body: bytes, boundary: bytes) -> bytes:
    """The ``file`` part's bytes, parsed by python-multipart's streaming parser (Starlette's)."""
    from python_multipart.multipart import MultipartParser

    parts: list[bytearray] = []

    def on_part_begin() -> None:
        parts.append(bytearray())

    def on_part_data(data: bytes, start: int, end: int) -> None:
        parts[-1] += data[start:end]

    parser = MultipartParser(boundary, {"on_part_begin": on_part_begin, "on_part_data": on_part_data})
    for i in range(0, len(body), 64 * 1024):  # uvicorn hands the body over in 64 KiB pieces
        parser.write(body[i : i + 64 * 1024])
    parser.finalize()
    return bytes(parts[-1])


def stages(data: bytes, repeat: int) -> dict[str, dict[str, float]]:
    """Median milliseconds per stage for both routes (see the module docstring)."""
    body = json.dumps({"audio_data": base64.b64encode(data).decode(), "whisper_prompt": ""}).encode()
    ms: dict[str, dict[str, float]] = {"invocations": {}, "openai": {}}
    inv = ms["invocations"]
    inv["json_parse"], payload = _timed(lambda: json.loads(body), repeat)
    inv["validate"], request = _timed(lambda: InvocationRequest.model_validate(payload), repeat)
    inv["base64"], audio = _timed(lambda: decode_base64(request.audio_data), repeat)
    multipart, boundary = _multipart(data)
    ms["openai"]["multipart_parse"], _ = _timed(lambda: _parse_multipart(multipart, boundary), repeat)

    def header() -> Any:
        stream = open_audio(audio, max_seconds=7200)
        stream.close()
        return stream

    common: dict[str, float] = {}
    common["header"], _ = _timed(header, repeat)

    def decode() -> list[npt.NDArray[np.float32]]:
        with open_audio(audio, max_seconds=7200) as stream:
            return list(stream.chunks())

    common["decode_resample"], chunks = _timed(decode, repeat)
    common["decode_resample"] -= common["header"]

    def windowing() -> list[npt.NDArray[np.float32]]:
        return [s for _, s in iter_windows(chunks, 30.0, 5.0) if not is_silent(s)]

    common["windowing"], windows = _timed(windowing, repeat)
    common["grpc_build"], request_bytes = _timed(lambda: grpc_request_bytes(windows, DecodeOptions()), repeat)

    def response() -> bytes:
        from fastapi.responses import JSONResponse

        out = WindowResult.from_json(_RESULT)
        return bytes(JSONResponse({"code": 0, "message": "Success", "transcribe_text": out.text}).body)

    common["response"], _ = _timed(response, repeat)
    for route in ms.values():
        route.update(common)
        route["total"] = sum(route.values())
    ms["sizes"] = {
        "wav_bytes": len(data), "json_body_bytes": len(body), "grpc_request_bytes": len(request_bytes),
        "windows": len(windows), "seconds": round(sum(len(c) for c in chunks) / 16000, 2),
    }  # fmt: skip
    return ms


def whole_app(data: bytes, requests: int) -> dict[str, float]:
    """Process CPU ms per request through the app (Starlette ``TestClient``, instant backend)."""
    from fastapi.testclient import TestClient

    from whisper_build.serving.gateway.app import create_app
    from whisper_build.serving.gateway.settings import GatewaySettings, ModelHealthSettings, ServerSettings

    class InstantBackend:
        async def served_model(self, timeout: float) -> ServedModel:
            return ServedModel("whisper", 16, multilingual=False, engine="instant")

        async def infer(self, windows: Sequence[Any], *_: Any, **__: Any) -> list[WindowResult]:
            grpc_request_bytes(windows, DecodeOptions())  # what the Triton client would serialize
            return [WindowResult.from_json(_RESULT) for _ in windows]

        async def diarize(self, *_: Any, **__: Any) -> list[Turn]:
            return []

        async def speakers_served(self, timeout: float) -> bool:
            return True

        async def speaker_problem(self, timeout: float) -> str | None:
            return None

        async def reload(self, timeout: float) -> None:
            return None

        async def close(self) -> None:
            return None

    settings = GatewaySettings(
        server=ServerSettings(log_level="warning"),
        health=ModelHealthSettings(canary_interval_seconds=5.0, stale_after_seconds=60.0),
    )
    body = json.dumps({"audio_data": base64.b64encode(data).decode(), "whisper_prompt": ""}).encode()
    out: dict[str, float] = {}
    with TestClient(create_app(settings, lambda s: InstantBackend())) as client:
        for route, send in (
            ("invocations", lambda: client.post("/invocations", content=body)),
            ("openai", lambda: client.post("/v1/audio/transcriptions", files={"file": ("a.wav", data)})),
        ):
            assert send().status_code == 200
            cpu = time.process_time()
            for _ in range(requests):
                send()
            out[route] = (time.process_time() - cpu) * 1000 / requests
    return out


def served(seconds: float, concurrency: int, workers: int, gateway_root: Path, out: Path) -> dict[str, Any]:
    """Requests/s and gateway CPU ms per request: ours, the reference design and Triton direct, one Triton."""
    from benchmarks.bench.cli import main as bench_main
    from benchmarks.speech import utterances
    from whisper_build.serving.engines import EngineParams
    from whisper_build.serving.triton_model.repository import BatchingConfig
    from whisper_build.serving.triton_model.settings import TritonSettings
    from whisper_build.workstation.local_triton import LocalTriton, free_ports
    from whisper_build.workstation.process import GatewayProcess

    audio = utterances(out / "audio", count=4)
    http, grpc, metrics = free_ports(3)
    settings = TritonSettings(
        http_port=http, grpc_port=grpc, metrics_port=metrics,
        engine=EngineParams(engine="ctranslate2", device="cpu", cpu_threads=2),
        batching=BatchingConfig(max_batch_size=32, max_queue_delay_us=20_000, max_queue_size=128),
    )  # fmt: skip
    capacity = max(32, workers)
    results: dict[str, Any] = {"concurrency": concurrency, "seconds": seconds, "workers": workers, "targets": {}}
    with (
        LocalTriton(settings),
        GatewayProcess(
            settings.grpc_url, capacity, {"WHISPER_GATEWAY_WORKERS": str(workers)}, root=gateway_root
        ) as ours,
        GatewayProcess(settings.grpc_url, module="benchmarks.reference_gateway") as reference,
    ):
        for name, url, process in (
            ("gateway", ours.url, ours),
            ("reference_gateway", f"{reference.url}/invocations", reference),
            ("triton", f"grpc://{settings.grpc_url}", None),
        ):
            idle = 0.0
            if process is not None:  # the canary's CPU at rest, per second, is taken off the level's
                cpu = process.cpu_seconds()
                time.sleep(5.0)
                idle = (process.cpu_seconds() - cpu) / 5.0
                cpu = process.cpu_seconds()
            started = time.monotonic()
            bench_main([
                "--audio", *map(str, audio), "--target", f"{name}={url}", "--concurrency", str(concurrency),
                "--duration", str(seconds), "--warmup", "2", "--timeout", "120", "--quiet",
                "--triton-metrics", settings.metrics_url, "--out", str(out / name),
            ])  # fmt: skip
            [level] = json.loads((out / name / "bench.json").read_text())["levels"]
            record = {k: level[k] for k in ("requests", "ok", "requests_per_s", "latency_p50_s", "avg_batch_size")}
            if process is not None:
                used = process.cpu_seconds() - cpu - idle * (time.monotonic() - started)
                record["cpu_ms_per_request"] = round(1000 * used / (level["requests"] + 2), 1)  # + 2 warm-up
            results["targets"][name] = record
    targets = results["targets"]
    results["ours_over_reference"] = round(
        targets["gateway"]["requests_per_s"] / targets["reference_gateway"]["requests_per_s"], 2
    )
    results["ours_over_triton"] = round(targets["gateway"]["requests_per_s"] / targets["triton"]["requests_per_s"], 2)
    return results


def speech_wav() -> bytes:
    """A ~9 s 16 kHz mono 16-bit WAV of two sentences (espeak-ng + sox)."""
    from benchmarks.speech import SENTENCES, say

    with tempfile.TemporaryDirectory() as tmp:
        return say(list(SENTENCES[:2]), Path(tmp) / "speech.wav").read_bytes()


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``).

    One single-window request (a ~9 s 16 kHz WAV of espeak-ng speech unless ``--audio`` names a
    file) goes through the same functions the gateway runs, each stage timed on its own
    (``time.perf_counter``, the median of ``--repeat`` runs):

    ``/invocations`` (JSON): ``json_parse`` (``json.loads`` of the body), ``validate`` (the pydantic
    request model), ``base64`` (:func:`~whisper_build.serving.audio.decode_base64`), ``header``
    (:func:`~whisper_build.serving.audio.open_audio`: the container's header and declared
    duration), ``decode_resample`` (the stream's 16 kHz chunks), ``windowing`` (cut + silence
    test), ``grpc_build`` (``WAV`` & co. packed into the Triton request and serialized to protobuf
    bytes, as ``tritonclient.grpc.aio`` sends it), ``response`` (the model's ``RESULT`` parsed and
    the JSON answer rendered). ``/v1/audio/transcriptions`` (multipart): ``multipart_parse``
    (python-multipart, as Starlette parses the form) replaces the first three.

    Also times the whole app per request through Starlette's ``TestClient`` with a backend that
    answers at once (the gateway's CPU with no model; the test client's own cost included), as
    process CPU milliseconds per request.

    ``--served SECONDS`` measures the served path on this machine instead: real tritonserver with the
    CPU tiny.en (as ``make serve``), our gateway (``--workers`` processes; ``--gateway-root`` runs
    another source tree's gateway, e.g. an exported older commit) and the seeds' reference gateway
    design (:mod:`benchmarks.reference_gateway`) on that same Triton, and Triton directly; each target
    gets one ``--concurrency`` level of SECONDS (bench tool, speech files), and each gateway's process
    CPU (workers included) is divided by its requests.

    usage: ``python -m benchmarks.gateway_profile [--audio FILE] [--repeat 30] [--json OUT]``
           ``python -m benchmarks.gateway_profile --served 20 [--concurrency 16] [--workers 2] [--json OUT]``
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--audio", type=Path, help="audio file (default: ~9 s of espeak-ng speech, 16 kHz WAV)")
    p.add_argument("--repeat", type=int, default=30, help="runs per stage (median reported)")
    p.add_argument("--app-requests", type=int, default=30, help="requests through the whole app per route")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--served", type=float, metavar="SECONDS", help="measure the served path instead (see above)")
    p.add_argument("--concurrency", type=int, default=16, help="--served: requests in flight")
    p.add_argument("--workers", type=int, default=2, help="--served: WHISPER_GATEWAY_WORKERS of our gateway")
    p.add_argument("--gateway-root", type=Path, default=REPO, help="--served: source tree our gateway runs from")
    p.add_argument("--out", type=Path, default=Path("gateway-profile-out"), help="--served: work folder")
    args = p.parse_args(argv)
    if args.served:
        result: dict[str, Any] = served(args.served, args.concurrency, args.workers, args.gateway_root, args.out)
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return 0
    data = args.audio.read_bytes() if args.audio else speech_wav()
    result = {"stages_ms": stages(data, args.repeat)}
    result["app_cpu_ms_per_request"] = whole_app(data, args.app_requests)
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
