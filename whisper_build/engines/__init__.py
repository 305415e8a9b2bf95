"""Whisper engines behind one interface: ``ctranslate2`` (CPU/GPU) and ``tensorrt_llm`` (GPU).

Import :func:`load_engine` and :class:`EngineParams`; runtime libraries are imported lazily.
"""

from whisper_build.engines.base import (
    EngineKind,
    EngineParams,
    EngineParamsError,
    WhisperEngine,
    load_engine,
)

__all__ = ["EngineKind", "EngineParams", "EngineParamsError", "WhisperEngine", "load_engine"]
