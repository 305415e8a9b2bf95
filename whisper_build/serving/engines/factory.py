"""The engine factory: loads the implementation ``EngineParams.engine`` names (its ``EngineProfile.runtime``).

Kept apart from :mod:`whisper_build.serving.engines.base` (the interface) so that the engine
modules import the interface without the interface importing them. ``WHISPER_ENGINE_WRAPPER``
(``module:callable`` or ``/path/to/file.py:callable``, unset in every chart) passes the loaded engine through a wrapper — the
tests slow the real engine down this way (docs/development.md "Tests that need the model busy").
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from settings.engines import profile
from whisper_build.serving.engines.base import WhisperEngine
from whisper_build.serving.engines.params import EngineParams, EngineParamsError

log = logging.getLogger(__name__)

WRAPPER_VARIABLE = "WHISPER_ENGINE_WRAPPER"
"""Environment variable naming a callable ``WhisperEngine -> WhisperEngine`` as ``module:attribute`` or
``/path/to/file.py:attribute`` (a file: Triton's python stub does not read ``PYTHONPATH``)."""


def wrap_engine(engine: WhisperEngine, spec: str) -> WhisperEngine:
    """``engine`` passed through the callable ``spec`` names (``module:attribute`` or ``file.py:attribute``).

    ``""`` returns ``engine`` unchanged.

    Raises:
        EngineParamsError: ``spec`` is not of that form or does not name a callable.
        ImportError: the module cannot be imported.
    """
    if not spec:
        return engine
    module, _, attribute = spec.rpartition(":")
    wrapper: Any = getattr(_import(module), attribute, None) if module and attribute else None
    if not callable(wrapper):
        raise EngineParamsError(f"{WRAPPER_VARIABLE}={spec!r}: expected module:callable, e.g. my_module:wrap")
    log.warning("engine %s wrapped by %s (%s)", engine.name, spec, WRAPPER_VARIABLE)
    wrapped: WhisperEngine = wrapper(engine)
    return wrapped


def _import(module: str) -> ModuleType:
    """A module by dotted name, or loaded from a ``.py`` file path."""
    if not module.endswith(".py"):
        return importlib.import_module(module)
    spec = importlib.util.spec_from_file_location(Path(module).stem, module)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {module}")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded


def load_engine(params: EngineParams) -> WhisperEngine:
    """Create the engine ``params.engine`` names (imports its runtime only now).

    Wrapped as ``WHISPER_ENGINE_WRAPPER`` says (:func:`wrap_engine`).

    Raises:
        EngineParamsError: bad model path, or a bad ``WHISPER_ENGINE_WRAPPER``.
        ImportError: the runtime (ctranslate2 / tensorrt_llm + torch / torch + transformers) is not installed.
    """
    return wrap_engine(_create(params), os.environ.get(WRAPPER_VARIABLE, ""))


def _create(params: EngineParams) -> WhisperEngine:
    # WARNING, not INFO: inside Triton's python backend no logging handler is configured, and
    # Python's last-resort handler prints WARNING and above to stderr (the pod log).
    log.warning(
        "loading whisper engine %s from %s (device=%s, compute_type=%s)",
        params.engine, params.model_path or "<bundled tiny.en>", params.device, params.compute_type,
    )  # fmt: skip
    engine = profile(params.engine)
    runtime = getattr(importlib.import_module(engine.module), engine.class_name)
    created: WhisperEngine = runtime(params)
    return created
