"""The ``torch`` engine's word timings: a teacher-forced decoder pass that keeps the alignment heads' cross-attention.

openai/whisper ``timing.py`` ``find_alignment``, batched over windows: the decoded text tokens are fed
once more after ``sot_sequence + <|notimestamps|>``, the cross-attention scores of the alignment heads
only are computed beside the usual SDPA, softmaxed over the window's frames, normalised per frame,
median-filtered (width 7), averaged over heads, then DTW and the word split
(:mod:`.word_alignment`). The pass reads the cross-attention keys/values a decode already put in the
static cache (no second encoder pass) and writes nothing to it, so the graphed decode steps are
untouched. Entry point: :class:`TokenAligner`. Docs: docs/engines.md, "Word timings".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F

from whisper_build.serving.engines.base import Hypothesis, WordTiming
from whisper_build.serving.engines.buckets import pad_to_bucket, plan_chunks
from whisper_build.serving.engines.tokens import SpecialTokens, build_prompt_ids
from whisper_build.serving.engines.torch_graphs import StaticDecoder
from whisper_build.serving.engines.word_alignment import dtw_paths, words_from_path
from whisper_build.serving.prompt import DecodePrompt

__all__ = [
    "MEDIAN_FILTER_WIDTH",
    "TokenAligner",
    "align_encoded",
    "alignment_heads",
    "median_filter",
    "sot_sequence",
]

MEDIAN_FILTER_WIDTH = 7
"""openai/whisper ``find_alignment`` ``medfilt_width`` (CTranslate2 ``align`` ``median_filter_width``)."""
_HOP_LENGTH = 160
_PROBABILITY_ROWS = 8
"""Rows whose token probabilities are computed at once (bounds the ``[rows, tokens, vocab]`` float logits)."""


def alignment_heads(generation: Mapping[str, Any], layers: int, heads: int) -> list[tuple[int, int]]:
    """The ``(layer, head)`` pairs whose cross-attention aligns words.

    ``generation_config.json`` ``alignment_heads`` (Hugging Face checkpoints of openai/whisper carry
    them, and :mod:`whisper_build.workstation.ct2_whisper_to_hf` copies CTranslate2's); else
    openai/whisper ``model.py``'s default for a model without a table entry: every head of the
    last half of the decoder layers.

    Raises:
        ValueError: a pair outside ``layers`` × ``heads``.
    """
    pairs = [(int(layer), int(head)) for layer, head in generation.get("alignment_heads") or []]
    if not pairs:
        return [(layer, head) for layer in range(layers // 2, layers) for head in range(heads)]
    wrong = [p for p in pairs if not (0 <= p[0] < layers and 0 <= p[1] < heads)]
    if wrong:
        raise ValueError(f"alignment_heads {wrong} outside the decoder's {layers} layers × {heads} heads")
    return pairs


def median_filter(x: torch.Tensor, width: int) -> torch.Tensor:
    """Median of ``width`` (odd) along the last dimension, reflect-padded (openai/whisper ``timing.py``, CPU path)."""
    pad = width // 2
    if x.shape[-1] <= pad:
        return x
    padded = F.pad(x[None], (pad, pad, 0, 0), mode="reflect")[0]
    return padded.unfold(-1, width, 1).sort()[0][..., pad]


def sot_sequence(prompt: DecodePrompt, language: str | None, specials: SpecialTokens, tokenizer: Any) -> list[int]:
    """``<|startoftranscript|> [<|lang|> <|task|>]`` of a window (openai/whisper ``sot_sequence``; no previous text).

    ``tokenizer``: the engine's ``tokenizers.Tokenizer``.
    """
    bare = replace(prompt, previous_text="", prefix="")
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False).ids  # noqa: E731 - unused: no text
    return build_prompt_ids(bare, specials, encode, tokenizer.token_to_id, language, timestamps=True)


class TokenAligner:
    """Word timings of decoded windows from the decoder's cache (or given cross-attention keys/values).

    Args:
        decoder: the engine's :class:`~.torch_graphs.StaticDecoder` (weights, cache, embedding).
        heads: ``(layer, head)`` alignment heads (:func:`alignment_heads`).
        no_timestamps: ``<|notimestamps|>`` id; eot: ``<|endoftext|>`` id.
        decode: text ids → text (the tokenizer's).
    """

    def __init__(
        self, decoder: StaticDecoder, heads: Sequence[tuple[int, int]], no_timestamps: int, eot: int, decode: Any
    ) -> None:
        self.decoder, self.no_timestamps, self.eot, self.decode = decoder, no_timestamps, eot, decode
        self.heads = list(heads)
        self.by_layer: dict[int, list[int]] = {}
        for layer, head in self.heads:
            self.by_layer.setdefault(layer, []).append(head)

    def with_words(
        self,
        hypotheses: Sequence[Hypothesis],
        rows: slice | torch.Tensor | None,
        cross: torch.Tensor | None,
        sot_sequences: Sequence[Sequence[int]],
        samples: Sequence[int],
    ) -> list[Hypothesis]:
        """``hypotheses`` with :attr:`Hypothesis.words` filled (their text tokens aligned; see :meth:`align`)."""
        texts = [[t for t in h.tokens if t < self.eot] for h in hypotheses]
        words = self.align(rows, cross, sot_sequences, texts, samples, [h.language for h in hypotheses])
        return [replace(h, words=w) for h, w in zip(hypotheses, words, strict=True)]

    def align(
        self,
        rows: slice | torch.Tensor | None,
        cross: torch.Tensor | None,
        sot_sequences: Sequence[Sequence[int]],
        text_tokens: Sequence[Sequence[int]],
        samples: Sequence[int],
        languages: Sequence[str | None],
    ) -> list[list[WordTiming]]:
        """Words of each window, times in seconds from its start.

        Args:
            rows: the cache rows holding the windows' cross-attention keys/values (a slice or ``[n]``
                long indices), when ``cross`` is ``None``.
            cross: the windows' keys/values ``[layers, 2, n, H, 1500, d/H]`` (:meth:`StaticDecoder.cross_kv`).
            sot_sequences: per window ``<|startoftranscript|> [<|lang|> <|task|>]``.
            text_tokens: per window the decoded text ids (``< eot``) to align.
            samples: per window its audio length in 16 kHz samples (the frames attended to).
            languages: per window the decode's language (word split rule).
        """
        todo = [k for k, tokens in enumerate(text_tokens) if tokens]
        out: list[list[WordTiming]] = [[] for _ in text_tokens]
        if not todo:
            return out
        with torch.inference_mode():
            return self._align(rows, cross, sot_sequences, text_tokens, samples, languages, todo, out)

    def _align(
        self,
        rows: slice | torch.Tensor | None,
        cross: torch.Tensor | None,
        sot_sequences: Sequence[Sequence[int]],
        text_tokens: Sequence[Sequence[int]],
        samples: Sequence[int],
        languages: Sequence[str | None],
        todo: list[int],
        out: list[list[WordTiming]],
    ) -> list[list[WordTiming]]:
        """:meth:`align` of the windows ``todo`` (those with text), into ``out``."""
        pick = torch.tensor(todo, device=self.decoder.positions.device)
        if cross is not None:
            cross = cross[:, :, pick]
        elif isinstance(rows, slice):
            rows = torch.arange(rows.start or 0, rows.stop, device=pick.device)[pick]
        elif rows is not None:
            rows = rows.to(pick.device)[pick]
        sequences = [[*sot_sequences[k], self.no_timestamps, *text_tokens[k], self.eot] for k in todo]
        scores, probabilities = self._forward(sequences, [len(sot_sequences[k]) for k in todo], rows, cross)
        costs = []
        for r, k in enumerate(todo):
            frames = max(1, min(3000, samples[k] // _HOP_LENGTH) // 2)
            length, start = len(sequences[r]), len(sot_sequences[k])
            weights = scores[r, :, :length, :frames].softmax(-1)
            std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
            weights = median_filter((weights - mean) / std, MEDIAN_FILTER_WIDTH)
            costs.append(-weights.mean(0)[start:-1])
        host = [c.double().cpu().numpy() for c in costs]
        for r, (k, path) in enumerate(zip(todo, dtw_paths(host), strict=True)):
            n = len(text_tokens[k])
            out[k] = words_from_path(path, text_tokens[k], probabilities[r][:n], self.eot, self.decode, languages[k])
        return out

    def _forward(
        self,
        sequences: list[list[int]],
        starts: list[int],
        rows: torch.Tensor | None,
        cross: torch.Tensor | None,
    ) -> tuple[torch.Tensor, list[list[float]]]:
        """Teacher-forced pass: alignment-head scores ``[n, heads, T, 1500]`` (float32) and text-token probabilities."""
        d = self.decoder
        device, width = d.positions.device, max(len(s) for s in sequences)
        tokens = torch.tensor([[*s, *[self.eot] * (width - len(s))] for s in sequences], device=device)
        x = d._embed(tokens, d.positions[:width][None, :])
        n, t, dm = x.shape
        scores: list[torch.Tensor] = []
        for i, layer in enumerate(d.decoder.layers):
            q, k, v = d._qkv(layer, x, i)
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # padding sits after: unseen
            x = x + layer.self_attn.out_proj(attended.transpose(1, 2).reshape(n, t, dm))
            keys, values = (cross[i, 0], cross[i, 1]) if cross is not None else (d.cross_k[i][rows], d.cross_v[i][rows])
            query = layer.encoder_attn.q_proj(layer.encoder_attn_layer_norm(x)).view(n, t, d.heads, d.head_dim)
            query = query.transpose(1, 2)
            heads = self.by_layer.get(i)
            if heads:  # the alignment heads' scores only, beside SDPA (openai/whisper ``qkv_attention``'s ``qk``)
                chosen = torch.tensor(heads, device=device)
                qk = query[:, chosen].float() @ keys[:, chosen].float().transpose(-1, -2)
                scores.append(qk * d.head_dim**-0.5)
            a = F.scaled_dot_product_attention(query, keys, values)
            x = x + layer.encoder_attn.out_proj(a.transpose(1, 2).reshape(n, t, dm))
            x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
        # heads in layer order: their mean, all that is used, does not depend on it
        return torch.cat(scores, dim=1), self._probabilities(x, sequences, starts)

    def _probabilities(self, hidden: torch.Tensor, sequences: list[list[int]], starts: list[int]) -> list[list[float]]:
        """Per row, each text token's probability over the text vocabulary (openai/whisper ``text_token_probs``)."""
        d, device = self.decoder, hidden.device
        counts = [len(s) - start - 2 for s, start in zip(sequences, starts, strict=True)]
        most = max(counts)
        # the position of <|notimestamps|> predicts the first text token, and so on
        where = torch.tensor(
            [[min(start + j, len(s) - 1) for j in range(most)] for s, start in zip(sequences, starts, strict=True)],
            device=device,
        )
        targets = torch.tensor(
            [
                [s[min(start + 1 + j, len(s) - 1)] for j in range(most)]
                for s, start in zip(sequences, starts, strict=True)
            ],
            device=device,
        )
        picked = hidden.gather(1, where[:, :, None].expand(-1, -1, hidden.shape[-1]))
        out: list[list[float]] = []
        for lo in range(0, len(sequences), _PROBABILITY_ROWS):
            part = slice(lo, lo + _PROBABILITY_ROWS)
            logits = d._logits(picked[part])[..., : self.eot]
            chosen = logits.log_softmax(-1).gather(-1, targets[part].clamp(max=self.eot - 1)[:, :, None])[..., 0]
            out += chosen.exp().tolist()
        return [p[:c] for p, c in zip(out, counts, strict=True)]


def align_encoded(
    engine: Any, audio: Sequence[Any], prompts: Sequence[DecodePrompt], text_tokens: Sequence[Sequence[int]]
) -> list[list[WordTiming]]:
    """Words of given text (``WhisperEngine.align``) for a ``TorchEngine``: the encoder once more, then the pass.

    Per batch bucket: log-Mel, encoder, cross-attention keys/values (not written to the cache), the
    language (the prompt's, else detected) and :meth:`TokenAligner.align`.
    """
    words: list[list[WordTiming]] = []
    for c in plan_chunks(len(audio), engine._buckets):
        part = slice(c.start, c.stop)
        windows = pad_to_bucket(list(audio[part]), c.bucket)
        with torch.inference_mode():
            kv = engine._decoder.cross_kv(engine._encoder(engine._mel.features(windows)))[:, :, : c.size]
        languages = [p.language for p in prompts[part]]
        if engine.multilingual and any(lang is None for lang in languages):
            detected = engine.detect_language(audio[part])
            languages = [lang or found for lang, found in zip(languages, detected, strict=True)]
        starts = [
            sot_sequence(p, lang, engine._specials, engine._tokenizer)
            for p, lang in zip(prompts[part], languages, strict=True)
        ]
        samples = [len(a) for a in audio[part]]
        words += engine.aligner.align(None, kv, starts, text_tokens[part], samples, languages)
    return words
