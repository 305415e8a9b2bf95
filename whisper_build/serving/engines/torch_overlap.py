"""How the ``torch`` engine's encoder shares the GPU with the decode: SM partition, cross K/V placement, fused QKV.

The encoder is compute-bound (GEMMs that fill every SM until they end) and the decode step is
bandwidth-bound (cross-attention K/V reads); on one stream set they time-slice instead of running
together. A CUDA green context (``torch.cuda.green_contexts``) confines the encoder's side stream to
``encoder_sms`` SMs, so the decode always has the rest. Entry point: :class:`EngineTuning`, applied
by :meth:`~whisper_build.serving.engines.torch_engine.TorchEngine.tune`.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

__all__ = ["SM_GRANULE", "EngineTuning", "gemm_sm_target", "host_to_device", "side_stream"]

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
        encoder_gemm_sms: cuBLAS/cuBLASLt plan the encoder's matrix products for this many SMs
            (:func:`gemm_sm_target`; persistent GEMM grids sized for the whole GPU run a second
            wave on a partition); ``None`` = the GPU's count.
        inflight_staged: the in-flight scheduler's encoder passes copy their windows from pinned
            slots without a host wait (as static batches do), so its one thread keeps launching steps.
    """

    encoder_sms: int | None = None
    cross_kv_on_side: bool = False
    decode_fused_qkv: bool = False
    encoder_gemm_sms: int | None = None
    inflight_staged: bool = False

    def label(self) -> str:
        """Short name for a benchmark table, e.g. ``sms112+gemm112+kv+qkv`` (``base`` = the defaults)."""
        parts = [f"sms{self.encoder_sms}"] if self.encoder_sms else []
        parts += [f"gemm{self.encoder_gemm_sms}"] if self.encoder_gemm_sms else []
        parts += ["kv"] * self.cross_kv_on_side + ["qkv"] * self.decode_fused_qkv + ["pin"] * self.inflight_staged
        return "+".join(parts) or "base"

    @classmethod
    def parse(cls, label: str) -> EngineTuning:
        """The tuning a :meth:`label` names (``base``, ``kv``, ``qkv``, ``pin``, ``sms<N>``, ``gemm<N>``, joined by ``+``).

        Raises:
            ValueError: an unknown part, with the parts that exist.
        """
        parts = set(label.split("+")) - {"base"}
        numbers = {
            prefix: [int(p[len(prefix) :]) for p in parts if p.startswith(prefix) and p[len(prefix) :].isdigit()]
            for prefix in ("sms", "gemm")
        }
        known = {"kv", "qkv", "pin", *(f"{k}{n}" for k, ns in numbers.items() for n in ns)}
        if parts - known or any(len(ns) > 1 for ns in numbers.values()):
            raise ValueError(
                f"tuning {label!r}: parts are base, kv, qkv, pin, one sms<N>, one gemm<N> (e.g. sms112+kv)"
            )
        sms, gemm = (ns[0] if ns else None for ns in numbers.values())
        return cls(sms, "kv" in parts, "qkv" in parts, gemm, "pin" in parts)


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


@cache
def _cublas() -> ctypes.CDLL:
    """The cuBLAS library this process already loaded (PyTorch's), found in ``/proc/self/maps``."""
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "/libcublas.so" in line}
    if not paths:
        raise RuntimeError("encoder_gemm_sms: no cuBLAS loaded in this process (run a matrix product first)")
    return ctypes.CDLL(sorted(paths)[0])


@contextlib.contextmanager
def gemm_sm_target(device: torch.device, sms: int | None) -> Iterator[None]:
    """Matrix products launched inside plan their grids for ``sms`` SMs; ``None`` or the CPU: no change.

    cuBLASLt through PyTorch's SM carve-out, cuBLAS through ``cublasSetSmCountTarget`` on this thread's
    handle; both restored on exit (kernels already captured in a CUDA graph keep their grids).
    """
    if sms is None or device.type != "cuda":
        yield
        return
    total = torch.cuda.get_device_properties(device).multi_processor_count
    previous = torch._C._get_sm_carveout_experimental()
    handle = ctypes.c_void_p(torch.cuda.current_blas_handle())
    if status := _cublas().cublasSetSmCountTarget(handle, ctypes.c_int(sms)):
        raise RuntimeError(f"encoder_gemm_sms: cublasSetSmCountTarget({sms}) failed with cuBLAS status {status}")
    torch._C._set_sm_carveout_experimental(total - sms)
    try:
        yield
    finally:
        _cublas().cublasSetSmCountTarget(handle, ctypes.c_int(0))
        torch._C._set_sm_carveout_experimental(previous)


def host_to_device(data: list[Any], device: torch.device) -> torch.Tensor:
    """A small host list on ``device`` without a host wait: pinned, copied in stream order (GPU)."""
    host = torch.tensor(data)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)
