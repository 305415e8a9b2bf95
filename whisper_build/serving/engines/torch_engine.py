"""PyTorch Whisper engine: a Hugging Face ``transformers`` checkpoint, fp16, SDPA attention, batched.

Serves a Hugging Face Whisper folder (``config.json``, ``*.safetensors``, ``tokenizer.json``,
optional ``generation_config.json``) as it is, e.g. what a fine-tuning run saves, with no
conversion. One :meth:`TorchEngine.transcribe_batch` call computes log-Mel features on the device
(``torch.stft``, openai/whisper ``audio.py`` ``log_mel_spectrogram``), runs the encoder once over
all non-silent windows, and decodes greedily with a key/value cache, once per distinct
(repetition penalty, prompt length) group, like the ``ctranslate2`` engine.

Decoding follows openai/whisper ``decoding.py`` without timestamps: special and timestamp tokens
(ids above ``<|endoftext|>``) and the checkpoint's ``suppress_tokens`` are never produced,
``begin_suppress_tokens`` (blank, end-of-text) not as the first token; the ``<|nospeech|>``
probability is read at the ``<|startoftranscript|>`` position. Greedy only: ``beam_size`` > 1 is
refused (beam search is the TensorRT-LLM and CTranslate2 engines' job).

Benchmark mode (``random_weights_fixed_tokens`` > 0): the model is built from ``config.json``
with seeded random weights and every window decodes exactly that many tokens (end-of-text
suppressed), so production-sized compute can be timed without the weights. The serving image
refuses it (:mod:`whisper_build.serving.supervisor`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tokenizers
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration
from transformers.audio_utils import mel_filter_bank
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from whisper_build.serving.engines.base import (
    EngineCapabilities,
    EngineParams,
    EngineParamsError,
    Hypothesis,
    NoWordAlignment,
    TokenizerText,
)
from whisper_build.serving.engines.features import N_SAMPLES, SAMPLE_RATE, is_silent, pad_or_trim_audio
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    best_language,
    build_prompt_ids,
    clean_output_ids,
    generated_ids,
    group_indices,
    is_multilingual,
    language_token_ids,
)
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["TorchEngine", "log_mel_torch"]

log = logging.getLogger(__name__)

N_FFT = 400
"""STFT size (25 ms at 16 kHz), openai/whisper ``audio.py``."""
HOP_LENGTH = 160
"""STFT hop (10 ms), openai/whisper ``audio.py``."""

_DTYPES = {"default": None, "float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def log_mel_torch(audio: torch.Tensor, filters: torch.Tensor) -> torch.Tensor:
    """Whisper log-Mel features of 30 s windows, on ``audio``'s device.

    Args:
        audio: float32 ``[B, 480000]`` (16 kHz, zero-padded to 30 s).
        filters: float32 ``[n_mels, 201]`` Slaney Mel filters.

    Returns:
        float32 ``[B, n_mels, 3000]``: ``log10`` power, floored at its window maximum − 8, then
        ``(x + 4) / 4`` (openai/whisper ``log_mel_spectrogram``).
    """
    window = torch.hann_window(N_FFT, device=audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.amax(dim=(1, 2), keepdim=True) - 8.0)
    return (log_spec + 4.0) / 4.0


class TorchEngine(TokenizerText, NoWordAlignment):
    """Whisper through ``transformers`` ``WhisperForConditionalGeneration`` on PyTorch.

    Args:
        params: ``model_path`` is a Hugging Face Whisper folder; ``device`` ``cuda``/``auto``
            uses the GPU when PyTorch sees one; ``compute_type`` ``default`` = float16 on a GPU,
            float32 on the CPU (or ``float16``/``bfloat16``/``float32``).

    Raises:
        EngineParamsError: empty or missing model path, ``beam_size`` > 1, device ``cuda`` without
            a GPU, or an unknown ``compute_type``.
    """

    def __init__(self, params: EngineParams) -> None:
        if not params.model_path:
            raise EngineParamsError("model_path: required for engine torch (a Hugging Face Whisper folder)")
        if params.beam_size != 1:
            raise EngineParamsError("beam_size: engine torch decodes greedily; set beam_size 1")
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
        self.capabilities = EngineCapabilities(timestamps=False, word_timestamps=False, sampling=False)
        self.multilingual = self._specials.multilingual
        self.eot = self._specials.eot
        self.timestamp_begin = self._specials.timestamp_begin
        self._no_speech = self._tokenizer.token_to_id("<|nospeech|>") or self._tokenizer.token_to_id("<|nocaptions|>")
        self._language_ids = language_token_ids(self._tokenizer.token_to_id)
        generation = _read_json(path / "generation_config.json")
        self._suppress = self._mask(config.vocab_size, generation.get("suppress_tokens") or [], above_eot=True)
        self._suppress_begin = self._mask(config.vocab_size, generation.get("begin_suppress_tokens") or [])
        filters = mel_filter_bank(
            num_frequency_bins=1 + N_FFT // 2, num_mel_filters=config.num_mel_bins, min_frequency=0.0,
            max_frequency=SAMPLE_RATE / 2, sampling_rate=SAMPLE_RATE, norm="slaney", mel_scale="slaney",
        )  # fmt: skip
        self._filters = torch.from_numpy(np.ascontiguousarray(filters.T, dtype=np.float32)).to(self._device)
        log.warning(
            "torch whisper loaded: %s device=%s dtype=%s multilingual=%s n_mels=%d%s",
            path, self._device, dtype, self._specials.multilingual, config.num_mel_bins,
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

    def _mask(self, vocab_size: int, ids: Sequence[int], above_eot: bool = False) -> torch.Tensor:
        """Additive logit mask: ``-inf`` at ``ids`` (and every id above ``<|endoftext|>``)."""
        mask = torch.zeros(vocab_size, dtype=torch.float32)
        valid = [i for i in ids if 0 <= i < vocab_size]
        mask[valid] = float("-inf")
        if above_eot:
            mask[self._specials.eot + 1 :] = float("-inf")
        return mask.to(self._device)

    def transcribe_batch(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
    ) -> list[str]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.transcribe_batch`."""
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        texts = [""] * len(audio)
        fixed = self._params.random_weights_fixed_tokens
        voiced = [i for i, w in enumerate(audio) if fixed or not is_silent(w, self._params.silence_dbfs)]
        for start in range(0, len(voiced), self._params.max_engine_batch):
            chunk = voiced[start : start + self._params.max_engine_batch]
            decoded = self._decode(
                [audio[i] for i in chunk], [prompts[i] for i in chunk], [repetition_penalty[i] for i in chunk]
            )
            for i, text in zip(chunk, decoded, strict=True):
                texts[i] = text
        return texts

    def generate(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
        *,
        timestamps: bool,
        temperature: float,
    ) -> list[Hypothesis]:
        """Greedy decode with summed log-probs (no timestamps, no sampling: see ``capabilities``).

        Raises:
            ValueError: ``timestamps`` or ``temperature`` > 0 asked.
        """
        if timestamps or temperature > 0:
            raise ValueError("engine torch decodes greedily without timestamps")
        out: list[Hypothesis] = []
        for start in range(0, len(audio), self._params.max_engine_batch):
            end = start + self._params.max_engine_batch
            out += self._decode(
                list(audio[start:end]), list(prompts[start:end]), list(repetition_penalty[start:end]), raw=True
            )
        return out

    @torch.inference_mode()
    def _decode(
        self,
        audio: list[npt.NDArray[np.float32]],
        prompts: list[DecodePrompt],
        penalties: list[float],
        raw: bool = False,
    ) -> list[Any]:  # texts, or Hypothesis objects when raw
        encoded = self._encoder_states(audio)
        # generate() (raw) gets every language from the decoding layer; the plain text path has no detection step
        language = self._params.default_language if self._specials.multilingual and not raw else None
        prompt_ids = [
            build_prompt_ids(p, self._specials, self._encode, self._tokenizer.token_to_id, p.language or language)
            for p in prompts
        ]
        texts: list[Any] = [""] * len(audio)
        groups = group_indices([(penalty, len(ids)) for penalty, ids in zip(penalties, prompt_ids, strict=True)])
        for (penalty, _length), indices in groups.items():
            rows = encoded if len(groups) == 1 else encoded[indices]
            tokens, no_speech, logprobs = self._greedy(rows, [prompt_ids[i] for i in indices], penalty)
            for i, ids, p_no_speech, logprob in zip(indices, tokens, no_speech, logprobs, strict=True):
                if raw:
                    new = generated_ids(ids, [], self.eot)
                    texts[i] = Hypothesis(new, logprob, p_no_speech, prompts[i].language or language)
                    continue
                if not self._params.random_weights_fixed_tokens and p_no_speech > self._params.no_speech_threshold:
                    continue  # silence or noise, as the ctranslate2 engine decides
                texts[i] = self._tokenizer.decode(clean_output_ids(ids, prompt_ids[i], self._specials.eot)).strip()
        return texts

    def _encoder_states(self, audio: Sequence[npt.NDArray[np.float32]]) -> torch.Tensor:
        """Encoder output ``[B, 1500, d_model]`` of the windows (padded or cut to 30 s)."""
        batch = torch.from_numpy(np.stack([pad_or_trim_audio(w, N_SAMPLES) for w in audio])).to(self._device)
        features = log_mel_torch(batch, self._filters).to(self._model.dtype)
        return self._model.model.encoder(input_features=features).last_hidden_state

    @torch.inference_mode()
    def detect_language(self, audio: Sequence[npt.NDArray[np.float32]]) -> list[str | None]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.detect_language`.

        One decoder step on ``<|startoftranscript|>`` per window; its logits go to
        :func:`whisper_build.serving.engines.tokens.best_language` (openai/whisper ``detect_language``).
        """
        if not self.multilingual:
            return [None] * len(audio)
        out: list[str | None] = []
        for start in range(0, len(audio), self._params.max_engine_batch):
            chunk = audio[start : start + self._params.max_engine_batch]
            sot = torch.full((len(chunk), 1), self._specials.sot, device=self._device)
            logits = self._model(encoder_outputs=(self._encoder_states(chunk),), decoder_input_ids=sot).logits
            out += [best_language(row, self._language_ids) for row in logits[:, 0].float().cpu().numpy()]
        return out

    def _greedy(
        self, encoded: torch.Tensor, prompt_ids: list[list[int]], penalty: float
    ) -> tuple[list[list[int]], list[float], list[float]]:
        """Greedy decode of one group of equal-length prompts.

        Returns:
            New token ids per row (ending at ``<|endoftext|>``), the ``<|nospeech|>``
            probability per row, and the summed log-prob of each row's tokens up to and
            including ``<|endoftext|>``.
        """
        eot, fixed = self._specials.eot, self._params.random_weights_fixed_tokens
        prompt = torch.tensor(prompt_ids, device=self._device)
        limit = fixed or min(self._params.max_new_tokens, self._model.config.max_target_positions - prompt.shape[1])
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        out = self._model(encoder_outputs=(encoded,), decoder_input_ids=prompt, past_key_values=cache, use_cache=True)
        sot_index = prompt_ids[0].index(self._specials.sot)
        no_speech = (
            out.logits[:, sot_index].float().softmax(-1)[:, self._no_speech].tolist()
            if self._no_speech is not None
            else [0.0] * len(prompt_ids)
        )
        logits = out.logits[:, -1].float()
        generated = torch.empty((len(prompt_ids), 0), dtype=torch.long, device=self._device)
        finished = torch.zeros(len(prompt_ids), dtype=torch.bool, device=self._device)
        sum_logprob = torch.zeros(len(prompt_ids), dtype=torch.float32, device=self._device)
        for step in range(limit):
            logits = logits + self._suppress
            if step == 0:
                logits = logits + self._suppress_begin
            if fixed:
                logits[:, eot] = float("-inf")
            if penalty != 1.0 and generated.shape[1]:
                seen = logits.gather(1, generated)
                logits = logits.scatter(1, generated, torch.where(seen > 0, seen / penalty, seen * penalty))
            token = torch.where(finished, eot, logits.argmax(-1))
            chosen = logits.log_softmax(-1).gather(1, token[:, None])[:, 0]
            sum_logprob += torch.where(finished, 0.0, chosen)
            generated = torch.cat([generated, token[:, None]], dim=1)
            finished |= token == eot
            if not fixed and step % 8 == 7 and bool(finished.all()):  # a host sync every 8 steps only
                break
            if step + 1 < limit:
                out = self._model(
                    encoder_outputs=(encoded,), decoder_input_ids=token[:, None], past_key_values=cache, use_cache=True
                )
                logits = out.logits[:, -1].float()
        return generated.tolist(), no_speech, sum_logprob.tolist()

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}
