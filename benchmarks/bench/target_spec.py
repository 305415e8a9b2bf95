"""What a benchmark target is: the ``NAME=URL`` spec, its parser and the client protocol.

Parsed here, opened by :func:`benchmarks.bench.targets.open_target` (the URL forms, in its docstring).
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

from benchmarks.bench.audio import AudioSample, BenchInputError

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
    """A parsed ``NAME=URL`` benchmark target.

    ``kind`` is ``invocations``, ``openai``, ``triton`` or ``in_process``; ``address`` is the base URL
    (HTTP), ``host:port`` (gRPC) or the query string (``in_process``); ``form``: the ``openai`` URL's
    query, form fields sent with every request (:class:`OpenAITarget`).
    """

    name: str
    kind: str
    address: str
    form: tuple[tuple[str, str], ...] = ()


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
    if parts.scheme == "engine":
        return TargetSpec(name.strip(), "in_process", parts.query)
    if parts.scheme == "core":
        return TargetSpec(name.strip(), "engine_core", parts.query)
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
            return TargetSpec(name.strip(), "openai", base, tuple(parse_qsl(parts.query)))
        raise BenchInputError(f"target {spec!r}: path must be empty, {INVOCATIONS} or {OPENAI}")
    raise BenchInputError(f"target {spec!r}: scheme must be http, https, grpc or engine")
