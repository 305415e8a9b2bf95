"""How the ``torch`` engine's encoder shares the GPU with the decode: SM partition, cross K/V placement, fused QKV.

The encoder is compute-bound (GEMMs that fill every SM until they end) and the decode step is
bandwidth-bound (cross-attention K/V reads); on one stream set they time-slice instead of running
together. A CUDA green context (``torch.cuda.green_contexts``) confines the encoder's side stream to
``encoder_sms`` SMs, so the decode always has the rest. Entry point: :class:`EngineTuning`, applied
by :meth:`~whisper_build.serving.engines.torch_engine.TorchEngine.tune`.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SM_GRANULE", "EngineTuning", "side_stream"]

SM_GRANULE = 8
"""SMs come in groups of 8 in a green context on compute capability 9.x (CUDA driver API, ``cuDevSmResourceSplitByCount``)."""


@dataclass(frozen=True)
class EngineTuning:
    """Switches of the ``torch`` engine's GPU overlap; the defaults are the engine as it was.

    Attributes:
        encoder_sms: run the side stream's log-Mel, encoder (and cross K/V) on this many SMs of a
            green context, a multiple of :data:`SM_GRANULE` below the GPU's count; ``None`` = all SMs.
        cross_kv_on_side: compute the cross-attention keys/values ``[layers, 2, b, H, 1500, d/H]``
            right after the encoder on its stream, so the decode only copies them into its cache.
        decode_fused_qkv: one ``[d, 3d]`` matrix product for the decode step's self-attention
            query/key/value projections instead of three (graphs are captured again).
    """

    encoder_sms: int | None = None
    cross_kv_on_side: bool = False
    decode_fused_qkv: bool = False

    def label(self) -> str:
        """Short name for a benchmark table, e.g. ``sms112+kv+qkv`` (``base`` = the defaults)."""
        parts = [f"sms{self.encoder_sms}"] if self.encoder_sms else []
        parts += ["kv"] * self.cross_kv_on_side + ["qkv"] * self.decode_fused_qkv
        return "+".join(parts) or "base"

    @classmethod
    def parse(cls, label: str) -> EngineTuning:
        """The tuning a :meth:`label` names (``base``, ``kv``, ``qkv``, ``sms<N>``, joined by ``+``).

        Raises:
            ValueError: an unknown part, with the parts that exist.
        """
        parts = set(label.split("+")) - {"base"}
        sms = [p for p in parts if p.startswith("sms") and p[3:].isdigit()]
        unknown = parts - {"kv", "qkv", *sms}
        if unknown or len(sms) > 1:
            raise ValueError(f"tuning {label!r}: parts are base, kv, qkv and one sms<N> (e.g. sms112+kv)")
        return cls(int(sms[0][3:]) if sms else None, "kv" in parts, "qkv" in parts)


def side_stream(device: torch.device, encoder_sms: int | None) -> tuple[torch.cuda.Stream | None, object | None]:
    """The encoder's side stream and its green context (keep both alive): ``(None, None)`` on the CPU.

    ``encoder_sms`` ``None``: a plain stream over every SM; else one confined to that many SMs.

    Raises:
        ValueError: ``encoder_sms`` not a multiple of :data:`SM_GRANULE` in ``[8, SM count)``.
        RuntimeError: ``encoder_sms`` on a PyTorch or driver without green contexts.
    """
    if device.type != "cuda":
        return None, None
    if encoder_sms is None:
        return torch.cuda.Stream(device), None
    total = torch.cuda.get_device_properties(device).multi_processor_count
    if encoder_sms % SM_GRANULE or not SM_GRANULE <= encoder_sms < total:
        raise ValueError(
            f"encoder_sms: a multiple of {SM_GRANULE} from {SM_GRANULE} to below {total}, got {encoder_sms}"
        )
    from torch.cuda import green_contexts

    if not green_contexts.SUPPORTED:
        raise RuntimeError("encoder_sms: this PyTorch has no CUDA green contexts; leave encoder_sms unset")
    context = green_contexts.GreenContext.create(num_sms=encoder_sms, device_id=device.index or 0)
    if hasattr(context, "Stream"):
        stream: torch.cuda.Stream = context.Stream()
    else:  # PyTorch 2.9-2.10: a stream made while the green context is current belongs to it
        context.set_context()
        try:
            stream = torch.cuda.Stream(device)
        finally:
            context.pop_context()
    return stream, context
