"""A stand-in for ``vllm serve`` in the side-by-side benchmark's tests (never a measurement).

``python -m tests.support.fake_openai_server serve MODEL --port N [any vllm flag...]`` serves, on 127.0.0.1:
``GET /health``, ``GET /v1/models`` (the ``--served-model-name``), ``GET /metrics`` (vLLM's counter names),
``POST /v1/audio/transcriptions`` (multipart; answers ``{"text": ...}`` with the file's text from
``FAKE_TEXTS`` (JSON file name → text, an environment variable) or ``hello``; counts
``max_completion_tokens`` as generated tokens) and ``GET /debug/requests`` (every form received, the
file replaced by its name and size). ``FAKE_READY_AFTER_S`` delays readiness (``/health`` 503 until then).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import uvicorn
from fastapi import FastAPI, Request, Response


def build_app(served_name: str, texts: dict[str, str], ready_at: float) -> FastAPI:
    """The fake server's routes (see the module docstring)."""
    app = FastAPI()
    state: dict = {"requests": [], "tokens": 0}

    @app.get("/health")
    def health() -> Response:
        return Response(status_code=200 if time.monotonic() >= ready_at else 503)

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served_name, "object": "model"}]}

    @app.get("/metrics")
    def metrics() -> Response:
        body = (
            f'vllm:generation_tokens_total{{engine="0",model_name="{served_name}"}} {state["tokens"]}\n'
            f'vllm:request_success_total{{engine="0",finished_reason="length"}} {len(state["requests"])}\n'
            'vllm:request_success_total{engine="0",finished_reason="stop"} 0\n'
        )
        return Response(body, media_type="text/plain")

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request) -> dict:
        form = await request.form()
        received: dict[str, object] = {}
        name = ""
        for key, value in form.multi_items():
            if isinstance(value, str):
                received[key] = value
            else:
                name = value.filename or ""
                received[key] = {"filename": name, "bytes": len(await value.read())}
        state["requests"].append(received)
        state["tokens"] += int(str(received.get("max_completion_tokens", "0")))
        return {"text": texts.get(name, "hello"), "usage": {"type": "duration", "seconds": 1}}

    @app.get("/debug/requests")
    def debug() -> list:
        return state["requests"]

    return app


def main(argv: list[str] | None = None) -> int:
    """Parse vllm's ``serve MODEL --port N --served-model-name NAME`` (other flags ignored) and serve."""
    parser = argparse.ArgumentParser()
    parser.add_argument("command")
    parser.add_argument("model")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--served-model-name", default="model")
    args, _ = parser.parse_known_args(argv)
    texts = json.loads(os.environ.get("FAKE_TEXTS", "{}"))
    ready_at = time.monotonic() + float(os.environ.get("FAKE_READY_AFTER_S", "0"))
    app = build_app(args.served_model_name, texts, ready_at)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
