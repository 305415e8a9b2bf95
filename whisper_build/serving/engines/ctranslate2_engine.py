"""CTranslate2 Whisper engine: CPU (development, tests) or GPU (fallback where no TensorRT-LLM engine exists).

One :meth:`CTranslate2Engine.generate` call computes features for the whole batch, runs the
encoder once over its windows (``Whisper.encode``), and then decodes with ``Whisper.generate``,
which needs every item of a call to share the repetition penalty and
the position of ``<|startoftranscript|>`` ("The generate method currently requires the
<|startoftranscript|> token to be at the same position in all batches", CTranslate2 4.x), so the
decode runs once per distinct (penalty, prompt length) pair — one call in the usual case where
requests carry no previous text.

:meth:`CTranslate2Engine.generate` is the decoding layer's entry (timestamps, sampling, scores,
no-speech probability); :meth:`CTranslate2Engine.align` gives word timings with
``Whisper.align`` (cross-attention + DTW), as faster-whisper's ``find_alignment`` does.
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import ctranslate2
import numpy as np
import numpy.typing as npt
import tokenizers

from whisper_build.serving.engines.base import EngineCapabilities, Hypothesis, TokenizerText, WordTiming
from whisper_build.serving.engines.features import SAMPLE_RATE, log_mel_batch
from whisper_build.serving.engines.params import EngineParams
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    build_prompt_ids,
    ctranslate2_max_length,
    generated_ids,
    group_indices,
    prefix_ids,
)
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["CTranslate2Engine"]

log = logging.getLogger(__name__)

TOKENS_PER_SECOND = SAMPLE_RATE / (160 * 2)
"""Encoder frames per second: hop 160 samples, conv stride 2 (openai/whisper ``audio.py``) = 50."""
_HOP_LENGTH = 160
_PREPEND_PUNCTUATIONS = "\"'“¿([{-"
_APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
"""openai/whisper ``transcribe()`` defaults for merging punctuation into words."""


class CTranslate2Engine(TokenizerText):
    """Whisper through ``ctranslate2.models.Whisper`` with the model directory's ``tokenizer.json``.

    Args:
        params: engine parameters; ``model_path`` is a CTranslate2 Whisper directory
            (``model.bin``, ``config.json``, ``tokenizer.json``), e.g. faster-whisper models.

    Raises:
        EngineParamsError: bad model path.
        RuntimeError: CTranslate2 cannot load the model (message from the runtime).
    """

    def __init__(self, params: EngineParams) -> None:
        path = params.resolved_model_path()
        self._params = params
        # before the model's worker threads exist: each seeds its generator once, at its first sample
        ctranslate2.set_random_seed(params.sampling_seed)
        self._model = ctranslate2.models.Whisper(
            str(path), device=params.device, compute_type=params.compute_type,
            intra_threads=params.cpu_threads,
        )  # fmt: skip
        self._tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        self._specials = SpecialTokens.from_lookup(self._tokenizer.token_to_id, self._model.is_multilingual)
        self.name = "ctranslate2"
        self.capabilities = EngineCapabilities(timestamps=True, word_timestamps=True, sampling=True)
        self.multilingual = bool(self._model.is_multilingual)
        self.eot = self._specials.eot
        self.timestamp_begin = self._specials.timestamp_begin
        log.info(
            "ctranslate2 whisper loaded: %s device=%s compute_type=%s multilingual=%s n_mels=%d",
            path, params.device, params.compute_type, self._model.is_multilingual, self._model.n_mels,
        )  # fmt: skip

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def _encoded(self, audio: Sequence[npt.NDArray[np.float32]]) -> ctranslate2.StorageView:
        features = ctranslate2.StorageView.from_array(log_mel_batch(list(audio), self._model.n_mels))
        return self._model.encode(features, to_cpu=True)

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

        Temperature 0 runs the configured beam search; temperature > 0 samples ``best_of``
        hypotheses from the full distribution (``beam_size=1, sampling_topk=0,
        num_hypotheses=best_of``, as faster-whisper does; CTranslate2's default ``sampling_topk=1``
        would be greedy at any temperature) and keeps the most likely one; the samples follow
        ``sampling_seed``, set when the engine loaded (:class:`EngineParams`). ``scores`` are
        CTranslate2's length-normalised cumulative log-probs, so ``sum = score × len(tokens)``
        (``length_penalty`` 1; faster-whisper ``generate_with_fallback``). ``words`` is ignored
        (``capabilities.aligns_in_decode`` is false): the decoding layer calls :meth:`align`.
        """
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        out: list[Hypothesis | None] = [None] * len(audio)
        batch = self._params.max_engine_batch
        for start in range(0, len(audio), batch):
            idx = list(range(start, min(start + batch, len(audio))))
            encoded = self._encoded([audio[i] for i in idx])
            languages = self._languages(encoded, [prompts[i] for i in idx])
            prompt_ids = [
                build_prompt_ids(
                    prompts[i], self._specials, self._encode, self._tokenizer.token_to_id, lang, timestamps
                )
                for i, lang in zip(idx, languages, strict=True)
            ]
            sampling = self._sampling(temperature)
            keys = [(repetition_penalty[i], len(ids)) for i, ids in zip(idx, prompt_ids, strict=True)]
            groups = group_indices(keys)
            for (penalty, _length), rows in groups.items():
                results = self._model.generate(
                    encoded if len(groups) == 1 else _select(encoded, rows),
                    [prompt_ids[r] for r in rows],
                    max_length=ctranslate2_max_length(self._params.max_new_tokens),
                    repetition_penalty=penalty,
                    return_no_speech_prob=True,
                    return_scores=True,
                    **sampling,
                )
                for r, result in zip(rows, results, strict=True):
                    forced = prefix_ids(prompts[idx[r]], self._encode)  # CTranslate2 returns it first
                    tokens = generated_ids(result.sequences_ids[0], prompt_ids[r], self.eot, forced)
                    out[idx[r]] = Hypothesis(
                        tokens=tokens,
                        sum_logprob=float(result.scores[0]) * max(1, len(tokens)),
                        no_speech_prob=float(result.no_speech_prob),
                        language=languages[r],
                    )
        return [h for h in out if h is not None]

    def _sampling(self, temperature: float) -> dict[str, float | int]:
        """``generate`` keywords: beam search at temperature 0, else ``best_of`` full-distribution samples."""
        if temperature > 0:
            return {"beam_size": 1, "num_hypotheses": self._params.best_of, "sampling_topk": 0,
                    "sampling_temperature": temperature}  # fmt: skip
        return {"beam_size": self._params.beam_size}

    def align(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        text_tokens: Sequence[Sequence[int]],
    ) -> list[list[WordTiming]]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.align`.

        ``Whisper.align`` (median filter 7, openai/whisper ``timing.py``) maps tokens to encoder
        frames (50 per second); words are split and punctuation merged with faster-whisper's
        tokenizer helpers, word start/end are the frames where the word's first/next word's
        token begins (faster-whisper ``find_alignment``).
        """
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import merge_punctuations

        words: list[list[WordTiming]] = [[] for _ in audio]
        todo = [i for i, tokens in enumerate(text_tokens) if tokens]
        batch = self._params.max_engine_batch
        for start in range(0, len(todo), batch):
            idx = todo[start : start + batch]
            encoded = self._encoded([audio[i] for i in idx])
            languages = self._languages(encoded, [prompts[i] for i in idx])
            # align() takes one start sequence per call: group windows by language/task.
            groups = group_indices([(lang, prompts[i].task) for i, lang in zip(idx, languages, strict=True)])
            for (language, task), rows in groups.items():
                helper = Tokenizer(self._tokenizer, self.multilingual, task=task, language=language)
                tokens = [list(text_tokens[idx[r]]) for r in rows]
                frames = [max(1, min(3000, len(audio[idx[r]]) // _HOP_LENGTH)) for r in rows]
                results = self._model.align(
                    encoded if len(groups) == 1 else _select(encoded, rows),
                    helper.sot_sequence, tokens, frames, median_filter_width=7,
                )  # fmt: skip
                for r, token_ids, result in zip(rows, tokens, results, strict=True):
                    words[idx[r]] = _words(helper, token_ids, result, merge_punctuations)
        return words

    def detect_language(self, audio: Sequence[npt.NDArray[np.float32]]) -> list[str | None]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.detect_language`.

        ``Whisper.detect_language`` on the encoder output (the language-token distribution after
        ``<|startoftranscript|>``, as openai/whisper ``detect_language``); ``None`` on ``.en`` models.
        """
        if not self.multilingual:
            return [None] * len(audio)
        out: list[str | None] = []
        batch = self._params.max_engine_batch
        for start in range(0, len(audio), batch):
            detected = self._model.detect_language(self._encoded(audio[start : start + batch]))
            out += [ranking[0][0].strip("<|>") for ranking in detected]  # best ("<|de|>", prob) → "de"
        return out

    def _languages(self, encoded: ctranslate2.StorageView, prompts: list[DecodePrompt]) -> list[str | None]:
        """Language per window: the prompt's, else detected (multilingual models only)."""
        if not self._model.is_multilingual:
            return [None] * len(prompts)
        missing = [i for i, p in enumerate(prompts) if p.language is None]
        if not missing:
            return [p.language for p in prompts]
        subset = encoded if len(missing) == len(prompts) else _select(encoded, missing)
        detected = self._model.detect_language(subset)
        languages: list[str | None] = [p.language for p in prompts]
        for i, ranking in zip(missing, detected, strict=True):
            languages[i] = ranking[0][0].strip("<|>")  # best ("<|de|>", prob) → "de"
        return languages


