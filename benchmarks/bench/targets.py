"""Where the benchmark sends audio: the gateway's two routes or Triton gRPC directly.

Entry point: :func:`open_target` (the details, in its docstring); the spec and its parser live in
:mod:`~benchmarks.bench.target_spec`, the in-process targets in :mod:`~benchmarks.bench.local_targets`.
Docs: docs/contracts.md §5.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from urllib.parse import urlsplit

import httpx

from benchmarks.bench.audio import AudioSample, BenchInputError
from benchmarks.bench.forced_tokens import FORCED_TOKENS, forced_fields
from benchmarks.bench.local_targets import CoreTarget, InProcessTarget
from benchmarks.bench.stats import OK
from benchmarks.bench.target_spec import INVOCATIONS, OPENAI, Target, TargetSpec, parse_target
from whisper_build.serving.transcription.request import WindowRequest


def _http_status(response: httpx.Response, success_key: str, success_value: object = None) -> str:
    """``ok`` when 200 and the JSON body has ``success_key`` (equal to ``success_value`` if given)."""
    if response.status_code != 200:
        return f"http_{response.status_code}"
    try:
        body = response.json()
    except ValueError:
        return "bad_response"
    if not isinstance(body, dict) or success_key not in body:
        return "bad_response"
    if success_value is not None and body[success_key] != success_value:
        return "bad_response"
    return OK


class _HttpTarget:
    """Shared HTTP plumbing: one ``httpx.AsyncClient`` with enough connections for the sweep."""

    def __init__(self, spec: TargetSpec, max_connections: int) -> None:
        self.name = spec.name
        self._client = httpx.AsyncClient(
            base_url=spec.address,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def _post(self, timeout: float, **kwargs: object) -> httpx.Response | str:
        """POST; returns the response or ``timeout`` / ``connection_error``."""
        try:
            return await self._client.post(timeout=timeout, **kwargs)  # type: ignore[arg-type]
        except httpx.TimeoutException:
            return "timeout"
        except httpx.TransportError:
            return "connection_error"

    async def close(self) -> None:
        await self._client.aclose()


class InvocationsTarget(_HttpTarget):
    """Gateway ``POST /invocations``; the JSON body of each file is built once."""

    def __init__(self, spec: TargetSpec, max_connections: int) -> None:
        super().__init__(spec, max_connections)
        self._bodies: dict[str, bytes] = {}

    def _body(self, sample: AudioSample) -> bytes:
        if sample.name not in self._bodies:
            self._bodies[sample.name] = json.dumps(
                {"audio_data": base64.b64encode(sample.data).decode("ascii"), "whisper_prompt": ""}
            ).encode()
        return self._bodies[sample.name]

    async def send(self, sample: AudioSample, timeout: float) -> str:
        result = await self._post(
            timeout, url=INVOCATIONS, content=self._body(sample),
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        return result if isinstance(result, str) else _http_status(result, "code", 0)


class OpenAITarget(_HttpTarget):
    """``POST /v1/audio/transcriptions`` (multipart ``file``, ``response_format=json``).

    The gateway, or any OpenAI-compatible server (vLLM's).

    ``form`` adds or replaces form fields, e.g. ``{"response_format": "verbose_json",
    "timestamp_granularities[]": "word"}``, after the target URL's query (``spec.form``); the key
    :data:`FORCED_TOKENS` is not sent but turned into per-window fields (:func:`forced_fields`).
    """

    def __init__(self, spec: TargetSpec, max_connections: int, form: dict[str, str] | None = None) -> None:
        super().__init__(spec, max_connections)
        self.form = {"model": "whisper", "response_format": "json", **dict(spec.form), **(form or {})}
        self._forced = self.form.pop(FORCED_TOKENS, None)
        self._forms: dict[str, dict[str, str]] = {}

    def form_for(self, sample: AudioSample) -> dict[str, str]:
        """The form fields sent with ``sample`` (built once per file)."""
        if sample.name not in self._forms:
            extra = forced_fields(self._forced, sample) if self._forced else {}
            self._forms[sample.name] = {**self.form, **extra}
        return self._forms[sample.name]

    async def send(self, sample: AudioSample, timeout: float) -> str:
        """See :meth:`Target.send`: success = HTTP 200 with a JSON ``text``."""
        result = await self.transcribe(sample, timeout)
        return result if isinstance(result, str) else _http_status(result, "text")

    async def transcribe(self, sample: AudioSample, timeout: float) -> httpx.Response | str:
        """POST ``sample``; the response, or ``timeout`` / ``connection_error``."""
        files = {"file": (sample.name, sample.data)}
        return await self._post(timeout, url=OPENAI, files=files, data=self.form_for(sample))


class TritonTarget:
    """Triton gRPC through the gateway's :class:`~whisper_build.serving.transcription.triton.TritonBackend`."""

    def __init__(self, spec: TargetSpec, model: str) -> None:
        from whisper_build.serving.prompt import parse_prompt
        from whisper_build.serving.transcription.triton import TritonBackend

        self.name = spec.name
        self._backend = TritonBackend(spec.address, model)
        self._request = WindowRequest(parse_prompt(""))  # what the gateway sends for no prompt

    async def send(self, sample: AudioSample, timeout: float) -> str:
        from whisper_build.serving.transcription.backend import BackendError, BackendTimeout, BackendUnavailable

        try:
            texts = await self._backend.infer(sample.windows, self._request, timeout)
        except BackendTimeout:
            return "timeout"
        except BackendUnavailable:
            return "unavailable"
        except BackendError:
            return "triton_error"
        return OK if len(texts) == len(sample.windows) else "bad_response"

    async def close(self) -> None:
        await self._backend.close()


def open_target(spec: TargetSpec, max_concurrency: int, model: str = "whisper") -> Target:
    """Create the client for ``spec``; HTTP targets get ``max_concurrency`` connections.

    A target spec is ``NAME=URL``:

    - ``http://host:port`` or ``http://host:port/invocations`` — gateway, SageMaker-style JSON
      ``{"audio_data": <base64>, "whisper_prompt": ""}``, success = HTTP 200 and ``"code": 0``.
    - ``http://host:port/v1/audio/transcriptions[?field=value&...]`` — gateway (or any OpenAI-compatible
      server, e.g. vLLM's), OpenAI multipart, success = HTTP 200 and a JSON ``text`` field; the query's
      fields go with every request (``forced_tokens=100`` or ``=mixed``: :func:`forced_fields`).
    - the seeds' reference gateway design (:mod:`benchmarks.reference_gateway`, a benchmark baseline)
      speaks the same ``/invocations`` contract: ``reference_gateway=http://host:port/invocations``
      (``benchmarks/gpu_served.py`` and ``benchmarks/gateway_profile.py --served`` start and name it so).
    - ``grpc://host:port`` — Triton's ``whisper`` model (docs/contracts.md §5) through the
      gateway's own client (:class:`whisper_build.serving.transcription.triton.TritonBackend`): all windows of a
      file in one request, as the gateway sends them.
    - ``engine:?engine=torch&model_path=...&max_batch=64`` — the engine and the Triton model's
      decoding layer in this process, no server (:class:`InProcessTarget`): query keys are :class:`~whisper_build.serving.engines.EngineParams`
      fields plus ``max_batch`` (most windows per engine call, default 64).
    - ``core:?engine=torch&model_path=...&max_batch=64&scheduler=inflight`` — the engine-core process
      driven from this process without Triton (:class:`CoreTarget`).

    Every :meth:`Target.send` returns a status string: ``ok``, ``http_<code>``, ``timeout``,
    ``connection_error``, ``unavailable``, ``triton_error`` or ``bad_response``.
    """
    if spec.kind == "in_process":
        return InProcessTarget(spec)
    if spec.kind == "engine_core":
        return CoreTarget(spec)
    if spec.kind == "triton":
        return TritonTarget(spec, model)
    if spec.kind == "openai":
        return OpenAITarget(spec, max_concurrency)
    return InvocationsTarget(spec, max_concurrency)


__all__ = [
    "BenchInputError",
    "CoreTarget",
    "InProcessTarget",
    "OpenAITarget",
    "Target",
    "TargetSpec",
    "open_target",
    "parse_target",
]


async def unreachable(spec: TargetSpec, timeout: float = 3.0) -> str | None:
    """Why ``spec``'s server cannot be reached, or ``None`` when a TCP connection opens in ``timeout`` s.

    In-process targets always pass. Checked before the sweep, so that a dead server fails the run at
    once instead of after a full sweep of ``connection_error``.
    """
    if spec.kind in ("in_process", "engine_core"):
        return None
    if spec.kind == "triton":
        host, _, port = spec.address.rpartition(":")
    else:
        parts = urlsplit(spec.address)
        host, port = parts.hostname or "", str(parts.port or (443 if parts.scheme == "https" else 80))
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
    except (TimeoutError, OSError) as err:
        if isinstance(err, asyncio.TimeoutError):
            reason = f"no answer within {timeout:g} s"
        else:
            reason = os.strerror(err.errno) if err.errno else str(err)
        return f"target {spec.name}: cannot connect to {host}:{port} ({reason}); is the server running?"
    writer.close()
    await writer.wait_closed()
    return None
