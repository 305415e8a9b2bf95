"""The engine factory: picks the implementation ``EngineParams.engine`` names.

Kept apart from :mod:`whisper_build.serving.engines.base` (the interface) so that the engine
modules import the interface without the interface importing them.
"""

from __future__ import annotations

import logging

from whisper_build.serving.engines.base import EngineParams, WhisperEngine

log = logging.getLogger(__name__)


def load_engine(params: EngineParams) -> WhisperEngine:
    """Create the engine ``params.engine`` names; imports its runtime only now.

    Raises:
        EngineParamsError: bad model path.
        ImportError: the runtime (ctranslate2 / tensorrt_llm + torch / torch + transformers) is not installed.
    """
    # WARNING, not INFO: inside Triton's python backend no logging handler is configured, and
    # Python's last-resort handler prints WARNING and above to stderr (the pod log).
    log.warning(
        "loading whisper engine %s from %s (device=%s, compute_type=%s)",
        params.engine, params.model_path or "<bundled tiny.en>", params.device, params.compute_type,
    )  # fmt: skip
    if params.engine == "ctranslate2":
        from whisper_build.serving.engines.ctranslate2_engine import CTranslate2Engine

        return CTranslate2Engine(params)
    if params.engine == "torch":
        from whisper_build.serving.engines.torch_engine import TorchEngine

        return TorchEngine(params)
    from whisper_build.serving.engines.tensorrt_llm_engine import TensorRTLLMEngine

    return TensorRTLLMEngine(params)
