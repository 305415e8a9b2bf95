"""BENCHMARK BASELINE, NOT PRODUCT CODE: the seeds' reference gateway design, reproduced minimally.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/benchmarks.md, "Reference run (CPU, this machine)".
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import queue

import numpy as np
import soundfile
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from whisper_build.serving import contract
from whisper_build.serving.prompt import parse_prompt
from whisper_build.serving.transcription.request import WindowRequest
from whisper_build.serving.transcription.triton import STREAM_STATUS_HEADERS
from whisper_build.serving.transcription.triton_inputs import infer_inputs, scheduler_parameters


def create_app(triton_url: str, model_name: str = "whisper") -> FastAPI:
    """The reference design's app: ``POST /invocations`` (sync gRPC in an async handler) and ``GET /ping``.

    The model is reached over a gRPC stream (a decoupled model refuses unary ``ModelInfer``): one
    stream per request on the synchronous client, waited for in the handler as ``infer`` was.
    """
    from tritonclient.grpc import InferenceServerClient, InferRequestedOutput

    client = InferenceServerClient(url=triton_url)  # the synchronous client, as in the samples
    app = FastAPI(title="reference gateway (benchmark baseline)")

    @app.get("/ping")
    async def ping() -> JSONResponse:
        ready = client.is_model_ready(model_name)
        return JSONResponse({"status": "ok" if ready else "loading"}, status_code=200 if ready else 503)

    @app.post("/invocations")
    async def invocations(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        audio = base64.b64decode(body["audio_data"])
        samples, _rate = soundfile.read(io.BytesIO(audio), dtype="float32")
        if samples.ndim > 1:
            samples = samples.mean(axis=1, dtype=np.float32)
        inputs = infer_inputs([samples], WindowRequest(parse_prompt(body.get("whisper_prompt") or "")))
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=STREAM_STATUS_HEADERS)
        try:
            client.async_stream_infer(
                model_name,
                inputs,
                outputs=[InferRequestedOutput(contract.TRANSCRIPTS.name)],
                parameters=scheduler_parameters(0, 600.0),
            )
            result, error = answers.get(timeout=600)  # blocks the loop
        finally:
            client.stop_stream()
        if error is not None:
            raise error
        text = result.as_numpy(contract.TRANSCRIPTS.name).reshape(-1)[0].decode()
        return JSONResponse({"code": 0, "message": "Success", "transcribe_text": text})

    return app


def main(argv: list[str] | None = None) -> int:
    """CLI (``--help``).

    The common sample design this project replaces: a FastAPI ``async def invocations`` that
    base64-decodes ``audio_data``, reads it with ``soundfile`` (no resampling: 16 kHz input
    assumed; channels averaged), and calls the SYNCHRONOUS ``tritonclient.grpc.InferenceServerClient.infer``
    inside the async handler, so the event loop is blocked for the whole inference and requests in
    one process reach Triton one at a time. Same JSON contract as our gateway's ``/invocations``
    (``{"audio_data", "whisper_prompt"}`` → ``{"code", "message", "transcribe_text"}``) and the same
    Triton model inputs (:func:`whisper_build.serving.transcription.triton_inputs.infer_inputs`: ``WAV``,
    ``WAV_LENS``, ``TEXT_PREFIX``, ``REPETITION_PENALTY``, ``TIMESTAMPS``, ``WORD_TIMESTAMPS``,
    ``TEMPERATURE``; one row for the whole clip, which must be ≤ 30 s), so that "our gateway ÷ the
    reference design on the same Triton" compares the gateways alone. It has none of the product's
    guarantees (no admission, no limits, no streaming decode, no windowing, errors as 500s).

    Run: ``python -m benchmarks.reference_gateway --triton-url 127.0.0.1:8001 --port 8090`` (one uvicorn
    process, as the samples run it); ``WHISPER_GATEWAY_PORT`` / ``WHISPER_GATEWAY_TRITON_URL`` are read
    too, so :class:`benchmarks.reference.GatewayProcess` can start it (``module=...``). The bench tool
    measures it with an ``http://host:port/invocations`` target (same contract as our gateway).
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--triton-url", default=os.environ.get("WHISPER_GATEWAY_TRITON_URL", "127.0.0.1:8001"))
    p.add_argument("--port", type=int, default=int(os.environ.get("WHISPER_GATEWAY_PORT", "8090")))
    p.add_argument("--host", default="127.0.0.1")
    args = p.parse_args(argv)
    uvicorn.run(create_app(args.triton_url), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
