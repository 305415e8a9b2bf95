"""Where the benchmark sends audio: the gateway's two routes or Triton gRPC directly.

Entry point: :func:`open_target` (the details, in its docstring). Docs: docs/contracts.md §5.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import parse_qsl, urlsplit

import httpx
import numpy as np

from benchmarks.bench.audio import AudioSample, BenchInputError
from benchmarks.bench.forced_tokens import FORCED_TOKENS, forced_fields
from benchmarks.bench.stats import OK
from whisper_build.serving.transcription.request import WindowRequest

if TYPE_CHECKING:
    from whisper_build.serving.contract import DecodeOptions
    from whisper_build.serving.results import WindowResult
    from whisper_build.serving.triton_model.decoding import DecodingPolicy

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


class InProcessTarget:
    """The engine and the Triton model's decoding layer called in this process: the floor under any server.

    Each engine call is :func:`whisper_build.serving.triton_model.batching.run_batch`, what the
    Triton model's ``execute()`` runs (fallback, signals, segments), so a server is compared with
    the same work minus serving. Requests that arrive while the engine is busy wait, and the next
    call takes all that wait (up to ``max_batch`` windows): an ideal dynamic batcher with no queue
    delay. The engine runs in one worker thread, so the event loop keeps issuing requests.

    Raises:
        BenchInputError: the query does not describe valid engine parameters.
    """

    def __init__(self, spec: TargetSpec) -> None:
        from whisper_build.serving.contract import DecodeOptions
        from whisper_build.serving.engines import EngineParams, EngineParamsError, load_engine
        from whisper_build.serving.prompt import parse_prompt
        from whisper_build.serving.triton_model.decoding import DecodingPolicy

        values = dict(parse_qsl(spec.address))
        self.max_batch = int(values.pop("max_batch", "64"))
        try:
            params = EngineParams.from_strings(values)
        except EngineParamsError as error:
            raise BenchInputError(f"target {spec.name}: {error}") from error
        self.name = spec.name
        self.engine = load_engine(params)
        self.policy = DecodingPolicy.from_params(params)
        """Fallback and silence thresholds, as the Triton model reads them from the same parameters."""
        self.options = DecodeOptions.transcript()
        """Per-window options of :meth:`send` (what every gateway route sends: timestamp tokens on)."""
        self._prompt = parse_prompt("")
        self._pending: list[tuple[Sequence[np.ndarray], asyncio.Future[list[WindowResult]]]] = []
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")
        self.batches: list[int] = []
        """Windows per engine call, in order (the in-process "average batch")."""

    def decode(
        self,
        requests: Sequence[Sequence[np.ndarray]],
        options: DecodeOptions | None = None,
        policy: DecodingPolicy | None = None,
    ) -> list[list[WindowResult] | Exception]:
        """Decode these requests' windows in one ``run_batch`` call (blocking).

        Args:
            requests: per request, its 16 kHz windows.
            options: per-window options (default :attr:`options`).
            policy: thresholds (default :attr:`policy`).

        Returns:
            Per request, its window results or the exception the model would answer with.
        """
        from whisper_build.serving.triton_model.batching import RequestWindows, run_batch

        chosen = options or self.options
        batch: list[RequestWindows | Exception] = [
            RequestWindows(list(w), [self._prompt] * len(w), [1.0] * len(w), [chosen] * len(w)) for w in requests
        ]
        return run_batch(self.engine, batch, policy or self.policy)

    async def send(self, sample: AudioSample, timeout: float) -> str:
        """See :meth:`Target.send`: queue the sample's windows for the next engine call and wait."""
        loop = asyncio.get_running_loop()
        if self._worker is None:
            self._wakeup = asyncio.Event()
            self._worker = loop.create_task(self._run())
        future: asyncio.Future[list[WindowResult]] = loop.create_future()
        self._pending.append((sample.windows, future))
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            results = await asyncio.wait_for(asyncio.shield(future), timeout)
        except TimeoutError:
            return "timeout"
        except Exception:  # noqa: BLE001 - any engine failure is one error status
            return "engine_error"
        return OK if len(results) == len(sample.windows) else "bad_response"

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._wakeup is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while self._pending:
                taken, size = 0, 0
                while taken < len(self._pending) and (
                    taken == 0 or size + len(self._pending[taken][0]) <= self.max_batch
                ):
                    size += len(self._pending[taken][0])
                    taken += 1
                batch, self._pending = self._pending[:taken], self._pending[taken:]
                self.batches.append(sum(len(request) for request, _ in batch))
                try:
                    outcomes = await loop.run_in_executor(self._executor, self.decode, [r for r, _ in batch])
                except Exception as error:  # noqa: BLE001 - handed to every waiting request
                    outcomes = [error] * len(batch)
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if future.done():
                        continue
                    if isinstance(outcome, Exception):
                        future.set_exception(outcome)
                    else:
                        future.set_result(outcome)

    async def close(self) -> None:
        """Stop the batching task and the engine thread (a running engine call finishes on its own)."""
        if self._worker is not None:
            self._worker.cancel()
        self._executor.shutdown(wait=False)


