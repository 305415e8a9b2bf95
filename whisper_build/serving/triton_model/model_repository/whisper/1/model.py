"""Triton python-backend model ``whisper``: a decoupled front over the model's own scheduler.

Inputs/outputs and parameters: docs/contracts.md §5 (gRPC streaming only: Triton refuses unary and
HTTP inference for a decoupled model). Each request is parsed, submitted at its priority level with
its deadline to the scheduler (``triton_model/scheduler.py``, or the ``torch`` engine's in-flight one:
``triton_model/inflight_front.py``) and answered with ONE final response. The logic lives in
``whisper_build.serving.triton_model`` (unit-tested without a server); this file only moves tensors.
Every ``pb_utils`` call (send, ``is_cancelled``, custom metrics) happens on the stub's event-loop thread:
the scheduler's threads only note values, flushed to Triton before each answer (one flush per loop tick)
and every 0.1 s; cancellation is polled at a bounded pace (``front.py``).
The repository root must be importable (the local launcher puts it on ``PYTHONPATH``; the image sets
``PYTHONPATH=/app``).
"""

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from whisper_build.serving import contract
from whisper_build.serving.engines import EngineParams, load_engine
from whisper_build.serving.triton_model.batching import (
    RequestError,
    RequestWindows,
    parse_request,
    results_array,
    transcripts_array,
)
from whisper_build.serving.triton_model.cancellation import WorkCounters
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.front import CancelPolls, CoalescedFlush, error_code, read_parameters, wait_for
from whisper_build.serving.triton_model.repository import BatchingConfig, check_declared_multilingual
from whisper_build.serving.triton_model.scheduler import SchedulerConfig, StaticScheduler
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics
from whisper_build.serving.triton_model.stages import StageClock, StageCounters

FLUSH_S = 0.1
"""Seconds between two flushes of the scheduler's values to Triton's metrics while requests wait."""


class TritonPythonModel:
    """Loads the engine named by the ``engine`` model-config parameter and starts the scheduler."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read ``parameters`` from the model config, load the engine, start the scheduler (raises on bad config).

        A relative ``model_path`` is resolved against this model's directory
        (``args["model_repository"]``), so a published repository can be mounted anywhere.
        """
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise ValueError("the whisper model must be decoupled: model_transaction_policy { decoupled: true }")
        raw = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        params = EngineParams.from_strings({k: v for k, v in raw.items() if k in EngineParams.model_fields})
        batching = BatchingConfig.from_model_parameters(raw)
        self._engine = load_engine(params.relative_to(Path(args["model_repository"])))
        check_declared_multilingual(raw, self._engine.multilingual)
        policy = DecodingPolicy.from_params(params)
        family = getattr(pb_utils, "MetricFamily", None)  # custom metrics: python backend >= 23.05
        counter = family.COUNTER if family is not None else None
        self._stages = StageCounters(family, counter)
        self._work = WorkCounters(family, counter)
        metrics = SchedulerMetrics(args["model_name"], family)
        self._metrics = metrics
        self._flusher: asyncio.Task[None] | None = None
        self._polls = CancelPolls()
        self._flush_before_answer = CoalescedFlush(self._flush)
        scheduling = SchedulerConfig.from_batching(batching, params.max_engine_batch)
        if scheduling.mode == "inflight":
            from whisper_build.serving.triton_model.inflight_front import InflightFront

            self._scheduler: Any = InflightFront(self._engine, policy, scheduling, metrics, best_of=params.best_of)
        else:
            self._scheduler = StaticScheduler(
                self._engine, policy, scheduling, metrics, self._batch_done, self._work.count_windows
            )

    def _batch_done(self, clock: StageClock, engine: Any) -> None:
        self._stages.add(clock)
        self._work.add(engine)

    def _flush(self) -> None:
        """Hand the values the scheduler noted to Triton's metrics (the event-loop thread only)."""
        self._metrics.flush()
        self._stages.flush()
        self._work.flush()

    async def _flush_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            self._flush()

    async def execute(self, requests: list[Any]) -> None:
        """Serve every request on its own; each gets one final response through its response sender."""
        if self._flusher is None:  # the gauges move while requests wait: flush them on the loop, periodically
            self._flusher = asyncio.get_running_loop().create_task(self._flush_every(FLUSH_S))
        await asyncio.gather(*(self._serve(request) for request in requests))

    async def _serve(self, request: Any) -> None:
        """Parse, submit, wait (polling the client's cancellation), answer once with COMPLETE_FINAL.

        Errors (docs/contracts.md §5): bad input INVALID_ARG; a full queue UNAVAILABLE "Exceeds
        maximum queue size"; a deadline passed while waiting UNAVAILABLE "Request timeout expired";
        cancelled CANCELLED; an engine failure INTERNAL.
        """
        sender = request.get_response_sender()
        is_cancelled: Callable[[], bool] = (
            getattr(sender, "is_cancelled", None) or getattr(request, "is_cancelled", None) or (lambda: False)
        )
        clock = StageClock()
        try:
            with clock.stage("parse"):
                level, timeout_s, windows = self._parse(request)
            job = self._scheduler.submit(windows, level, timeout_s)
            result = await wait_for(job.future, is_cancelled, lambda: self._scheduler.cancel(job), self._polls)
            with clock.stage("response"):
                texts = pb_utils.Tensor(contract.TRANSCRIPTS.name, transcripts_array([w.text for w in result]))
                structured = pb_utils.Tensor(contract.RESULT.name, results_array(result))
                response = pb_utils.InferenceResponse(output_tensors=[texts, structured])
        except Exception as error:  # noqa: BLE001 - every failure is answered to its own request
            code = getattr(pb_utils.TritonError, error_code(error), pb_utils.TritonError.INTERNAL)
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error), code))
        self._stages.add(clock)
        await self._flush_before_answer()  # a client that sees its answer sees its windows counted
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _parse(request: Any) -> tuple[int, float | None, RequestWindows]:
        """The request's level, timeout and windows (RequestError: bad input; RuntimeError: unreadable)."""
        try:
            level, timeout_s = read_parameters(request.parameters())
            arrays = {}
            for spec in contract.INPUTS:
                tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
                arrays[spec.name] = None if tensor is None else tensor.as_numpy()
            return level, timeout_s, parse_request(arrays)
        except RequestError:
            raise
        except Exception as error:
            raise RuntimeError(f"could not read the request: {type(error).__name__}: {error}") from error

    def finalize(self) -> None:
        """Stop the scheduler: waiting requests are answered with an error."""
        if self._flusher is not None:  # finalize runs on the stub's main thread, the task on its loop
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._flusher.get_loop().call_soon_threadsafe(self._flusher.cancel)
        self._scheduler.close()
