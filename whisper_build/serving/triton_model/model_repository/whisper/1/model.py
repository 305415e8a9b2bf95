"""Triton python-backend model ``whisper``: a thin decoupled stub over the engine-core process.

Inputs/outputs and parameters: docs/contracts.md §5 (gRPC streaming only: Triton refuses unary and
HTTP inference for a decoupled model). ``initialize`` starts the engine core, a child process that
owns the engine and its scheduler (``whisper_build/serving/engine_core``); ``execute`` parses each
request, hands it over (audio as 16-bit PCM over ZMQ) and returns at once. A receiver thread reads the
answers, a sender thread sends each request's ONE final response, a sweeper looks at every open
request's cancellation every 75 ms and watches the core (a dead core's requests are answered
UNAVAILABLE and a new core is started). The logic lives in ``whisper_build.serving`` (unit-tested
without a server); this file only moves tensors. The repository root must be importable (the local
launcher puts it on ``PYTHONPATH``; the image sets ``PYTHONPATH=/app``).
"""

import json
import os
import time
from pathlib import Path
from typing import Any

import triton_python_backend_utils as pb_utils

from whisper_build.serving import contract
from whisper_build.serving.engine_core.client import Answer, CoreClient
from whisper_build.serving.engine_core.core import CoreConfig
from whisper_build.serving.engine_core.echo import ECHO_VARIABLE
from whisper_build.serving.engine_core.gauges import CoreGauges
from whisper_build.serving.engines import EngineParams
from whisper_build.serving.triton_model.batching import RequestError, RequestWindows, parse_request
from whisper_build.serving.triton_model.cancellation import WorkCounters
from whisper_build.serving.triton_model.front import read_parameters
from whisper_build.serving.triton_model.repository import BatchingConfig, check_declared_multilingual
from whisper_build.serving.triton_model.scheduler import SchedulerConfig
from whisper_build.serving.triton_model.scheduler_metrics import SchedulerMetrics
from whisper_build.serving.triton_model.stages import StageCounters


class TritonPythonModel:
    """Starts the engine core for the engine the ``engine`` model-config parameter names; a thin stub over it."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read ``parameters`` from the model config, start the engine core and wait for its engine (raises on bad config).

        A relative ``model_path`` is resolved against this model's directory
        (``args["model_repository"]``), so a published repository can be mounted anywhere.
        """
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise ValueError("the whisper model must be decoupled: model_transaction_policy { decoupled: true }")
        raw = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        params = EngineParams.from_strings({k: v for k, v in raw.items() if k in EngineParams.model_fields})
        params = params.relative_to(Path(args["model_repository"]))
        batching = BatchingConfig.from_model_parameters(raw)
        scheduling = SchedulerConfig.from_batching(batching, params.max_engine_batch)
        family = getattr(pb_utils, "MetricFamily", None)  # custom metrics: python backend >= 23.05
        counter = family.COUNTER if family is not None else None
        self._stages = StageCounters(family, counter)
        self._work = WorkCounters(family, counter)
        self._metrics = SchedulerMetrics(args["model_name"], family)
        self._gauges = CoreGauges(args["model_name"], family)
        echo = os.environ.get(ECHO_VARIABLE)
        core = CoreConfig(
            requests="", answers="", parent=0, model_name=args["model_name"], params=params.model_dump(),
            scheduling=scheduling.model_dump(), echo_ms=float(echo) if echo else None,
        )  # fmt: skip
        self._client = CoreClient(core, self._answer, self._flush, self._stats)
        info = self._client.start()
        if echo is None:
            check_declared_multilingual(raw, bool(info["multilingual"]))

    def _stats(self, stats: dict[str, Any]) -> None:
        """The core's values (receiver thread): scheduler series, stage seconds, work counts, core gauges."""
        self._metrics.load(stats.get("scheduler", []), int(stats.get("generation", 0)))
        self._stages.note(stats.get("stages", {}))
        self._work.note(*stats.get("work", (0, 0)))
        self._gauges.update(stats.get("counters", {}))

    def _flush(self) -> None:
        """Hand the values the core reported to Triton's metrics (the sender thread)."""
        self._metrics.flush()
        self._stages.flush()
        self._work.flush()
        self._gauges.flush(self._client.alive, self._client.restarts)

    def _answer(self, sender: Any, answer: Answer) -> None:
        """Send ``answer`` as the request's ONE final response (the sender thread).

        Errors (docs/contracts.md §5): bad input INVALID_ARG; a full queue UNAVAILABLE "Exceeds
        maximum queue size"; a deadline passed while waiting UNAVAILABLE "Request timeout expired";
        a dead engine core UNAVAILABLE with retry advice; cancelled CANCELLED; an engine failure INTERNAL.
        """
        if answer.texts is not None and answer.results is not None:
            started = time.perf_counter()
            texts = pb_utils.Tensor(contract.TRANSCRIPTS.name, _bytes_column(answer.texts))
            structured = pb_utils.Tensor(contract.RESULT.name, _bytes_column(answer.results))
            response = pb_utils.InferenceResponse(output_tensors=[texts, structured])
            self._stages.note({"response": time.perf_counter() - started})
        else:
            code = getattr(pb_utils.TritonError, answer.code or "INTERNAL", pb_utils.TritonError.INTERNAL)
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(answer.message, code))
        sender.send(response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def execute(self, requests: list[Any]) -> None:
        """Hand every request to the engine core and return; each is answered later by the sender thread."""
        for request in requests:
            sender = request.get_response_sender()
            is_cancelled = getattr(sender, "is_cancelled", None) or getattr(request, "is_cancelled", None)
            started = time.perf_counter()
            try:
                level, timeout_s, windows, wav = self._parse(request)
            except Exception as error:  # noqa: BLE001 - answered to its own request
                code = "INVALID_ARG" if isinstance(error, RequestError) else "INTERNAL"
                self._client.reject(sender, Answer(code=code, message=str(error)))
                continue
            finally:
                self._stages.note({"parse": time.perf_counter() - started})
            self._client.submit(sender, is_cancelled or (lambda: False), level, timeout_s, windows, wav)
        return None

    @staticmethod
    def _parse(request: Any) -> tuple[int, float | None, RequestWindows, Any]:
        """The request's level, timeout, windows and ``WAV`` (RequestError: bad input; RuntimeError: unreadable)."""
        try:
            level, timeout_s = read_parameters(request.parameters())
            arrays = {}
            for spec in contract.INPUTS:
                tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
                arrays[spec.name] = None if tensor is None else tensor.as_numpy()
            return level, timeout_s, parse_request(arrays), arrays[contract.WAV.name]
        except RequestError:
            raise
        except Exception as error:
            raise RuntimeError(f"could not read the request: {type(error).__name__}: {error}") from error

    def finalize(self) -> None:
        """Stop the engine core: open requests are answered with an error; the core exits and frees its memory."""
        self._client.close()


def _bytes_column(values: list[str]) -> Any:
    """An object array ``[B, 1]`` of UTF-8 bytes (the ``TRANSCRIPTS`` / ``RESULT`` tensors)."""
    import numpy as np

    out = np.empty((len(values), 1), dtype=object)
    for row, value in enumerate(values):
        out[row, 0] = value.encode("utf-8")
    return out