class CoreTarget:
    """The engine-core process driven by a synthetic client in this process: no Triton, no gateway.

    The same :class:`~whisper_build.serving.engine_core.client.CoreClient` as the Triton stub's (audio as
    16-bit PCM over ZMQ, the core's scheduler), one request per file. Query: :class:`EngineParams` fields
    plus ``max_batch`` (rows), ``scheduler`` (``static``/``inflight``) and ``queue_delay_us``.
    """

    def __init__(self, spec: TargetSpec) -> None:
        from whisper_build.serving.engine_core.client import CoreClient
        from whisper_build.serving.engine_core.core import CoreConfig
        from whisper_build.serving.engines import EngineParams
        from whisper_build.serving.triton_model.scheduler import SchedulerConfig

        values = dict(parse_qsl(spec.address))
        max_batch = int(values.pop("max_batch", "64"))
        mode = values.pop("scheduler", "static")
        delay_s = int(values.pop("queue_delay_us", "2000")) / 1e6
        params = EngineParams.from_strings(values)
        scheduling = SchedulerConfig(mode=mode, max_batch_windows=max_batch, max_queue_delay_s=delay_s,
                                     max_queue_size=1024, bulk_max_queue_size=1024)  # fmt: skip
        self.name = spec.name
        self._loop: asyncio.AbstractEventLoop | None = None
        config = CoreConfig(requests="", answers="", parent=0, params=params.model_dump(),
                            scheduling=scheduling.model_dump())  # fmt: skip
        self._client = CoreClient(config, self._answered)
        self._client.start()

    def _answered(self, handle: object, answer: object) -> None:
        future: asyncio.Future[object] = handle  # type: ignore[assignment]
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: None if future.done() else future.set_result(answer))

    async def send(self, sample: AudioSample, timeout: float) -> str:
        """See :meth:`Target.send`: one request of the sample's windows through the core."""
        from whisper_build.serving import contract
        from whisper_build.serving.transcription.triton import pack_batch
        from whisper_build.serving.triton_model.batching import parse_request

        self._loop = asyncio.get_running_loop()
        wav, lens = pack_batch(sample.windows)
        request = parse_request({contract.WAV.name: wav, contract.WAV_LENS.name: lens,
                                 contract.TIMESTAMPS.name: np.ones((len(lens), 1), dtype=bool)})  # fmt: skip
        future: asyncio.Future[object] = self._loop.create_future()
        self._client.submit(future, lambda: False, contract.SYNC_PRIORITY, None, request, wav)
        try:
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            return "timeout"
        texts = getattr(answer, "texts", None)
        if texts is None:
            return "unavailable" if getattr(answer, "code", "") == "UNAVAILABLE" else "engine_error"
        return OK if len(texts) == len(sample.windows) else "bad_response"

    async def close(self) -> None:
        """Stop the core."""
        await asyncio.get_running_loop().run_in_executor(None, self._client.close)


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
