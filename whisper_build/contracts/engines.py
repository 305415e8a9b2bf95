"""The serving engines by name: a GPU group's ``serving_engine`` and the Triton model's ``engine`` parameter.

Read by ``settings.schema`` (the config), the engine factory and the Triton model
(:mod:`whisper_build.serving.contract` re-exports it); docs/engines.md.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["EngineKind"]

EngineKind = Literal["tensorrt_llm", "ctranslate2", "torch"]
"""Which engine serves the model: the model-config parameter ``engine`` and a GPU group's
``serving_engine``: ``tensorrt_llm`` (an engine built per GPU architecture), ``ctranslate2`` (a
CTranslate2 conversion, until the engine is built) or ``torch`` (the Hugging Face checkpoint under
``models/<model>/hf/`` on PyTorch, e.g. a fine-tune, with no conversion or build; docs/engines.md)."""