def _select(encoded: ctranslate2.StorageView, indices: list[int]) -> ctranslate2.StorageView:
    """Rows ``indices`` of a CPU encoder output ``[B, 1500, d_model]`` (copied)."""
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.asarray(encoded)[indices]))


def _words(helper: object, text_tokens: list[int], result: object, merge: object) -> list[WordTiming]:
    """Word timings of one window from a ``WhisperAlignmentResult`` (faster-whisper ``find_alignment``)."""
    alignments = list(result.alignments)  # type: ignore[attr-defined]
    if not alignments:
        return []
    probs = np.asarray(result.text_token_probs, dtype=np.float64)  # type: ignore[attr-defined]
    text_idx = np.array([a[0] for a in alignments])
    time_idx = np.array([a[1] for a in alignments])
    split, word_tokens = helper.split_to_word_tokens(text_tokens + [helper.eot])  # type: ignore[attr-defined]
    if len(word_tokens) <= 1:
        return []
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts, ends = jump_times[bounds[:-1]], jump_times[bounds[1:]]
    entries = [
        {"word": w, "tokens": list(t), "start": float(s), "end": float(e),
         "probability": float(np.mean(probs[i:j])) if j > i else 0.0}
        for w, t, s, e, i, j in zip(split[:-1], word_tokens[:-1], starts, ends, bounds[:-1], bounds[1:], strict=False)
    ]  # fmt: skip
    merge(entries, _PREPEND_PUNCTUATIONS, _APPEND_PUNCTUATIONS)  # type: ignore[operator]
    return [
        WordTiming(e["word"], e["start"], max(e["start"], e["end"]), e["probability"], len(e["tokens"]))
        for e in entries
        if e["word"]
    ]
