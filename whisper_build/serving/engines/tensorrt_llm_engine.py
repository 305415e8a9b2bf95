"""TensorRT-LLM Whisper engine: the production GPU path (cannot run on this CPU-only machine).

Written from the TensorRT-LLM Whisper example (``examples/models/core/whisper/run.py``, C++ runtime
branch: ``ModelRunnerCpp.from_dir(..., is_enc_dec=True)`` then ``generate(...)``). Entry points:
:class:`TensorRTLLMEngine`, :func:`read_generate_outputs` (the runtime's return dict → hypotheses;
unit-tested against a fake runner), :func:`generated_ids`. The call itself is UNVERIFIED on a GPU.
Engine directory (made by the engine build): ``encoder/`` and ``decoder/`` (``config.json`` +
``rank0.engine``) and the model's Hugging Face ``tokenizer.json`` at the top level.
Docs: docs/engines.md, "TensorRT-LLM runtime outputs the decoding layer reads".
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tokenizers

from whisper_build.serving.engines.base import EngineCapabilities, Hypothesis, NoWordAlignment, TokenizerText
from whisper_build.serving.engines.features import N_FRAMES, log_mel_batch
from whisper_build.serving.engines.params import EngineParams, EngineParamsError
from whisper_build.serving.engines.tokens import (
    SpecialTokens,
    best_language,
    build_prompt_ids,
    generated_ids,
    group_indices,
    is_multilingual,
    language_token_ids,
    max_length_for,
)
from whisper_build.serving.prompt import DecodePrompt

__all__ = ["EngineLayout", "TensorRTLLMEngine", "read_engine_layout", "read_generate_outputs", "read_language_outputs"]

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
            multilingual=is_multilingual(int(configs["decoder"]["vocab_size"])),
            max_batch_size=int(configs["decoder"]["max_batch_size"]),
            max_beam_width=int(configs["decoder"].get("max_beam_width", 1)),
        )
    except KeyError as error:
        raise EngineParamsError(f"model_path: engine config lacks {error}") from error


def _numpy(value: Any) -> npt.NDArray[Any]:
    """A runtime tensor (``torch.Tensor`` on any device) or array as a NumPy array."""
    return np.asarray(value.cpu().numpy() if hasattr(value, "cpu") else value)


def read_generate_outputs(
    outputs: Mapping[str, Any],
    prompt_ids: Sequence[Sequence[int]],
    specials: SpecialTokens,
    no_speech_id: int | None,
) -> list[tuple[list[int], float | None, float | None]]:
    """Per window: generated tokens, summed log-prob and ``<|nospeech|>`` probability.

    Reads the dict ``ModelRunnerCpp.generate(..., return_dict=True)`` returns (TensorRT-LLM
    ``model_runner_cpp.py`` ``_fill_output``); the first sequence (best beam / the sample) counts:

    * ``output_ids`` ``[B, beams, max_seq_len]``, padded with ``end_id`` (the prompt may be echoed
      in front; :func:`generated_ids` removes it and cuts at ``<|endoftext|>``);
    * ``sequence_lengths`` ``[B, beams]`` (``output_sequence_lengths=True``);
    * ``cum_log_probs`` ``[B, beams]`` (``output_cum_log_probs=True``), else the log-prob is ``None``;
    * ``context_logits`` ``[B, max_prompt_len, vocab]`` (decoder built with
      ``--gather_context_logits``): softmax at the prompt's ``<|startoftranscript|>`` position,
      probability of ``no_speech_id`` (openai/whisper ``decoding.py``); else ``None``.

    Args:
        outputs: the runtime's return dict (tensors with ``.cpu().numpy()``, or arrays).
        prompt_ids: each window's decoder prompt.
        specials: the tokenizer's special ids (``eot``, ``sot``).
        no_speech_id: id of ``<|nospeech|>`` (``<|nocaptions|>`` in older vocabularies), if any.

    Raises:
        KeyError: ``output_ids`` or ``sequence_lengths`` missing (the runner was not asked for them).
    """
    output_ids = _numpy(outputs["output_ids"])
    lengths = _numpy(outputs["sequence_lengths"])
    cum = _numpy(outputs["cum_log_probs"]) if outputs.get("cum_log_probs") is not None else None
    context = _numpy(outputs["context_logits"]) if outputs.get("context_logits") is not None else None
    rows: list[tuple[list[int], float | None, float | None]] = []
    for b, prompt in enumerate(prompt_ids):
        tokens = generated_ids(output_ids[b, 0, : int(lengths[b, 0])].tolist(), prompt, specials.eot)
        logprob = None if cum is None else float(cum[b, 0])
        no_speech = None
        if context is not None and no_speech_id is not None and specials.sot in prompt:
            logits = context[b, list(prompt).index(specials.sot)].astype(np.float64)
            probs = np.exp(logits - logits.max())
            no_speech = float(probs[no_speech_id] / probs.sum())
        rows.append((tokens, logprob, no_speech))
    return rows


def read_language_outputs(outputs: Mapping[str, Any], language_ids: dict[int, str]) -> list[str | None]:
    """Per window: the language of a one-token decode from ``<|startoftranscript|>`` (:meth:`TensorRTLLMEngine.detect_language`).

    With ``context_logits`` ``[B, 1, vocab]`` (decoder built with ``--gather_context_logits``): the
    logits at ``<|startoftranscript|>`` restricted to language tokens, argmax
    (:func:`whisper_build.serving.engines.tokens.best_language`, openai/whisper ``detect_language``).
    Without them: the generated token (``output_ids[b, 0, sequence_lengths[b, 0] - 1]``) when it is a
    language token, else ``None`` (the decoding layer then uses ``default_language``).

    Args:
        outputs: the runtime's return dict, as for :func:`read_generate_outputs`.
        language_ids: language token id → code (:func:`whisper_build.serving.engines.tokens.language_token_ids`).

    Raises:
        KeyError: ``output_ids`` or ``sequence_lengths`` missing.
    """
    output_ids = _numpy(outputs["output_ids"])
    lengths = _numpy(outputs["sequence_lengths"])
    if outputs.get("context_logits") is not None:
        context = _numpy(outputs["context_logits"])
        return [best_language(context[b, 0], language_ids) for b in range(output_ids.shape[0])]
    return [language_ids.get(int(output_ids[b, 0, int(lengths[b, 0]) - 1])) for b in range(output_ids.shape[0])]


class TensorRTLLMEngine(TokenizerText, NoWordAlignment):
    """Whisper encoder/decoder TensorRT-LLM engines run with the C++ runtime (``ModelRunnerCpp``).

    Args:
        params: ``model_path`` is the engine directory; ``beam_size`` must not exceed the engine's
            ``--max_beam_width``; ``max_engine_batch`` is capped at the engine's ``--max_batch_size``.

    Raises:
        EngineParamsError: bad engine directory or beam size.
        ImportError: ``tensorrt_llm``/``torch`` not installed (only in the GPU image).

    Differences from the example, on purpose: decoder prompts are passed as a *list* of 1-D
    tensors, one per window, so windows with different previous text keep their own lengths (the C++
    runtime enqueues one request per item; no padding token is fed to the decoder);
    ``max_new_tokens`` comes from the model config (default 224 = Whisper's ``n_text_ctx // 2``), so
    the engine must be built with ``--max_seq_len`` ≥ prompt + ``max_new_tokens`` (e.g. 448) and
    ``--max_input_len`` ≥ the longest prompt (e.g. 230); output ids echo the prompt and are padded
    with ``end_id`` (:func:`generated_ids` removes both). :meth:`generate` asks for
    ``output_cum_log_probs`` and, at temperature > 0, samples with ``num_beams=1, top_k=0, top_p=1.0,
    temperature=t`` (full-distribution sampling; ``top_k=0`` with ``top_p=0`` would be greedy) and
    ``random_seed=sampling_seed`` (the requests' ``SamplingConfig.seed``). The ``<|nospeech|>``
    probability is read as openai/whisper does (softmax at the ``<|startoftranscript|>`` position)
    from ``context_logits``, returned only for a decoder built with ``--gather_context_logits``
    (``BuildSpec.gather_context_logits``); without them it is ``None``. Word timings: not available
    (no cross-attention output), so the decoding layer answers 400.
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
        self._no_speech = self._tokenizer.token_to_id("<|nospeech|>") or self._tokenizer.token_to_id("<|nocaptions|>")
        self._language_ids = language_token_ids(self._tokenizer.token_to_id)
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
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.generate` (UNVERIFIED on a GPU).

        ``words`` is ignored: no word timings (``capabilities.word_timestamps`` is false).
        """
        if not len(audio) == len(prompts) == len(repetition_penalty):
            raise ValueError("audio, prompts and repetition_penalty must have the same length")
        languages = [p.language for p in prompts]  # set by the decoding layer (detected, else default_language)
        prompt_ids = [
            build_prompt_ids(p, self._specials, self._encode, self._tokenizer.token_to_id, lang, timestamps)
            for p, lang in zip(prompts, languages, strict=True)
        ]
        out: list[Hypothesis | None] = [None] * len(audio)
        for penalty, group in group_indices(list(repetition_penalty)).items():
            for start in range(0, len(group), self._batch):
                chunk = group[start : start + self._batch]
                outputs = self._run(
                    [audio[i] for i in chunk], [prompt_ids[i] for i in chunk], penalty, temperature, scores=True
                )
                rows = read_generate_outputs(outputs, [prompt_ids[i] for i in chunk], self._specials, self._no_speech)
                for i, (tokens, logprob, no_speech) in zip(chunk, rows, strict=True):
                    if logprob is None:
                        raise RuntimeError("the TensorRT-LLM runtime returned no cum_log_probs")
                    out[i] = Hypothesis(tokens, logprob, no_speech, languages[i])
        return [h for h in out if h is not None]

    def detect_language(self, audio: Sequence[npt.NDArray[np.float32]]) -> list[str | None]:
        """See :meth:`whisper_build.serving.engines.base.WhisperEngine.detect_language` (UNVERIFIED on a GPU).

        A one-token greedy decode from ``<|startoftranscript|>`` per window, read by
        :func:`read_language_outputs`.
        """
        if not self.multilingual:
            return [None] * len(audio)
        out: list[str | None] = []
        for start in range(0, len(audio), self._batch):
            chunk = list(audio[start : start + self._batch])
            outputs = self._run(chunk, [[self._specials.sot]] * len(chunk), 1.0, new_tokens=1)
            out += read_language_outputs(outputs, self._language_ids)
        return out

    def _run(
        self,
        audio: list[npt.NDArray[np.float32]],
        prompt_ids: list[list[int]],
        penalty: float,
        temperature: float = 0.0,
        scores: bool = False,
        new_tokens: int | None = None,
    ) -> Mapping[str, Any]:
        """One ``ModelRunnerCpp.generate`` call (``new_tokens``: default as many as fit); its return dict.

        See :func:`read_generate_outputs`.
        """
        torch = self._torch
        mel = torch.from_numpy(log_mel_batch(audio, self._layout.n_mels))
        # [B, n_mels, 3000] → [B, 3000, n_mels] fp16 on the GPU, as run.py passes encoder_input_features.
        features = mel.transpose(1, 2).contiguous().to(device="cuda", dtype=torch.float16)
        frames = torch.full((len(audio),), N_FRAMES, dtype=torch.int32, device="cuda")
        longest = max(len(ids) for ids in prompt_ids)  # prompt + new tokens must fit n_text_ctx = 448
        sampling = (
            {
                "num_beams": 1,
                "temperature": temperature,
                "top_k": 0,
                "top_p": 1.0,
                "random_seed": self._params.sampling_seed,
            }
            if temperature > 0
            else {"num_beams": self._params.beam_size}
        )
        with torch.no_grad():
            outputs: Mapping[str, Any] = self._runner.generate(
                batch_input_ids=[torch.tensor(ids, dtype=torch.int32) for ids in prompt_ids],
                encoder_input_features=features,
                encoder_output_lengths=frames // 2,  # the encoder's conv stride 2: 3000 frames → 1500
                max_new_tokens=new_tokens or max_length_for(longest, self._params.max_new_tokens) - longest,
                end_id=self._specials.eot,
                pad_id=self._specials.eot,
                repetition_penalty=penalty,
                output_sequence_lengths=True,
                output_cum_log_probs=scores,
                return_dict=True,
                **sampling,
            )
            torch.cuda.synchronize()
        return outputs

    def _encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False).ids
