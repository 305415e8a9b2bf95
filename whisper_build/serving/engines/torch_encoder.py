"""The ``torch`` engine's Whisper encoder: one fused QKV projection per layer, SDPA, optionally compiled.

The same arithmetic as transformers ``WhisperEncoder.forward`` (``modeling_whisper.py``: two GELU
convolutions, sinusoidal positions, pre-norm self-attention and MLP blocks, final layer norm) over
the same parameters, with the three attention projections fused into one matrix product (one
``[b·1500, d] × [d, 3d]`` GEMM instead of three) and the attention scale applied inside
``scaled_dot_product_attention``. ``compile`` runs it through ``torch.compile`` (Inductor:
fused layer norms, GELU and residual adds around cuBLAS matrix products) with the batch dimension
marked dynamic, so one compiled graph serves every bucket (a batch of 1 is specialised by Dynamo
and compiles once more); we measured this encoder compiled with
``mode="max-autotune-no-cudagraphs"`` in bf16 at 0.305 s per 64 windows on an H200, eager fp16 at
≈ 0.43 s.
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from transformers import WhisperForConditionalGeneration

__all__ = ["EncoderCompile", "FusedEncoder"]

EncoderCompile = Literal["none", "default", "max-autotune-no-cudagraphs"]
"""``none`` = eager; else the ``torch.compile`` mode (``default`` = Inductor's default)."""


class FusedEncoder:
    """Callable ``features [b, n_mels, 3000] → hidden [b, 1500, d]`` over a loaded model's encoder.

    Args:
        model: the loaded model (its encoder's parameters are read, and the fused QKV weights
            are built once from them).
        mode: see :data:`EncoderCompile`.
    """

    def __init__(self, model: WhisperForConditionalGeneration, mode: EncoderCompile = "none") -> None:
        self.encoder = model.model.encoder
        config = model.config
        self.heads = config.encoder_attention_heads
        self.qkv: list[tuple[torch.Tensor, torch.Tensor]] = []
        for layer in self.encoder.layers:
            a = layer.self_attn
            weight = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight])
            bias = torch.cat([a.q_proj.bias, torch.zeros_like(a.q_proj.bias), a.v_proj.bias])
            self.qkv.append((weight, bias))
        self.compiled = mode != "none"
        self._forward = (
            torch.compile(self.forward, mode=None if mode == "default" else mode, fullgraph=True)
            if self.compiled
            else self.forward
        )

    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        """Encoder output ``[b, 1500, d]`` of log-Mel ``features`` ``[b, n_mels, 3000]`` (model dtype)."""
        if self.compiled and features.shape[0] > 1:
            torch._dynamo.mark_dynamic(features, 0)
        return self._forward(features)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """The encoder, eagerly (what :meth:`__call__` compiles)."""
        enc = self.encoder
        x = F.gelu(enc.conv1(features))
        x = F.gelu(enc.conv2(x)).permute(0, 2, 1)
        x = x + enc.embed_positions.weight[: x.shape[1]]
        b, frames, d = x.shape
        head_dim = d // self.heads
        for layer, (weight, bias) in zip(enc.layers, self.qkv, strict=True):
            h = layer.self_attn_layer_norm(x)
            q, k, v = F.linear(h, weight, bias).view(b, frames, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v)
            x = x + layer.self_attn.out_proj(a.transpose(1, 2).reshape(b, frames, d))
            x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
        return enc.layer_norm(x)
