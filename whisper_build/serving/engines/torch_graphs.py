"""The ``torch`` engine's decoder: a static KV cache and one CUDA graph per batch bucket.

Entry point: :class:`StaticDecoder` (the details, in its docstring).
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from transformers import WhisperForConditionalGeneration

from whisper_build.serving.engines.buckets import DecodeMode
from whisper_build.serving.engines.torch_logits import LogitRules, RowState

__all__ = ["BucketStartup", "DecodeResult", "StaticDecoder", "StepAttention", "attention_spans"]

StepAttention = Literal["matmul", "sdpa"]

log = logging.getLogger(__name__)

EARLY_STOP_EVERY = 8
"""Decoder steps between host checks for "every row finished" (each check is a device sync)."""


def attention_spans(context: int) -> tuple[int, ...]:
    """Self-attention spans a step may attend over: 64, 128, 256, … below ``context``, then ``context``.

    A step whose rows sit at positions < ``span`` attends over the cache's first ``span`` positions
    only (the rest is masked anyway), so a 100-token window reads a quarter of the 448-position cache.
    """
    spans, span = [], 64
    while span < context:
        spans.append(span)
        span *= 2
    return (*spans, context)


@dataclass(frozen=True)
class BucketStartup:
    """What capturing one bucket cost at start-up: wall seconds and GPU memory of its graph pool."""

    bucket: int
    capture_s: float
    graph_pool_bytes: int


@dataclass(frozen=True)
class DecodeResult:
    """Per row of a bucket: new token ids (end-of-text padded), summed log-prob, ``<|nospeech|>`` probability."""

    tokens: list[list[int]]
    sum_logprob: list[float]
    no_speech_prob: list[float]


class StaticDecoder:
    """Static-cache Whisper decoding over fixed batch buckets.

    Args:
        model: the loaded model (eval mode, on its device and dtype).
        rules: the checkpoint's logit rules.
        buckets: batch sizes to serve (:func:`~whisper_build.serving.engines.buckets.bucket_sizes`).
        max_new: most new tokens per window.
        mode: ``graphs`` captures one CUDA graph per bucket now (start-up), ``eager`` none.
        sot: ``<|startoftranscript|>`` id; no_speech: ``<|nospeech|>`` id or ``None``.
        attention: how a step (one query per row) attends: ``sdpa`` =
            ``scaled_dot_product_attention`` (default), ``matmul`` = two batched matrix products
            around a float32 softmax (measured slower on an H200: docs/benchmarks.md "GPU, engine").
        spans: self-attention spans (:func:`attention_spans` of the context by default); ``(448,)``
            attends over the whole cache every step, as before spans.

    Why by hand (``torch.cuda.CUDAGraph``) rather than ``torch.compile(mode="reduce-overhead")`` or
    ``generate(cache_implementation="static")``: on an H200 (transformers 5.17, torch 2.11) generate's
    own compile was 2.3× short of the target at batch 1, compile beside generate differs across versions,
    and an encoder-decoder static cache under cudagraph trees can hand back "tensor output of CUDAGraphs
    … overwritten" (transformers PR #48199). A step captured by hand over buffers this module owns
    depends only on the ``WhisperForConditionalGeneration`` parameter layout (``modeling_whisper.py``).

    Per layer the buffers are: self-attention keys/values ``[B, H, 448, d/H]`` (448 = Whisper's
    ``max_target_positions``) and cross-attention keys/values ``[B, H, 1500, d/H]``, ``B`` = the
    largest bucket; a bucket of ``b`` rows uses their first ``b`` rows (contiguous views), so all
    buckets share one allocation. Cross-attention keys/values are computed once per window, eagerly,
    outside any graph (:meth:`StaticDecoder.set_cross`); the prompt (prefill) runs eagerly too; each
    later token is one replay. One step: embed token + position, per layer self-attention over the
    cache's first ``span`` positions (the smallest span above every row's position; one graph per
    bucket × span) masked to positions ≤ the row's own (rows of different prompt lengths share a
    step), cross-attention, MLP; then :class:`~whisper_build.serving.engines.torch_logits.LogitRules`
    chooses the token in the same graph. In ``eager`` mode the very same step runs op by op, so on one
    bucket and one padded batch graphed and eager decodes compute the same kernels on the same data.
    """

    def __init__(
        self,
        model: WhisperForConditionalGeneration,
        rules: LogitRules,
        buckets: Sequence[int],
        max_new: int,
        mode: DecodeMode,
        sot: int,
        no_speech: int | None,
        attention: StepAttention = "sdpa",
        spans: Sequence[int] | None = None,
    ) -> None:
        config = model.config
        self.model, self.rules, self.mode = model, rules, mode
        self.buckets = tuple(sorted(buckets))
        self.decoder = model.model.decoder
        self.sot, self.no_speech, self.eot = sot, no_speech, rules.eot
        self.heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.heads
        self.context = config.max_target_positions
        self.spans = tuple(sorted(spans)) if spans else attention_spans(self.context)
        if self.spans[-1] != self.context:
            raise ValueError(f"the largest span must be the context ({self.context}), got {self.spans}")
        device, dtype, rows = model.device, model.dtype, self.buckets[-1]
        layers, source = len(self.decoder.layers), config.max_source_positions

        def cache(length: int) -> list[torch.Tensor]:
            return [
                torch.zeros(rows, self.heads, length, self.head_dim, device=device, dtype=dtype) for _ in range(layers)
            ]

        self.self_k, self.self_v = cache(self.context), cache(self.context)
        self.cross_k, self.cross_v = cache(source), cache(source)
        self.state = RowState.allocate(rows, max_new, config.vocab_size, device)
        self.positions = torch.arange(self.context, device=device)
        self.row_index = torch.arange(rows, device=device)
        attn = [layer.encoder_attn for layer in self.decoder.layers]
        self.cross_weight = torch.cat([w for a in attn for w in (a.k_proj.weight, a.v_proj.weight)])
        self.cross_bias = torch.cat([b for a in attn for b in (torch.zeros_like(a.v_proj.bias), a.v_proj.bias)])
        # the output projection padded to a multiple of 64 rows: with Whisper's odd vocabularies (51864-51866)
        # cuBLAS picks a slow unaligned kernel for [b, d] x [d, vocab] (seen on an H200: 263 us a step at batch 64)
        weight = model.proj_out.weight
        self.vocab = weight.shape[0]
        pad = -self.vocab % 64
        self.logit_weight = torch.cat([weight, weight.new_zeros(pad, weight.shape[1])]) if pad else weight
        self.static_bytes = sum(t.numel() * t.element_size() for t in self._buffers())
        self.attention = attention
        self.qkv: list[tuple[torch.Tensor, torch.Tensor]] = []  # fused self-attention projections (set_fused_qkv)
        self.graphs: dict[tuple[int, bool, int], torch.cuda.CUDAGraph] = {}
        # decode on a high-priority stream (graphs captured there keep its priority): where an encoder
        # runs beside it on another stream, the GPU schedules the decode's blocks first
        self.stream = torch.cuda.Stream(device, priority=-1) if device.type == "cuda" else None
        self.startup: list[BucketStartup] = []
        if mode == "graphs":
            self.capture_all()

    def capture_all(self) -> None:
        """Capture every bucket's step graphs (again, e.g. after changing :attr:`attention`)."""
        self.graphs.clear()
        with torch.inference_mode():  # the buffers are inference tensors
            self.startup = [self._capture(bucket) for bucket in self.buckets]

    def _buffers(self) -> list[torch.Tensor]:
        state = [getattr(self.state, name) for name in self.state.__dataclass_fields__]
        return [*self.self_k, *self.self_v, *self.cross_k, *self.cross_v, *state]

    def set_cross(self, encoded: torch.Tensor) -> None:
        """Cross-attention keys/values of ``encoded`` (``[b, 1500, d]``, ``b`` a bucket) into the cache, eagerly."""
        self.set_cross_kv(self.cross_kv(encoded))

    def set_cross_kv(self, kv: torch.Tensor) -> None:
        """Computed cross-attention keys/values (:meth:`cross_kv`, ``b`` a bucket) into the cache's first ``b`` rows."""
        b = kv.shape[2]
        for i in range(len(self.cross_k)):
            self.cross_k[i][:b].copy_(kv[i, 0])
            self.cross_v[i][:b].copy_(kv[i, 1])

    def cross_kv(self, encoded: torch.Tensor) -> torch.Tensor:
        """Cross-attention keys/values ``[layers, 2, b, H, 1500, d/H]`` (a view) of ``encoded`` ``[b, 1500, d]``."""
        b, source, _ = encoded.shape
        kv = F.linear(encoded, self.cross_weight, self.cross_bias)
        return kv.view(b, source, len(self.cross_k), 2, self.heads, self.head_dim).permute(2, 3, 0, 4, 1, 5)

    def set_fused_qkv(self, fused: bool) -> None:
        """Self-attention query/key/value as one ``[d, 3d]`` product (``fused``) or three; re-captures on a change."""
        if fused == bool(self.qkv):
            return
        self.qkv = []
        for layer in self.decoder.layers if fused else []:
            a = layer.self_attn
            bias = torch.cat([a.q_proj.bias, torch.zeros_like(a.q_proj.bias), a.v_proj.bias])
            self.qkv.append((torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), bias))
        if self.mode == "graphs":
            self.capture_all()

    def _qkv(self, layer: torch.nn.Module, x: torch.Tensor, i: int = 0) -> tuple[torch.Tensor, ...]:
        b, t, _ = x.shape
        h = layer.self_attn_layer_norm(x)
        attn = layer.self_attn
        if self.qkv:
            weight, bias = self.qkv[i]
            fused = F.linear(h, weight, bias).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
            return tuple(fused.unbind(0))
        return tuple(
            p(h).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (attn.q_proj, attn.k_proj, attn.v_proj)
        )

    def _rest(
        self, i: int, layer: torch.nn.Module, x: torch.Tensor, attended: torch.Tensor, cross: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Self-attention output projection, cross-attention and MLP of layer ``i``.

        ``cross``: keys/values ``[layers, 2, b, H, 1500, d/H]`` (:meth:`cross_kv`); ``None`` = the cache's first ``b`` rows.
        """
        b, t, d = x.shape
        x = x + layer.self_attn.out_proj(attended.transpose(1, 2).reshape(b, t, d))
        h = layer.encoder_attn_layer_norm(x)
        q = layer.encoder_attn.q_proj(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        keys, values = (self.cross_k[i][:b], self.cross_v[i][:b]) if cross is None else (cross[i, 0], cross[i, 1])
        a = self._attend(q, keys, values, None)
        x = x + layer.encoder_attn.out_proj(a.transpose(1, 2).reshape(b, t, d))
        return x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Attention of ``q`` ``[b, H, t, hd]`` over ``k``/``v`` ``[b, H, S, hd]``; ``mask`` bool ``[b, 1, 1, S]`` or None."""
        if self.attention == "sdpa" or q.shape[2] != 1:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        scores = torch.matmul(q * self.head_dim**-0.5, k.transpose(-1, -2)).float()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        return torch.matmul(scores.softmax(-1).to(v.dtype), v)

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        scale = getattr(self.decoder, "embed_scale", 1.0)  # transformers 4.x has none (always 1 for Whisper)
        return self.decoder.embed_tokens(tokens) * scale + self.decoder.embed_positions.weight[positions]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(self.decoder.layer_norm(hidden), self.logit_weight)[..., : self.vocab].float()

    def _step(self, b: int, full: bool, span: int | None = None) -> None:
        """One decoder step for bucket ``b``: feed ``state.token`` at ``state.pos``, choose the next token.

        ``full``: every logit rule (timestamps, penalty, sampling); else suppression and argmax only.
        ``span``: attend over cache positions ``[0, span)`` (every row's position must be below it);
        ``None`` = the whole context.
        """
        span = span or self.context
        s = self.state.rows(b)
        rows = self.row_index[:b]
        x = self._embed(s.token[:, None], s.pos[:, None])
        mask = (self.positions[None, :span] <= s.pos[:, None])[:, None, None, :]
        for i, layer in enumerate(self.decoder.layers):
            q, k, v = self._qkv(layer, x, i)
            keys, values = self.self_k[i][:b], self.self_v[i][:b]
            keys[rows, :, s.pos] = k[:, :, 0]
            values[rows, :, s.pos] = v[:, :, 0]
            x = self._rest(i, layer, x, self._attend(q, keys[:, :, :span], values[:, :, :span], mask))
        self.rules.choose(self._logits(x)[:, 0], s, full)
        s.pos.copy_((s.pos + 1).clamp(max=self.context - 1))

    def _prefill(
        self,
        tokens: torch.Tensor,
        read: torch.Tensor,
        rows: torch.Tensor | None = None,
        cross: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run the prompt ``tokens`` (``[b, T]``) through every layer, filling cache positions ``[0, T)``.

        ``rows``: the cache rows to fill (``[b]`` long; ``None`` = the first ``b``) and ``cross`` their
        cross-attention keys/values (:meth:`cross_kv`; ``None`` = the cache's first ``b`` rows).

        Returns:
            float32 logits ``[b, read.shape[1], vocab]`` at the positions ``read`` (``[b, k]`` long).
        """
        b, t = tokens.shape
        x = self._embed(tokens, self.positions[:t][None, :])
        for i, layer in enumerate(self.decoder.layers):
            q, k, v = self._qkv(layer, x, i)
            if rows is None:
                self.self_k[i][:b, :, :t].copy_(k)
                self.self_v[i][:b, :, :t].copy_(v)
            else:
                self.self_k[i][rows, :, :t] = k
                self.self_v[i][rows, :, :t] = v
            x = self._rest(i, layer, x, F.scaled_dot_product_attention(q, k, v, is_causal=True), cross)
        picked = x.gather(1, read[:, :, None].expand(-1, -1, x.shape[-1]))
        return self._logits(picked)

    def detect_language(self, b: int, language_ids: Sequence[int]) -> list[int]:
        """Per row of bucket ``b``, the most likely of ``language_ids`` after ``<|startoftranscript|>``.

        openai/whisper ``decoding.py`` ``detect_language``: one decoder pass over the start token,
        logits restricted to the language tokens. Needs :meth:`set_cross` first.
        """
        device = self.positions.device
        tokens = torch.full((b, 1), self.sot, device=device)
        logits = self._prefill(tokens, torch.zeros((b, 1), dtype=torch.long, device=device))[:, 0]
        ids = torch.tensor(list(language_ids), device=device)
        best: list[int] = ids[logits[:, ids].argmax(-1)].tolist()
        return best

    def decode(
        self,
        prompts: Sequence[Sequence[int]],
        penalty: Sequence[float],
        temperature: float,
        timestamps: bool,
        max_new: int | Sequence[int],
    ) -> DecodeResult:
        """Decode one bucket (``len(prompts)`` is a bucket size; :meth:`set_cross` first).

        Args:
            prompts: decoder prompt ids per row (each holds ``<|startoftranscript|>``).
            penalty: repetition penalty per row.
            temperature: 0 = greedy, > 0 = sampling (every row).
            timestamps: predict timestamp tokens (every row).
            max_new: most new tokens, for every row or per row (cut to Whisper's 448-token context).
        """
        b, device = len(prompts), self.positions.device
        if b not in self.buckets:
            raise ValueError(f"{b} rows is not a bucket ({self.buckets})")
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        padded, positions = self.prompt_rows(prompts)
        tokens, read = torch.tensor(padded, device=device), torch.tensor(positions, device=device)
        limits = self.row_limits([max_new] * b if isinstance(max_new, int) else list(max_new), lengths)
        self._reset(b, lengths, limits, penalty, temperature, timestamps)
        logits = self._prefill(tokens, read)
        # read at the end: a host read here would stall the launches below
        no_speech = logits[:, 0].softmax(-1)[:, self.no_speech] if self.no_speech is not None else None
        s = self.state.rows(b)
        full = timestamps or temperature > 0 or any(p != 1.0 for p in penalty)
        self.rules.choose(logits[:, 1], s, full)
        for step in range(1, max(limits)):
            # the step feeds positions lengths + step - 1, so it attends over the first max(lengths) + step
            span = next(w for w in self.spans if w >= min(self.context, width + step))
            if self.mode == "graphs":
                self.graphs[b, full, span].replay()
            else:
                self._step(b, full, span)
            if not self.rules.forbid_eot and step % EARLY_STOP_EVERY == 0 and bool(s.finished.all()):
                break
        speech = no_speech.tolist() if no_speech is not None else [0.0] * b
        return DecodeResult(s.history.tolist(), s.sum_logprob.tolist(), speech)

    def _reset(
        self,
        b: int,
        lengths: list[int],
        limits: list[int],
        penalty: Sequence[float],
        temperature: float,
        timestamps: bool,
    ) -> None:
        s, device = self.state.rows(b), self.positions.device
        s.pos.copy_(torch.tensor(lengths, device=device))
        s.limit.copy_(torch.tensor(limits, device=device))
        s.penalty.copy_(torch.tensor(list(penalty), dtype=torch.float32, device=device))
        s.temperature.fill_(temperature)
        s.timestamps.fill_(timestamps)
        s.clear(self.eot)

    def prompt_rows(self, prompts: Sequence[Sequence[int]]) -> tuple[list[list[int]], list[list[int]]]:
        """Prompt tokens and read positions for :meth:`_prefill`.

        Returns:
            the prompts padded with end-of-text to the longest (``[b, T]``), and per row the positions
            to read: ``<|startoftranscript|>`` (the no-speech probability) and the last token.
        """
        width = max(len(p) for p in prompts)
        padded = [[*p, *[self.eot] * (width - len(p))] for p in prompts]
        return padded, [[list(p).index(self.sot), len(p) - 1] for p in prompts]

    def row_limits(self, wanted: Sequence[int], lengths: Sequence[int]) -> list[int]:
        """Most new tokens per row: ``wanted``, at least 1.

        Cut to Whisper's context after a prompt of ``lengths`` tokens and to the history buffer.
        """
        most = self.state.history.shape[1]
        return [max(1, min(m, self.context - n, most)) for m, n in zip(wanted, lengths, strict=True)]

    def _capture(self, b: int) -> BucketStartup:
        """Warm bucket ``b``'s step variants on a side stream, then record each (full or not × span) into its own graph."""
        started = time.perf_counter()
        self._reset(b, [1] * b, [self.context] * b, [1.0] * b, 0.0, False)
        self.state.token[:b].fill_(self.sot)
        side = self.stream or torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for full in (False, True, False, True):  # cuBLAS handles, workspace, allocator settle first
                for span in self.spans:
                    self._step(b, full, span)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        before = torch.cuda.memory_reserved()
        for full in (False, True):
            for span in self.spans:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=side):
                    self._step(b, full, span)
                self.graphs[b, full, span] = graph
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        report = BucketStartup(b, time.perf_counter() - started, torch.cuda.memory_reserved() - before)
        log.info(
            "captured decoder steps for bucket %d in %.2f s (%d MiB)",
            b,
            report.capture_s,
            report.graph_pool_bytes >> 20,
        )
        return report
