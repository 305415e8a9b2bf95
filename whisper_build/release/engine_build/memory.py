"""How many 30 s windows one engine batch may hold on a GPU (or MIG slice) of a given memory.

A whole GPU of the catalog holds the configured ``model.max_batch_size`` easily; a MIG slice (e.g.
``1g.10gb`` on an H100, about 9.3 GiB) may not, and an engine whose activations do not fit fails at
load or on its first full batch. The build for a slice therefore caps ``--max-batch-size`` at what
:func:`max_batch_size_for_memory` estimates.

The estimate: ``memory − runtime reserve − weights``, divided by a per-window budget.

Entry point: :func:`max_batch_size_for_memory` (the details, in its docstring). Docs: docs/engines.md.
"""

from __future__ import annotations

import math

from whisper_build.release.engine_build.spec import BuildSpecError

WHISPER_PARAMETERS_M = {
    "large-v3-turbo": 809,
    "large-v3": 1550,
    "large-v2": 1550,
    "medium": 769,
    "medium.en": 769,
    "small": 244,
    "small.en": 244,
    "base": 74,
    "base.en": 74,
    "tiny": 39,
    "tiny.en": 39,
    "distil-large-v3": 756,
    "distil-large-v2": 756,
    "distil-medium.en": 394,
    "distil-small.en": 166,
}
"""Parameters in millions (openai/whisper README table; Hugging Face model cards of large-v3-turbo
and the distil-whisper checkpoints)."""

BYTES_PER_WEIGHT = {"none": 2.0, "int8": 1.0, "int4": 0.5}
"""Bytes per weight by ``weight_only`` (none = float16/bfloat16)."""

RUNTIME_RESERVE_GIB = 2.0
WINDOW_GIB = 0.35
GB = 1000**3
GIB = 1024**3


def max_batch_size_for_memory(
    model_name: str, memory_gb: float, *, configured: int, beam_width: int = 1, weight_only: str = "none"
) -> int:
    """Largest engine batch (windows) that fits ``memory_gb``, never above ``configured``.

    Args:
        model_name: Whisper model name (``settings.schema.WHISPER_MODELS``), e.g. ``large-v3-turbo``.
        memory_gb: GPU memory in GB (10⁹ bytes) as NVIDIA names MIG profiles, e.g. 10 for ``1g.10gb``.
        configured: ``model.max_batch_size`` of the config (the cap).
        beam_width: Decoder beams per window (the KV cache grows with it).
        weight_only: ``none``, ``int8`` or ``int4``.

    Returns:
        ``min(configured, windows that fit)``, at least 1.

    Raises:
        BuildSpecError: unknown model, or not even one window fits (the message names the memory
            needed and suggests a larger profile or weight-only quantization).

    * Weights: parameter count (model cards, :data:`WHISPER_PARAMETERS_M`) × bytes per weight (2 for
      float16/bfloat16, 1 for int8 and 0.5 for int4 weight-only quantization).
    * Runtime reserve :data:`RUNTIME_RESERVE_GIB`: CUDA context, TensorRT/TensorRT-LLM runtime and
      workspace, the Triton python backend's CUDA use.
    * Per window :data:`WINDOW_GIB`: encoder activations of 1500 frames plus the decoder's cross-attention
      and self-attention KV cache of one window, per beam. For large-v3 (d_model 1280, 20 heads, 32
      decoder layers) the cross KV alone is 1500 × 2 × 32 × 1280 × 2 B ≈ 0.23 GiB; turbo and distil
      models (2–4 decoder layers) need far less. 0.35 GiB covers large-v3 with room for the encoder.

    These are estimates written from the model shapes, not measurements on a slice (no GPU here):
    ``docs/engines.md`` says so, and the engine build's smoke test loads the engine on the slice it
    was sized for before publishing.
    """
    if model_name not in WHISPER_PARAMETERS_M:
        raise BuildSpecError(f"unknown Whisper model '{model_name}'; accepted: {', '.join(WHISPER_PARAMETERS_M)}")
    weights_gib = WHISPER_PARAMETERS_M[model_name] * 1e6 * BYTES_PER_WEIGHT[weight_only] / GIB
    free_gib = memory_gb * GB / GIB - RUNTIME_RESERVE_GIB - weights_gib
    windows = math.floor(free_gib / (WINDOW_GIB * beam_width))
    if windows < 1:
        needed = RUNTIME_RESERVE_GIB + weights_gib + WINDOW_GIB * beam_width
        raise BuildSpecError(
            f"Whisper {model_name} ({weight_only} weights, beam {beam_width}) needs about {needed:.1f} GiB for one "
            f"30 s window but the GPU memory is {memory_gb * GB / GIB:.1f} GiB; choose a larger MIG profile or "
            "model.weight_only: int8"
        )
    return min(configured, windows)
