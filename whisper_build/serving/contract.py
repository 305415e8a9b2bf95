"""The serving wire contract between the gateway and the Triton ``whisper`` model (docs/contracts.md §5).

Dependency-free (standard library only), so both sides of the gRPC hop — the gateway
(:mod:`whisper_build.serving.gateway.backend`) and the Triton model
(:mod:`whisper_build.serving.triton_model.batching`) — import the same definitions.

* :class:`DecodeOptions`: the per-window decoding options, carried by the Triton inputs
  ``TIMESTAMPS``, ``WORD_TIMESTAMPS`` and ``TEMPERATURE``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DecodeOptions"]


@dataclass(frozen=True)
class DecodeOptions:
    """Per-window decoding options (the Triton inputs ``TIMESTAMPS``, ``WORD_TIMESTAMPS``, ``TEMPERATURE``).

    Attributes:
        timestamps: segment timestamps from Whisper's timestamp tokens.
        word_timestamps: word timings (implies ``timestamps`` in the model).
        temperature: first temperature; the model's fallback continues ``+ increment`` up to 1.0.
    """

    timestamps: bool = False
    word_timestamps: bool = False
    temperature: float = 0.0
