"""Triton python-backend model ``whisper``: decodes every window of every request in one batch.

Inputs/outputs: docs/contracts.md §5. The work is in ``whisper_build.serving.triton_model.batching`` (pure,
unit-tested) and ``whisper_build.serving.engines``; this file only moves tensors. The repository root must
be importable (the local launcher puts it on ``PYTHONPATH``; the image sets ``PYTHONPATH=/app``).
"""

import json
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
    run_batch,
    transcripts_array,
)
from whisper_build.serving.triton_model.cancellation import (
    BatchCancelled,
    CancellableEngine,
    WorkCounters,
    all_cancelled,
)
from whisper_build.serving.triton_model.decoding import DecodingPolicy
from whisper_build.serving.triton_model.repository import check_declared_multilingual
from whisper_build.serving.triton_model.stages import StageClock, StageCounters, TimedEngine


class TritonPythonModel:
    """Loads the engine named by the ``engine`` model-config parameter and serves batches."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read ``parameters`` from the model config and load the engine (raises on bad config).

        A relative ``model_path`` is resolved against this model's directory
        (``args["model_repository"]``), so a published repository can be mounted anywhere.
        """
        config = json.loads(args["model_config"])
        raw = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        params = EngineParams.from_strings({k: v for k, v in raw.items() if k in EngineParams.model_fields})
        self._engine = load_engine(params.relative_to(Path(args["model_repository"])))
        check_declared_multilingual(raw, self._engine.multilingual)
        self._policy = DecodingPolicy.from_params(params)
        family = getattr(pb_utils, "MetricFamily", None)  # custom metrics: python backend >= 23.05
        self._stages = StageCounters(family, family.COUNTER if family is not None else None)
        self._work = WorkCounters(family, family.COUNTER if family is not None else None)

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request, in order; a bad request gets a TritonError of its own.

        Each stage's time goes to ``whisper_model_stage_seconds{stage}`` (``stages.py``). Before
        every engine call the batch is dropped when every request of it was cancelled
        (``cancellation.py``): those requests get a CANCELLED error.
        """
        clock = StageClock()
        parsed: list[RequestWindows | Exception] = []
        with clock.stage("parse"):
            for request in requests:
                try:
                    arrays = {}
                    for spec in contract.INPUTS:
                        tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
                        arrays[spec.name] = None if tensor is None else tensor.as_numpy()
                    parsed.append(parse_request(arrays))
                except RequestError as error:
                    parsed.append(error)
                except Exception as error:  # noqa: BLE001 - an unexpected failure stays with its request
                    parsed.append(RuntimeError(f"could not read the request: {type(error).__name__}: {error}"))
        engine = CancellableEngine(TimedEngine(self._engine, clock), all_cancelled(requests), self._work.count_windows)
        with clock.stage("decoding"):
            results = run_batch(engine, parsed, self._policy)
        clock.split_engine("decoding")
        self._work.add(engine)
        if engine.stopped:
            results = [r if isinstance(r, RequestError) else BatchCancelled("cancelled by the client") for r in results]
        responses: list[Any] = []
        with clock.stage("response"):
            for result in results:
                if isinstance(result, Exception):
                    code = (
                        pb_utils.TritonError.INVALID_ARG
                        if isinstance(result, RequestError)
                        else getattr(pb_utils.TritonError, "CANCELLED", pb_utils.TritonError.INTERNAL)
                        if isinstance(result, BatchCancelled)
                        else pb_utils.TritonError.INTERNAL
                    )
                    responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(result), code)))
                else:
                    texts = pb_utils.Tensor(contract.TRANSCRIPTS.name, transcripts_array([w.text for w in result]))
                    structured = pb_utils.Tensor(contract.RESULT.name, results_array(result))
                    responses.append(pb_utils.InferenceResponse(output_tensors=[texts, structured]))
        self._stages.add(clock)
        return responses
