"""Which TensorRT-LLM releases still have the TensorRT-engine builder this project's engine build uses.

The engine build (``convert_checkpoint.py`` → ``trtllm-build`` → an engine run by ``ModelRunnerCpp``)
is TensorRT-LLM's TensorRT backend. TensorRT-LLM removed that backend: the release notes of
v1.3.0rc20 (2026-06-30, https://github.com/NVIDIA/TensorRT-LLM/releases/tag/v1.3.0rc20) say it is
the last version supporting the TensorRT backend and that the next version removes it; the
migration guide "TensorRT Backend Removed"
(https://nvidia.github.io/TensorRT-LLM/legacy/tensorrt-backend-removal.html) names the PyTorch
backend as the only one, loading Hugging Face checkpoints with no engine build, and the per-model
``convert_checkpoint.py`` / ``trtllm-build`` examples as removed.

Entry point: :func:`engine_builder_refusal` (the details, in its docstring).
Docs: docs/engines.md, "TensorRT-LLM without its TensorRT backend".
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

__all__ = ["LAST_ENGINE_BUILDER_VERSION", "MIGRATION_GUIDE", "RELEASE_NOTES", "engine_builder_refusal"]

LAST_ENGINE_BUILDER_VERSION = "1.3.0rc20"
"""The last TensorRT-LLM release with the TensorRT-engine backend (its release notes, :data:`RELEASE_NOTES`)."""
RELEASE_NOTES = "https://github.com/NVIDIA/TensorRT-LLM/releases/tag/v1.3.0rc20"
MIGRATION_GUIDE = "https://nvidia.github.io/TensorRT-LLM/legacy/tensorrt-backend-removal.html"
PINNED_IMAGE = "nvcr.io/nvidia/tritonserver:25.08-trtllm-python-py3 (TensorRT-LLM 0.21.0)"
"""The base image the serving image pins (``whisper_build/image/Dockerfile``)."""


def engine_builder_refusal(version: str | None) -> str | None:
    """Why TensorRT-LLM ``version`` cannot build or run this project's engines, or ``None`` when it can.

    Args:
        version: the image's ``tensorrt_llm`` version; ``None`` (unknown) and unparsable versions
            are not refused here (the preflight's own version checks handle them).

    Returns:
        A message naming the version, the last supported one with its source, and both ways out.

    So a serving image whose TensorRT-LLM is newer than :data:`LAST_ENGINE_BUILDER_VERSION` can neither
    build nor load this project's engines; the build tool and the pod preflight refuse it with
    :func:`engine_builder_refusal`'s message instead of failing later in a missing command or module.
    Versions compare by PEP 440 (``packaging.version``): ``1.3.0rc20`` is the last accepted;
    ``1.3.0rc21``, ``1.3.0`` and every later release are refused.
    """
    if version is None:
        return None
    try:
        removed = Version(version) > Version(LAST_ENGINE_BUILDER_VERSION)
    except InvalidVersion:
        return None
    if not removed:
        return None
    return (
        f"TensorRT-LLM {version} in this image has no TensorRT-engine builder: TensorRT-LLM removed its TensorRT "
        f"backend after {LAST_ENGINE_BUILDER_VERSION} (release notes {RELEASE_NOTES}; migration guide "
        f"{MIGRATION_GUIDE}), so trtllm-build and ModelRunnerCpp engines are gone. Either build the serving image "
        f"on a base with TensorRT-LLM <= {LAST_ENGINE_BUILDER_VERSION} (the pinned one is {PINNED_IMAGE}), or set "
        "`serving_engine: torch` on the GPU groups (a Hugging Face checkpoint served as it is, no engine build; "
        "docs/engines.md)"
    )
