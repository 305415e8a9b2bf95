"""Whisper engines behind one interface: ``ctranslate2``, ``tensorrt_llm`` and ``torch``.

``ctranslate2`` runs on CPU or GPU, ``tensorrt_llm`` on GPU, ``torch`` serves Hugging Face checkpoints
on PyTorch.

Import :func:`load_engine` and :class:`EngineParams`; runtime libraries are imported lazily.
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from whisper_build.serving.engines.base import EngineKind, WhisperEngine
from whisper_build.serving.engines.factory import load_engine
from whisper_build.serving.engines.params import EngineParams, EngineParamsError

__all__ = ["EngineKind", "EngineParams", "EngineParamsError", "WhisperEngine", "load_engine"]
