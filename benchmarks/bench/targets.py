"""Where the benchmark sends audio: the gateway's two routes or Triton gRPC directly.

A target spec is ``NAME=URL``:

- ``http://host:port`` or ``http://host:port/invocations`` — gateway, SageMaker-style JSON
  ``{"audio_data": <base64>, "whisper_prompt": ""}``, success = HTTP 200 and ``"code": 0``.
- ``http://host:port/v1/audio/transcriptions`` — gateway, OpenAI multipart, success = HTTP 200
  and a JSON ``text`` field.
- ``grpc://host:port`` — Triton's ``whisper`` model (docs/contracts.md §5) through the
  gateway's own client (:class:`whisper_build.serving.gateway.backend.TritonBackend`): all windows of a
  file in one request, as the gateway sends them.

Every :meth:`Target.send` returns a status string: ``ok``, ``http_<code>``, ``timeout``,
``connection_error``, ``unavailable``, ``triton_error`` or ``bad_response``.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from benchmarks.bench.audio import AudioSample, BenchInputError
from benchmarks.bench.stats import OK

INVOCATIONS = "/invocations"
OPENAI = "/v1/audio/transcriptions"


class Target(Protocol):
    """A server under test."""

    name: str

    async def send(self, sample: AudioSample, timeout: float) -> str:
        """Transcribe ``sample`` once within ``timeout`` seconds; returns the status string."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


@dataclass(frozen=True)
class TargetSpec:
    """A parsed ``NAME=URL``: ``kind`` is ``invocations``, ``openai`` or ``triton``; ``address``
    is the base URL (HTTP) or ``host:port`` (gRPC).
    """

    name: str
    kind: str
    address: str


def parse_target(spec: str) -> TargetSpec:
    """Parse ``NAME=URL`` (see the module docstring).

    Raises:
        BenchInputError: no ``=``, empty name, unknown scheme or path, or no host/port.
    """
    name, sep, url = spec.partition("=")
    if not sep or not name.strip() or not url.strip():
        raise BenchInputError(
            f"target {spec!r}: write NAME=URL, e.g. gateway=http://127.0.0.1:8080 or triton=grpc://127.0.0.1:8001"
        )
    parts = urlsplit(url.strip())
    if not parts.hostname or parts.port is None:
        raise BenchInputError(f"target {spec!r}: the URL needs a host and a port")
    if parts.scheme == "grpc":
        return TargetSpec(name.strip(), "triton", f"{parts.hostname}:{parts.port}")
    if parts.scheme in ("http", "https"):
        base = f"{parts.scheme}://{parts.netloc}"
        path = parts.path.rstrip("/")
        if path in ("", INVOCATIONS):
            return TargetSpec(name.strip(), "invocations", base)
        if path == OPENAI:
            return TargetSpec(name.strip(), "openai", base)
        raise BenchInputError(f"target {spec!r}: path must be empty, {INVOCATIONS} or {OPENAI}")
    raise BenchInputError(f"target {spec!r}: scheme must be http, https or grpc")


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
    """Gateway ``POST /v1/audio/transcriptions`` (multipart ``file``, ``response_format=json``)."""

    async def send(self, sample: AudioSample, timeout: float) -> str:
        result = await self._post(
            timeout, url=OPENAI, files={"file": (sample.name, sample.data)},
            data={"model": "whisper", "response_format": "json"},
        )  # fmt: skip
        return result if isinstance(result, str) else _http_status(result, "text")


class TritonTarget:
    """Triton gRPC through the gateway's :class:`~whisper_build.serving.gateway.backend.TritonBackend`."""

    def __init__(self, spec: TargetSpec, model: str) -> None:
        from whisper_build.serving.gateway.backend import TritonBackend
        from whisper_build.serving.prompt import parse_prompt

        self.name = spec.name
        self._backend = TritonBackend(spec.address, model)
        self._prefix = parse_prompt("").to_text_prefix()  # what the gateway sends for no prompt

    async def send(self, sample: AudioSample, timeout: float) -> str:
        from whisper_build.serving.gateway.backend import BackendError, BackendTimeout, BackendUnavailable

        try:
            texts = await self._backend.transcribe(sample.windows, self._prefix, 1.0, timeout)
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
    """Create the client for ``spec``; HTTP targets get ``max_concurrency`` connections."""
    if spec.kind == "triton":
        return TritonTarget(spec, model)
    if spec.kind == "openai":
        return OpenAITarget(spec, max_concurrency)
    return InvocationsTarget(spec, max_concurrency)


__all__ = ["BenchInputError", "Target", "TargetSpec", "open_target", "parse_target"]
