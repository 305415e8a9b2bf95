"""Triton python-backend model ``speaker``: senko's diarization beside ``whisper``, one request at a time.

Inputs/outputs: docs/contracts.md §5 (``contract.SPEAKER_INPUTS``/``SPEAKER_OUTPUTS``). The work is in
``whisper_build.serving.diarization.senko_model``; this file only moves tensors. senko loads once per
instance at ``initialize`` (its weights checked against their pins first) and runs a self-test in a
forked child; a model whose runtime died 3 times within 10 minutes answers every request at once with
why (``diarization.self_test``). A request cancelled while queued (the client went away) is answered
CANCELLED without running.
"""

import json
import logging
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from whisper_build.serving import contract
from whisper_build.serving.diarization.self_test import FAILED_AFTER_DEATHS, FAILED_MARKER, Deaths, self_test
from whisper_build.serving.diarization.senko_model import SpeakerModel, parse_speaker_request

log = logging.getLogger("whisper.speaker")  # unconfigured in the stub: errors reach its stderr, the pod's log


class TritonPythonModel:
    """Loads senko (parameters ``warmup``, ``threads``) and answers ``TURNS`` per request."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read ``parameters``, load senko and self-test it (raises SpeakerWeightsError when a weight differs from its pin).

        A self-test that dies is recorded and run again, until it passes or the model is failed.
        """
        config = json.loads(args["model_config"])
        raw = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        deaths = Deaths()
        deaths.loaded()
        self._failed = deaths.failed()
        self._model = SpeakerModel(warmup=raw.get("warmup", "false") == "true", threads=int(raw.get("threads", "1")))
        for _ in range(FAILED_AFTER_DEATHS):
            if self._failed is not None or (crash := self_test(self._model.embed)) is None:
                break
            log.error("speaker model: %s", crash)
            deaths.died(crash)
            self._failed = deaths.failed()
        if self._failed is not None:
            log.error("%s: %s; every speaker request is refused", FAILED_MARKER, self._failed)

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request, in order; a bad request gets an INVALID_ARG error of its own."""
        responses = []
        for request in requests:
            if self._failed is not None:
                message = f"{FAILED_MARKER}: {self._failed}"
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
                continue
            if request.is_cancelled():
                code = getattr(pb_utils.TritonError, "CANCELLED", pb_utils.TritonError.INTERNAL)
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("cancelled", code)))
                continue
            try:
                arrays = {}
                for spec in contract.SPEAKER_INPUTS:
                    tensor = pb_utils.get_input_tensor_by_name(request, spec.name)
                    arrays[spec.name] = None if tensor is None else tensor.as_numpy()
                audio, low, high, clips = parse_speaker_request(arrays)
                turns = self._model.diarize(audio, low, high, clips)
            except ValueError as error:
                error_code = pb_utils.TritonError.INVALID_ARG
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(error), error_code)))
                continue
            rows = np.array(turns, dtype=np.float32).reshape(-1, 3)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(contract.TURNS.name, rows)]))
        return responses
