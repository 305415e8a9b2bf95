"""Targets that run the engine in this process: the engine alone or the engine-core process.

The floors under any server (:class:`InProcessTarget`, :class:`CoreTarget`), opened by
:func:`benchmarks.bench.targets.open_target` for ``engine:`` and ``core:`` URLs.
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

import numpy as np

from benchmarks.bench.audio import AudioSample, BenchInputError
from benchmarks.bench.stats import OK
from benchmarks.bench.target_spec import TargetSpec

if TYPE_CHECKING:
    from whisper_build.serving.contract import DecodeOptions
    from whisper_build.serving.results import WindowResult
    from whisper_build.serving.triton_model.decoding import DecodingPolicy


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
        from whisper_build.serving.transcription.triton_inputs import pack_batch
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
