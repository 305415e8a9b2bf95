"""CTranslate2 Whisper engine: CPU (development, tests) or GPU (fallback where no TensorRT-LLM
engine exists yet).

One :meth:`CTranslate2Engine.transcribe_batch` call computes features for the whole batch, runs
the encoder once over all non-silent windows (``Whisper.encode``), and then decodes with
``Whisper.generate``. ``generate`` needs every item of a call to share the repetition penalty and
the position of ``<|startoftranscript|>`` ("The generate method currently requires the
<|startoftranscript|> token to be at the same position in all batches", CTranslate2 4.x), so the
decode runs once per distinct (penalty, prompt length) pair — one call in the usual case where
requests carry no previous text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import ctranslate2
import numpy as np
import tokenizers

from whisper_build.serving.engines.base import EngineParams
from whisper_build.serving.engines.features import is_silent, log_mel_batch
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    build_prompt_ids,
    clean_output_ids,
    ctranslate2_max_length,
    group_indices,
)
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["CTranslate2Engine"]

log = logging.getLogger(__name__)


class CTranslate2Engine:
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
        self._model = ctranslate2.models.Whisper(
            str(path), device=params.device, compute_type=params.compute_type,
            intra_threads=params.cpu_threads,
        )  # fmt: skip
        self._tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        self._specials = SpecialTokens.from_lookup(self._tokenizer.token_to_id, self._model.is_multilingual)
        log.info(
            "ctranslate2 whisper loaded: %s device=%s compute_type=%s multilingual=%s n_mels=%d",
            path, params.device, params.compute_type, self._model.is_multilingual, self._model.n_mels,
        )  # fmt: skip

    def transcribe_batch(
        self,
        audio: Sequence[np.ndarray],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
    ) -> list[str]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.transcribe_batch`."""
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        texts = [""] * len(audio)
        voiced = [i for i, window in enumerate(audio) if not is_silent(window, self._params.silence_dbfs)]
        for start in range(0, len(voiced), self._params.max_engine_batch):
            chunk = voiced[start : start + self._params.max_engine_batch]
            decoded = self._decode(
                [audio[i] for i in chunk],
                [prompts[i] for i in chunk],
                [repetition_penalty[i] for i in chunk],
            )
            for i, text in zip(chunk, decoded, strict=True):
                texts[i] = text
        return texts

    def _decode(self, audio: list[np.ndarray], prompts: list[DecodePrompt], penalties: list[float]) -> list[str]:
        features = ctranslate2.StorageView.from_array(log_mel_batch(audio, self._model.n_mels))
        # Kept on the CPU so that rows can be selected per decode group (a no-op for device="cpu";
        # on a GPU a copy of ~60 MB for 16 large-v3 windows; generate() moves it back, as
        # faster-whisper's multi-GPU path relies on).
        encoded = self._model.encode(features, to_cpu=True)
        languages = self._languages(encoded, prompts)
        prompt_ids = [
            build_prompt_ids(p, self._specials, self._encode, self._tokenizer.token_to_id, lang)
            for p, lang in zip(prompts, languages, strict=True)
        ]
        texts = [""] * len(audio)
        keys = [(penalty, len(ids)) for penalty, ids in zip(penalties, prompt_ids, strict=True)]
        groups = group_indices(keys)
        for (penalty, prompt_len), indices in groups.items():
            group_encoded = encoded if len(groups) == 1 else _select(encoded, indices)
            results = self._model.generate(
                group_encoded,
                [prompt_ids[i] for i in indices],
                beam_size=self._params.beam_size,
                max_length=ctranslate2_max_length(self._params.max_new_tokens),
                repetition_penalty=penalty,
                return_no_speech_prob=True,
            )
            for i, result in zip(indices, results, strict=True):
                if result.no_speech_prob > self._params.no_speech_threshold:
                    # Silence or noise. Stricter than openai/whisper, which also requires
                    # avg_logprob < -1: tiny models are often confident in text invented on silence.
                    continue
                ids = clean_output_ids(result.sequences_ids[0], prompt_ids[i], self._specials.eot)
                texts[i] = self._tokenizer.decode(ids).strip()
        return texts

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids

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
