"""TensorRT-LLM Whisper engine: the production GPU path (cannot run on this CPU-only machine).

Written from the TensorRT-LLM Whisper example (``examples/models/core/whisper/run.py``, C++
runtime branch): ``ModelRunnerCpp.from_dir(engine_dir, is_enc_dec=True, max_input_len=3000, ...)``
then ``generate(batch_input_ids=..., encoder_input_features=mel[B, 3000, n_mels] fp16,
encoder_output_lengths=frames // 2, max_new_tokens, end_id=eot, pad_id=eot, num_beams,
return_dict=True, output_sequence_lengths=True)``. Differences from the example, on purpose:

* decoder prompts are passed as a *list* of 1-D tensors, one per window, so windows with
  different previous text keep their own lengths (the C++ runtime enqueues one request per item;
  no padding token is ever fed to the decoder);
* ``max_new_tokens`` comes from the model config (default 224 = Whisper's ``n_text_ctx // 2``),
  not 96/50 as in the examples; the engine must be built with ``--max_seq_len`` ≥ prompt +
  ``max_new_tokens`` (e.g. 448) and ``--max_input_len`` ≥ the longest prompt (e.g. 230);
* output ids echo the prompt and are padded with ``end_id``: :func:`clean_output_ids` removes both.

:meth:`TensorRTLLMEngine.generate` (the decoding layer's entry) asks the runtime for
``output_cum_log_probs`` (summed log-prob per beam) and, at temperature > 0, samples with
``num_beams=1, top_k=0, top_p=1.0, temperature=t`` (full-distribution sampling; ``top_k=0`` with
``top_p=0`` would be greedy in TensorRT-LLM's sampling config). The ``<|nospeech|>`` probability
would need the decoder's context logits (an engine built with ``--gather_context_logits``), so it
is ``None`` here and the silence rule on this engine rests on the energy gate and the log-prob
thresholds. UNVERIFIED on a GPU (no GPU here): written from the TensorRT-LLM
``ModelRunnerCpp.generate`` signature; the decoding logic above it is unit-tested with a fake.
Word timings: not available (no cross-attention output), so the decoding layer answers 400.

Engine directory layout (made by ``whisper_build`` engine build): ``encoder/config.json`` +
``rank0.engine``, ``decoder/config.json`` + ``rank0.engine``, and the model's Hugging Face
``tokenizer.json`` (openai/whisper-* repository) at the top level.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import tokenizers

from whisper_build.serving.engines.base import (
    EngineCapabilities,
    EngineParams,
    EngineParamsError,
    Hypothesis,
    WordTiming,
)
from whisper_build.serving.engines.features import N_FRAMES, is_silent, log_mel_batch
from whisper_build.serving.engines.tokens import (
    MULTILINGUAL_VOCAB_SIZE,
    SpecialTokens,
    build_prompt_ids,
    clean_output_ids,
    generated_ids,
    group_indices,
    max_length_for,
)
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["EngineLayout", "TensorRTLLMEngine", "read_engine_layout"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineLayout:
    """What the engine directory says about the model.

    Attributes:
        n_mels: Mel bins the encoder expects (80, or 128 for large-v3/turbo).
        multilingual: decoder vocabulary is multilingual.
        max_batch_size: the decoder engine's ``--max_batch_size``.
        max_beam_width: the decoder engine's ``--max_beam_width``.
    """

    n_mels: int
    multilingual: bool
    max_batch_size: int
    max_beam_width: int


def read_engine_layout(engine_dir: Path) -> EngineLayout:
    """Read ``encoder/config.json`` and ``decoder/config.json`` written by ``trtllm-build``.

    Each file has ``pretrained_config`` (``n_mels``, ``vocab_size``) and ``build_config``
    (``max_batch_size``, ``max_beam_width``), as TensorRT-LLM ``run.py`` ``read_config`` reads them.

    Raises:
        EngineParamsError: a file or key is missing.
    """
    configs = {}
    for part in ("encoder", "decoder"):
        path = engine_dir / part / "config.json"
        try:
            raw = json.loads(path.read_text())
            configs[part] = {**raw["pretrained_config"], **raw["build_config"]}
        except (OSError, ValueError, KeyError) as error:
            raise EngineParamsError(
                f"model_path: cannot read {path} ({error!r}); is it a trtllm-build output?"
            ) from error
    try:
        return EngineLayout(
            n_mels=int(configs["encoder"]["n_mels"]),
            multilingual=int(configs["decoder"]["vocab_size"]) >= MULTILINGUAL_VOCAB_SIZE,
            max_batch_size=int(configs["decoder"]["max_batch_size"]),
            max_beam_width=int(configs["decoder"].get("max_beam_width", 1)),
        )
    except KeyError as error:
        raise EngineParamsError(f"model_path: engine config lacks {error}") from error


class TensorRTLLMEngine:
    """Whisper encoder/decoder TensorRT-LLM engines run with the C++ runtime (``ModelRunnerCpp``).

    Args:
        params: ``model_path`` is the engine directory; ``beam_size`` must not exceed the engine's
            ``--max_beam_width``; ``max_engine_batch`` is capped at the engine's ``--max_batch_size``.

    Raises:
        EngineParamsError: bad engine directory or beam size.
        ImportError: ``tensorrt_llm``/``torch`` not installed (only in the GPU image).
    """

    def __init__(self, params: EngineParams) -> None:
        import torch  # noqa: PLC0415 - GPU image only
        from tensorrt_llm.runtime import ModelRunnerCpp  # noqa: PLC0415

        engine_dir = params.resolved_model_path()
        self._layout = read_engine_layout(engine_dir)
        if params.beam_size > self._layout.max_beam_width:
            raise EngineParamsError(
                f"beam_size: {params.beam_size} exceeds the engine's max_beam_width "
                f"{self._layout.max_beam_width}; lower beam_size or rebuild the decoder engine"
            )
        self._params = params
        self._batch = min(params.max_engine_batch, self._layout.max_batch_size)
        self._torch = torch
        self._tokenizer = tokenizers.Tokenizer.from_file(str(engine_dir / "tokenizer.json"))
        self._specials = SpecialTokens.from_lookup(self._tokenizer.token_to_id, self._layout.multilingual)
        self.name = "tensorrt_llm"
        self.capabilities = EngineCapabilities(timestamps=True, word_timestamps=False, sampling=True)
        self.multilingual = self._layout.multilingual
        self.eot = self._specials.eot
        self.timestamp_begin = self._specials.timestamp_begin
        self._runner = ModelRunnerCpp.from_dir(
            engine_dir=str(engine_dir),
            is_enc_dec=True,
            max_batch_size=self._batch,
            max_input_len=N_FRAMES,
            max_output_len=params.max_new_tokens,
            max_beam_width=params.beam_size,
            kv_cache_free_gpu_memory_fraction=0.9,
            cross_kv_cache_fraction=0.5,
        )
        log.info("tensorrt_llm whisper loaded: %s batch=%d n_mels=%d", engine_dir, self._batch, self._layout.n_mels)

    def transcribe_batch(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        repetition_penalty: Sequence[float],
    ) -> list[str]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.transcribe_batch`.

        Multilingual models without a requested language use ``default_language`` (no detection
        step on this path).
        """
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        texts = [""] * len(audio)
        voiced = [i for i, window in enumerate(audio) if not is_silent(window, self._params.silence_dbfs)]
        prompt_ids = {
            i: build_prompt_ids(
                prompts[i], self._specials, self._encode, self._tokenizer.token_to_id,
                prompts[i].language or self._params.default_language,
            )
            for i in voiced
        }  # fmt: skip
        for penalty, indices in group_indices([repetition_penalty[i] for i in voiced]).items():
            group = [voiced[j] for j in indices]
            for start in range(0, len(group), self._batch):
                chunk = group[start : start + self._batch]
                outputs, _ = self._generate([audio[i] for i in chunk], [prompt_ids[i] for i in chunk], penalty)
                for i, ids in zip(chunk, outputs, strict=True):
                    texts[i] = self._tokenizer.decode(clean_output_ids(ids, prompt_ids[i], self._specials.eot)).strip()
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
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.generate` (module docstring: UNVERIFIED)."""
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        languages = [p.language or (self._params.default_language if self.multilingual else None) for p in prompts]
        prompt_ids = [
            build_prompt_ids(p, self._specials, self._encode, self._tokenizer.token_to_id, lang, timestamps)
            for p, lang in zip(prompts, languages, strict=True)
        ]
        out: list[Hypothesis | None] = [None] * len(audio)
        for penalty, group in group_indices(list(repetition_penalty)).items():
            for start in range(0, len(group), self._batch):
                chunk = group[start : start + self._batch]
                ids, logprobs = self._generate(
                    [audio[i] for i in chunk], [prompt_ids[i] for i in chunk], penalty, temperature, scores=True
                )
                for i, row, logprob in zip(chunk, ids, logprobs, strict=True):
                    tokens = generated_ids(row, prompt_ids[i], self.eot)
                    out[i] = Hypothesis(tokens, logprob, None, languages[i])
        return [h for h in out if h is not None]

    def decode_text(self, tokens: Sequence[int]) -> str:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.decode_text`."""
        return str(self._tokenizer.decode([t for t in tokens if t < self.eot]))

    def align(
        self,
        audio: Sequence[npt.NDArray[np.float32]],
        prompts: Sequence[DecodePrompt],
        text_tokens: Sequence[Sequence[int]],
    ) -> list[list[WordTiming]]:
        """Not available on this engine (``capabilities.word_timestamps`` is false)."""
        raise NotImplementedError("tensorrt_llm engines expose no cross-attention alignment")

    def _generate(
        self,
        audio: list[npt.NDArray[np.float32]],
        prompt_ids: list[list[int]],
        penalty: float,
        temperature: float = 0.0,
        scores: bool = False,
    ) -> tuple[list[list[int]], list[float]]:
        torch = self._torch
        mel = torch.from_numpy(log_mel_batch(audio, self._layout.n_mels))
        # [B, n_mels, 3000] → [B, 3000, n_mels] fp16 on the GPU, as run.py passes encoder_input_features.
        features = mel.transpose(1, 2).contiguous().to(device="cuda", dtype=torch.float16)
        frames = torch.full((len(audio),), N_FRAMES, dtype=torch.int32, device="cuda")
        longest = max(len(ids) for ids in prompt_ids)  # prompt + new tokens must fit n_text_ctx = 448
        sampling = (
            {"num_beams": 1, "temperature": temperature, "top_k": 0, "top_p": 1.0}
            if temperature > 0
            else {"num_beams": self._params.beam_size}
        )
        with torch.no_grad():
            outputs = self._runner.generate(
                batch_input_ids=[torch.tensor(ids, dtype=torch.int32) for ids in prompt_ids],
                encoder_input_features=features,
                encoder_output_lengths=frames // 2,  # the encoder's conv stride 2: 3000 frames → 1500
                max_new_tokens=max_length_for(longest, self._params.max_new_tokens) - longest,
                end_id=self._specials.eot,
                pad_id=self._specials.eot,
                repetition_penalty=penalty,
                output_sequence_lengths=True,
                output_cum_log_probs=scores,
                return_dict=True,
                **sampling,
            )
            torch.cuda.synchronize()
        output_ids = outputs["output_ids"].cpu().numpy()  # [B, beams, max_len]
        lengths = outputs["sequence_lengths"].cpu().numpy()  # [B, beams]
        ids = [output_ids[b, 0, : lengths[b, 0]].tolist() for b in range(len(audio))]
        if not scores:
            return ids, []
        cum = outputs["cum_log_probs"].cpu().numpy()  # [B, beams]
        return ids, [float(cum[b, 0]) for b in range(len(audio))]

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids
