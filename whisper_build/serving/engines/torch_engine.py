"""PyTorch Whisper engine: a Hugging Face ``transformers`` checkpoint, static KV cache, CUDA graphs per batch bucket.

Serves a Hugging Face Whisper folder (``config.json``, ``*.safetensors``, ``tokenizer.json``) as it
is, e.g. a fine-tune, with no conversion: batch buckets (:mod:`.buckets`), log-Mel on the device (:mod:`.torch_features`), a
compiled encoder (:mod:`.torch_encoder`), graphed decode steps (:mod:`.torch_graphs`) and openai/whisper's
logit rules (:mod:`.torch_logits`); word timings from the decode's own cross-attention keys/values
(:mod:`.torch_alignment`). No beam search. Entry point: :class:`TorchEngine`
(the decode path and benchmark mode, in its docstring).
Docs: docs/engines.md, "The `torch` engine's decode path".
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tokenizers
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from whisper_build.serving.engines.base import EngineCapabilities, Hypothesis, TokenizerText, WordTiming
from whisper_build.serving.engines.buckets import bucket_sizes, decode_mode, pad_to_bucket, plan_chunks
from whisper_build.serving.engines.features import N_SAMPLES
from whisper_build.serving.engines.params import EngineParams, EngineParamsError
from whisper_build.serving.engines.random_lengths import mixed_window_tokens
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    build_prompt_ids,
    generated_ids,
    is_multilingual,
    language_token_ids,
)
from whisper_build.serving.engines.torch_alignment import TokenAligner, align_encoded, alignment_heads, sot_sequence
from whisper_build.serving.engines.torch_encoder import FusedEncoder
from whisper_build.serving.engines.torch_features import PinnedMel, log_mel_torch
from whisper_build.serving.engines.torch_graphs import StaticDecoder
from whisper_build.serving.engines.torch_logits import LogitRules
from whisper_build.serving.engines.torch_overlap import EngineTuning, gemm_sm_target, side_stream
from whisper_build.serving.engines.word_alignment import dtw_paths
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["TorchEngine", "log_mel_torch"]

log = logging.getLogger(__name__)

_DTYPES = {"default": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@dataclass
class _Chunk:
    """One padded bucket of work: its windows, prompts, penalties and (benchmark) per-row token limits."""

    audio: list[npt.NDArray[np.float32]]
    prompts: list[DecodePrompt]
    penalties: list[float]
    size: int
    limits: list[int] | None = None
    words: bool = False


class TorchEngine(TokenizerText):
    """Whisper through ``transformers`` ``WhisperForConditionalGeneration`` on PyTorch.

    Args:
        params: ``model_path`` is a Hugging Face Whisper folder; ``device`` ``cuda``/``auto``
            uses the GPU when PyTorch sees one; ``compute_type`` ``default`` = float16 on a GPU,
            float32 on the CPU (or ``float16``/``bfloat16``/``float32``).

    Raises:
        EngineParamsError: empty or missing model path, ``beam_size`` > 1, device ``cuda`` without
            a GPU, or an unknown ``compute_type``.

    Serves a Hugging Face Whisper folder (``config.json``, ``*.safetensors``, ``tokenizer.json``,
    optional ``generation_config.json``) as it is, with no conversion. A batch is split into batch
    buckets (:mod:`.buckets`), each padded; per chunk: log-Mel on the device, the encoder
    (:mod:`.torch_encoder`, compiled at start-up), cross-attention keys/values once per window, the
    prompt eagerly and every later token as one replay of the bucket's CUDA graph (:mod:`.torch_graphs`;
    eager on the CPU). Everything is captured and compiled in ``__init__``, before Triton reports ready.
    :meth:`tune` switches how the encoder shares the GPU with the decode (:mod:`.torch_overlap`).

    Decoding follows openai/whisper ``decoding.py`` (:mod:`.torch_logits`): suppressed and begin-suppressed
    tokens, timestamp rules when timestamps are asked, repetition penalty, greedy at temperature 0 and
    sampling above it (``best_of`` samples, the most likely kept), the ``<|nospeech|>`` probability at
    the ``<|startoftranscript|>`` position, summed log-probs, language detection for multilingual
    models when the request names no language, and the ``translate`` task. No beam search
    (``beam_size`` > 1 is refused). Word timings (``generate(words=True)``, :meth:`align`): a
    teacher-forced pass over the decoded tokens that computes the alignment heads' scores only,
    from the cross-attention keys/values the decode left in the cache (:mod:`.torch_alignment`);
    the decode itself keeps SDPA and its graphs.

    Benchmark mode (``random_weights_fixed_tokens`` > 0): the model is built from ``config.json``
    with seeded random weights and every window decodes exactly that many tokens (end-of-text
    suppressed), so production-sized compute can be timed without the weights. The serving image
    refuses it (:mod:`whisper_build.serving.supervisor`).
    """

    def __init__(self, params: EngineParams) -> None:
        if not params.model_path:
            raise EngineParamsError("model_path: required for engine torch (a Hugging Face Whisper folder)")
        if params.beam_size != 1:
            raise EngineParamsError("beam_size: engine torch has no beam search (greedy or sampled); set beam_size 1")
        if params.compute_type not in _DTYPES:
            raise EngineParamsError(f"compute_type: engine torch takes one of {', '.join(_DTYPES)}")
        path = params.resolved_model_path()
        cuda = torch.cuda.is_available()
        if params.device == "cuda" and not cuda:
            raise EngineParamsError("device: cuda was asked for but PyTorch sees no GPU")
        self._device = torch.device("cuda" if cuda and params.device != "cpu" else "cpu")
        dtype = _DTYPES[params.compute_type] or (torch.float16 if self._device.type == "cuda" else torch.float32)
        self._params = params
        self._model = self._load(path, dtype).eval()
        config = self._model.config
        self._tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        self._specials = SpecialTokens.from_lookup(self._tokenizer.token_to_id, is_multilingual(config.vocab_size))
        self.name = "torch"
        self.capabilities = EngineCapabilities(
            timestamps=True, word_timestamps=True, sampling=True, aligns_in_decode=True
        )
        self.multilingual = self._specials.multilingual
        self.eot = self._specials.eot
        self.timestamp_begin = self._specials.timestamp_begin
        self._languages = language_token_ids(self._tokenizer.token_to_id)
        no_speech = self._tokenizer.token_to_id("<|nospeech|>") or self._tokenizer.token_to_id("<|nocaptions|>")
        generation = _read_json(path / "generation_config.json")
        rules = LogitRules(
            config.vocab_size, self.eot, self.timestamp_begin, self._specials.no_timestamps,
            generation.get("suppress_tokens") or [], generation.get("begin_suppress_tokens") or [],
            forbid_eot=bool(params.random_weights_fixed_tokens), device=self._device,
        )  # fmt: skip
        self._buckets = bucket_sizes(params.max_engine_batch)
        self._mel = PinnedMel(config.num_mel_bins, self._buckets[-1], self._device, self._model.dtype)
        self.tuning = EngineTuning()
        self._side, self._green = side_stream(self._device, None)
        self.mode = decode_mode(params.cuda_graphs, self._device.type)
        started = time.perf_counter()
        self._encoder = FusedEncoder(self._model, params.encoder_compile if self._device.type == "cuda" else "none")
        if self._encoder.compiled:
            self._warm()
        max_new = params.random_weights_fixed_tokens or params.max_new_tokens
        with torch.inference_mode():
            self._decoder = StaticDecoder(
                self._model, rules, self._buckets, max_new, self.mode, self._specials.sot, no_speech
            )
        heads = alignment_heads(generation, config.decoder_layers, config.decoder_attention_heads)
        self.aligner = TokenAligner(self._decoder, heads, self._specials.no_timestamps, self.eot, self.decode_text)
        if self._device.type == "cuda":
            dtw_paths([np.zeros((2, 2))])  # numba compiles the DTW now, before the model reports ready
        self.startup_s = time.perf_counter() - started
        log.warning(
            "torch whisper loaded: %s device=%s dtype=%s multilingual=%s n_mels=%d decode=%s buckets=%s "
            "encoder_compile=%s start-up %.1f s%s",
            path, self._device, dtype, self._specials.multilingual, config.num_mel_bins, self.mode, self._buckets,
            self._encoder.compiled and params.encoder_compile, self.startup_s,
            f" RANDOM WEIGHTS, {params.random_weights_fixed_tokens} tokens per window (benchmark mode)"
            if params.random_weights_fixed_tokens else "",
        )  # fmt: skip

    def _load(self, path: Path, dtype: torch.dtype) -> WhisperForConditionalGeneration:
        if not self._params.random_weights_fixed_tokens:
            # cast after loading rather than through from_pretrained's dtype argument, which transformers
            # renamed (torch_dtype before 4.56, dtype since): the serving image's transformers is the one
            # its TensorRT-LLM pins, older than the one this engine was measured with
            model = WhisperForConditionalGeneration.from_pretrained(path, attn_implementation="sdpa")
            return model.to(device=self._device, dtype=dtype)
        config = WhisperConfig.from_pretrained(path, attn_implementation="sdpa")
        torch.manual_seed(0)
        with self._device:
            model = WhisperForConditionalGeneration(config)
        return model.to(dtype)

    def tune(self, tuning: EngineTuning) -> None:
        """Switch the GPU overlap between batches (:class:`~.torch_overlap.EngineTuning`; errors: :func:`~.torch_overlap.side_stream`)."""
        if tuning.encoder_sms != self.tuning.encoder_sms:
            if self._side is not None:
                self._side.synchronize()  # nothing of the old stream's is still running
            self._side, self._green = side_stream(self._device, tuning.encoder_sms)
        with torch.inference_mode():
            self._decoder.set_fused_qkv(tuning.decode_fused_qkv)
        self.tuning = tuning

    def generate(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
        *,
        timestamps: bool,
        temperature: float,
        words: bool = False,
    ) -> list[Hypothesis]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.generate`.

        Each window is decoded once at temperature 0 (greedy); at temperature > 0 ``best_of``
        samples are drawn and the one with the highest length-normalised log-prob is kept (as the
        ``ctranslate2`` engine keeps CTranslate2's best hypothesis). A window without a language
        on a multilingual model gets the detected one (``Hypothesis.language``). ``words``: each
        decode's text is aligned while its keys/values are still in the cache (``Hypothesis.words``).
        """
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        copies = self._params.best_of if temperature > 0 else 1
        if temperature > 0:
            # the default CPU and CUDA generators, which the graphed and the eager decode step draw from:
            # the same windows in the same batch sample the same (EngineParams.sampling_seed)
            torch.manual_seed(self._params.sampling_seed)
        rows = [i for i in range(len(audio)) for _ in range(copies)]
        mixed = [mixed_window_tokens(a) for a in audio] if self._params.random_weights_lengths == "mixed" else []
        chunks = (
            _Chunk(
                pad_to_bucket([audio[i] for i in idx], c.bucket), pad_to_bucket([prompts[i] for i in idx], c.bucket),
                pad_to_bucket([repetition_penalty[i] for i in idx], c.bucket), c.size,
                pad_to_bucket([mixed[i] for i in idx], c.bucket) if mixed else None, words,
            )
            for c in plan_chunks(len(rows), self._buckets)
            for idx in [rows[c.start : c.stop]]
        )  # fmt: skip
        decoded = [h for part in self._pipeline(chunks, timestamps, temperature) for h in part]
        return [
            max(decoded[k * copies : (k + 1) * copies], key=lambda h: h.sum_logprob / max(1, len(h.tokens)))
            for k in range(len(audio))
        ]

    def window_token_limit(self, audio: npt.NDArray[np.float32]) -> int | None:
        """Benchmark mode ``random_weights_lengths=mixed``: this window's decode length; else ``None``."""
        if self._params.random_weights_lengths != "mixed":
            return None
        return mixed_window_tokens(audio)

    def decode_windows(
        self,
        batches: Iterable[Sequence[npt.NDArray[np.float32]]],
        prompt: DecodePrompt,
        *,
        timestamps: bool = False,
        new_tokens: Iterable[Sequence[int]] | None = None,
    ) -> Iterator[list[Hypothesis]]:
        """Greedy decodes of a stream of batches, pipelined: batch ``k + 1``'s encoder runs during batch ``k``'s decode.

        Args:
            batches: windows per batch (float32 16 kHz, ≤ 30 s each), any size (split into buckets).
            prompt: the decoder prompt of every window.
            timestamps: predict timestamp tokens.
            new_tokens: benchmark mode only: per batch, the number of tokens each window decodes, each
                1 to ``random_weights_fixed_tokens`` (the mixed-length workload); ``None`` = that many for all.

        Yields:
            one hypothesis per window of each batch, in order, as each batch finishes.

        Raises:
            ValueError: ``new_tokens`` without benchmark mode, out of range, or of another length than its batch.
        """
        if new_tokens is not None and not self._params.random_weights_fixed_tokens:
            raise ValueError("new_tokens: only in benchmark mode (random_weights_fixed_tokens > 0)")
        limits_of = iter(new_tokens) if new_tokens is not None else None
        capacity = self._params.random_weights_fixed_tokens
        sizes: list[int] = []

        def chunks() -> Iterator[_Chunk]:
            for batch in batches:
                windows = list(batch)
                limits = list(next(limits_of)) if limits_of is not None else None
                if limits is not None and len(limits) != len(windows):
                    raise ValueError(f"new_tokens: {len(limits)} limits for a batch of {len(windows)} windows")
                if limits is not None and not all(1 <= n <= capacity for n in limits):
                    raise ValueError(f"new_tokens: each must be 1 to random_weights_fixed_tokens ({capacity})")
                sizes.append(len(windows))
                for c in plan_chunks(len(windows), self._buckets):
                    rows = slice(c.start, c.stop)
                    yield _Chunk(
                        pad_to_bucket(windows[rows], c.bucket), [prompt] * c.bucket, [1.0] * c.bucket, c.size,
                        pad_to_bucket(limits[rows], c.bucket) if limits is not None else None,
                    )  # fmt: skip

        done: list[Hypothesis] = []
        for part in self._pipeline(chunks(), timestamps, 0.0):
            done += part
            while sizes and len(done) >= sizes[0]:
                n = sizes.pop(0)
                yield done[:n]
                done = done[n:]

    def _pipeline(self, chunks: Iterable[_Chunk], timestamps: bool, temperature: float) -> Iterator[list[Hypothesis]]:
        """Each chunk's hypotheses (its real rows), the next chunk's log-Mel + encoder launched before this one decodes.

        On a GPU, where a next chunk exists, its host copy, log-Mel and encoder run on a side stream
        while the current chunk decodes on the decoder's high-priority stream; a lone chunk runs on
        the current stream alone (nothing to overlap); on the CPU the same order runs serially.
        """
        pending = iter(chunks)
        current = next(pending, None)
        following = next(pending, None)
        launched = self._launch_encoder(current, following is not None) if current is not None else None
        while current is not None and launched is not None:
            upcoming = self._launch_encoder(following, True) if following is not None else None
            yield self._decode_bucket(current, launched, timestamps, temperature)[: current.size]
            current, launched = following, upcoming
            following = next(pending, None) if current is not None else None

    @torch.inference_mode()
    def _launch_encoder(self, chunk: _Chunk, overlap: bool) -> tuple[torch.Tensor, torch.cuda.Event | None]:
        """Log-Mel + encoder of ``chunk`` and the event of its end (side stream: ``overlap``).

        The encoder output ``[bucket, 1500, d]``, or with ``tuning.cross_kv_on_side`` its cross-attention
        keys/values ``[layers, 2, bucket, H, 1500, d/H]`` (:meth:`StaticDecoder.cross_kv`).
        """
        early_kv = self._decoder.cross_kv if self.tuning.cross_kv_on_side else (lambda encoded: encoded)
        if self._side is None or not overlap:
            return early_kv(self._encoder(self._mel.features(chunk.audio))), None
        self._side.wait_stream(torch.cuda.current_stream())  # the weights and buffers are ready
        with torch.cuda.stream(self._side), gemm_sm_target(self._device, self.tuning.encoder_gemm_sms):
            encoded = early_kv(self._encoder(self._mel.staged(chunk.audio)))
            finished = torch.cuda.Event()
            finished.record()
        encoded.record_stream(self._decoder.stream or torch.cuda.current_stream())
        return encoded, finished

    @torch.inference_mode()
    def _decode_bucket(
        self,
        chunk: _Chunk,
        launched: tuple[torch.Tensor, torch.cuda.Event | None],
        timestamps: bool,
        temperature: float,
    ) -> list[Hypothesis]:
        """Cross-attention keys/values, language detection and decode of one padded bucket."""
        stream = self._decoder.stream
        if stream is None or launched[1] is None:  # the CPU, or a lone chunk: all on the current stream
            return self._decode_chunk(chunk, launched[0], timestamps, temperature)
        stream.wait_stream(torch.cuda.current_stream())
        stream.wait_event(launched[1])  # this chunk's encoder, not the next one's
        with torch.cuda.stream(stream):
            return self._decode_chunk(chunk, launched[0], timestamps, temperature)

    def _decode_chunk(
        self, chunk: _Chunk, encoded: torch.Tensor, timestamps: bool, temperature: float
    ) -> list[Hypothesis]:
        if self.tuning.cross_kv_on_side:
            self._decoder.set_cross_kv(encoded)
        else:
            self._decoder.set_cross(encoded)
        prompts, penalties = chunk.prompts, chunk.penalties
        languages: list[str | None] = [p.language for p in prompts]
        if self._specials.multilingual and any(lang is None for lang in languages):
            detected = self._decoder.detect_language(len(prompts), list(self._languages))
            languages = [lang or self._languages[d] for lang, d in zip(languages, detected, strict=True)]
        prompt_ids = [
            build_prompt_ids(p, self._specials, self._encode, self._tokenizer.token_to_id, lang, timestamps)
            for p, lang in zip(prompts, languages, strict=True)
        ]
        max_new = chunk.limits or self._params.random_weights_fixed_tokens or self._params.max_new_tokens
        result = self._decoder.decode(prompt_ids, penalties, temperature, timestamps, max_new)
        decoded = [
            Hypothesis(generated_ids(tokens, [], self.eot), logprob, no_speech, lang)
            for tokens, logprob, no_speech, lang in zip(
                result.tokens, result.sum_logprob, result.no_speech_prob, languages, strict=True
            )
        ]
        if not chunk.words:
            return decoded
        n = chunk.size  # the padded rows are not aligned
        starts = [
            sot_sequence(p, lang, self._specials, self._tokenizer)
            for p, lang in zip(prompts[:n], languages[:n], strict=True)
        ]
        samples = [len(a) for a in chunk.audio[:n]]
        return self.aligner.with_words(decoded[:n], slice(0, n), None, starts, samples) + decoded[n:]

    @torch.inference_mode()
    def align(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        text_tokens: Sequence[Sequence[int]],
    ) -> list[list[WordTiming]]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.align` (:func:`.torch_alignment.align_encoded`).

        The decoding layer does not call it (``aligns_in_decode``: ``generate(words=True)`` aligns
        without a second encoder pass); kept for callers that hold text without its decode.
        """
        return align_encoded(self, audio, prompts, text_tokens)

    @torch.inference_mode()
    def detect_language(self, audio: Sequence[npt.NDArray[np.float32]]) -> list[str | None]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.detect_language`.

        Per padded bucket: encoder, cross-attention keys/values, then one decoder step on
        ``<|startoftranscript|>``, argmax over the language tokens (openai/whisper ``detect_language``;
        :meth:`~whisper_build.serving.engines.torch_graphs.StaticDecoder.detect_language`).
        """
        if not self.multilingual:
            return [None] * len(audio)
        out: list[str | None] = []
        for chunk in plan_chunks(len(audio), self._buckets):
            windows = pad_to_bucket(list(audio[chunk.start : chunk.stop]), chunk.bucket)
            self._decoder.set_cross(self._encoder(self._mel.features(windows)))
            detected = self._decoder.detect_language(chunk.bucket, list(self._languages))
            out += [self._languages[d] for d in detected[: chunk.size]]
        return out

    @torch.inference_mode()
    def _warm(self) -> None:
        """Run the compiled encoder once per bucket, so that it compiles before the model reports ready."""
        silence = np.zeros(N_SAMPLES, dtype=np.float32)
        for bucket in self._buckets:
            self._encoder(self._mel.features([silence] * bucket))

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}
