"""What one engine build is: the model source and the TensorRT-LLM limits derived from the model.

Whisper facts used here (openai/whisper ``whisper/audio.py`` and ``whisper/model.py``,
https://github.com/openai/whisper; the TensorRT-LLM Whisper example's build commands,
https://github.com/NVIDIA/TensorRT-LLM/tree/main/examples/models/core/whisper):

* the encoder takes at most 3000 mel frames (30 s at hop 160, 16 kHz), so the encoder is built
  with ``--max_input_len 3000`` and the decoder with ``--max_encoder_input_len 3000``;
* the decoder context is ``n_text_ctx = 448`` tokens, shared by the prompt (decoder
  ``--max_input_len``) and the generated tokens; ``--max_seq_len`` = prompt + output;
* mel bins are 128 for large-v3 / large-v3-turbo / distil-large-v3 and 80 for the others
  (``settings.schema.WHISPER_MODELS``, from the model cards).
Docs: docs/engines.md, "The pieces".
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from settings.schema import WHISPER_MAX_NEW_TOKENS, WHISPER_MODELS
from whisper_build.serving.prompt import MAX_PROMPT_TOKENS

ENCODER_MAX_INPUT_LEN = 3000
"""Mel frames per 30 s window (openai/whisper ``audio.py`` ``N_FRAMES``)."""

N_TEXT_CTX = 448
"""Decoder context of every Whisper model (openai/whisper ``model.py`` ``n_text_ctx``)."""

SOT_SEQUENCE_TOKENS = 5
"""``<|startofprev|>`` + ``<|startoftranscript|><|LANG|><|TASK|><|notimestamps|>`` (openai/whisper
``tokenizer.py`` ``sot_sequence``)."""

MIN_PROMPT_TOKENS = SOT_SEQUENCE_TOKENS - 1
"""A decoder prompt without previous text: the four start-of-transcript tokens."""

WeightOnly = Literal["none", "int8", "int4"]
Dtype = Literal["float16", "bfloat16"]


class BuildSpecError(ValueError):
    """The requested build is impossible for the model; the message names the option to change."""


class BuildSpec(BaseModel):
    """The engine limits of one build (all lengths in tokens, except encoder frames).

    Attributes:
        model_name: ``convert_checkpoint.py --model_name`` value, e.g. ``large-v3-turbo``.
        n_mels: mel bins of the encoder input (80 or 128).
        multilingual: False for ``.en`` checkpoints.
        dtype: inference precision (also the attention/GEMM plugin precision).
        weight_only: ``none``, or INT8/INT4 weight-only quantization of the GEMMs.
        max_batch_size: windows per engine call (``--max_batch_size`` of both engines).
        beam_width: decoder ``--max_beam_width`` (1 = greedy).
        max_output_len: generated tokens per window (≤ 224, Whisper's ``sample_len``).
        max_prompt_len: decoder ``--max_input_len`` (start-of-transcript tokens + previous text).
        gather_context_logits: decoder ``--gather_context_logits``: the runtime returns the prompt's
            logits, from which the serving engine reads the ``<|nospeech|>`` probability at the
            ``<|startoftranscript|>`` position (``tensorrt_llm_engine.read_generate_outputs``).
            Part of the build flags, so of the build key. Costs prompt length × vocabulary floats
            per window (≈ 0.8 MB for the 4-token prompt without previous text, fp32).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_name: str
    n_mels: Literal[80, 128]
    multilingual: bool
    dtype: Dtype = "float16"
    weight_only: WeightOnly = "none"
    max_batch_size: int = Field(16, ge=1, le=1024)
    beam_width: int = Field(1, ge=1, le=8)
    max_output_len: int = Field(WHISPER_MAX_NEW_TOKENS, ge=1, le=WHISPER_MAX_NEW_TOKENS)
    max_prompt_len: int = Field(ge=MIN_PROMPT_TOKENS)
    gather_context_logits: bool = True

    @model_validator(mode="after")
    def _fits_decoder_context(self) -> BuildSpec:
        if self.decoder_max_seq_len > N_TEXT_CTX:
            raise ValueError(
                f"max_prompt_len {self.max_prompt_len} + max_output_len {self.max_output_len} exceeds the "
                f"decoder context of {N_TEXT_CTX} tokens; lower one of them"
            )
        return self

    @property
    def decoder_max_seq_len(self) -> int:
        """Decoder ``--max_seq_len``: prompt plus generated tokens."""
        return self.max_prompt_len + self.max_output_len

    def build_flags(self, mig_profile: str | None = None) -> dict[str, Any]:
        """Everything that determines the engines, for ``manifest.json`` ``build_flags``.

        Args:
            mig_profile: The MIG profile the engine is built for (e.g. ``1g.10gb``), recorded as
                ``mig_profile`` so a slice's engine has a build key of its own; omitted for whole GPUs.
        """
        flags = self.model_dump()
        flags.update(
            encoder_max_input_len=ENCODER_MAX_INPUT_LEN,
            decoder_max_seq_len=self.decoder_max_seq_len,
            decoder_max_encoder_input_len=ENCODER_MAX_INPUT_LEN,
        )
        if mig_profile:
            flags["mig_profile"] = mig_profile
        return flags


def derive_spec(
    model_name: str,
    *,
    max_batch_size: int = 16,
    beam_width: int = 1,
    max_output_len: int = WHISPER_MAX_NEW_TOKENS,
    weight_only: WeightOnly = "none",
    dtype: Dtype = "float16",
    max_prompt_len: int | None = None,
) -> BuildSpec:
    """Derive the build limits for ``model_name``.

    ``max_prompt_len`` defaults to room for the start-of-transcript tokens plus Whisper's 223
    previous-text tokens, cut to what the 448-token decoder context leaves after
    ``max_output_len`` (224 for the default 224 output tokens).

    Raises:
        BuildSpecError: unknown model name, or limits outside Whisper's (message names the option).
    """
    if model_name not in WHISPER_MODELS:
        raise BuildSpecError(
            f"unknown Whisper model '{model_name}' (--model-name); accepted: {', '.join(WHISPER_MODELS)}"
        )
    if not 1 <= max_output_len <= WHISPER_MAX_NEW_TOKENS:
        raise BuildSpecError(
            f"--max-output-len {max_output_len} must be within 1..{WHISPER_MAX_NEW_TOKENS} (Whisper's sample_len)"
        )
    room = N_TEXT_CTX - max_output_len
    if max_prompt_len is None:
        max_prompt_len = min(SOT_SEQUENCE_TOKENS + MAX_PROMPT_TOKENS, room)
    elif not MIN_PROMPT_TOKENS <= max_prompt_len <= room:
        raise BuildSpecError(
            f"--max-prompt-len {max_prompt_len} must be within {MIN_PROMPT_TOKENS}..{room} "
            f"({N_TEXT_CTX} decoder tokens minus --max-output-len {max_output_len})"
        )
    _, n_mels, multilingual = WHISPER_MODELS[model_name]
    try:
        return BuildSpec(
            model_name=model_name,
            n_mels=n_mels,
            multilingual=multilingual,
            dtype=dtype,
            weight_only=weight_only,
            max_batch_size=max_batch_size,
            beam_width=beam_width,
            max_output_len=max_output_len,
            max_prompt_len=max_prompt_len,
        )
    except ValueError as exc:  # pydantic ValidationError is a ValueError
        raise BuildSpecError(str(exc)) from exc


def build_key(model: str, serving_image: str, build_flags: Mapping[str, Any]) -> str:
    """Deterministic identity of an engine build: ``sha256:`` + 64 lowercase hex digits.

    Two builds with equal keys produce interchangeable engines, so a published engine whose
    manifest carries the key of the build about to run makes that build unnecessary.

    Args:
        model: the ``--model`` source as given (Hugging Face id, folder or ``s3://`` URI).
        serving_image: what fixes the TensorRT-LLM version the engine is tied to: the serving
            image tag (``serving.image_tag``; ECR tags are immutable), or ``tensorrt_llm==<version>``
            when no tag is known.
        build_flags: :meth:`BuildSpec.build_flags` (JSON-serializable; key order does not matter).

    Raises:
        TypeError: a flag value is not JSON-serializable.
    """
    canonical = json.dumps(
        {"model": model, "serving_image": serving_image, "build_flags": dict(build_flags)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def model_name_for(hf_id: str) -> str | None:
    """The model name whose Hugging Face id is ``hf_id`` (case-insensitive), or None."""
    for name, (known_id, _, _) in WHISPER_MODELS.items():
        if known_id.lower() == hf_id.lower():
            return name
    return None


# ------------------------------------------------------------------------------------------ sources

_S3_URI = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>.*))?$")
_HF_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclass(frozen=True)
class ModelSource:
    """Where the Whisper weights come from.

    Attributes:
        kind: ``hf`` (Hugging Face id), ``local`` (folder with an OpenAI ``<name>.pt`` or a
            Hugging Face checkpoint) or ``s3`` (prefix holding such a folder).
        location: the id, the folder path, or the ``s3://`` URI as given.
    """

    kind: Literal["hf", "local", "s3"]
    location: str

    @property
    def s3_bucket_and_prefix(self) -> tuple[str, str]:
        """``("bucket", "prefix/")`` of an ``s3`` source (prefix ends with ``/`` or is empty)."""
        match = _S3_URI.match(self.location)
        assert self.kind == "s3" and match is not None
        prefix = (match.group("prefix") or "").strip("/")
        return match.group("bucket"), f"{prefix}/" if prefix else ""


def parse_model_source(text: str) -> ModelSource:
    """Classify ``--model``: ``s3://bucket/prefix``, an existing folder, or ``owner/name`` on the Hub.

    An existing folder wins over a Hub id of the same spelling.

    Raises:
        BuildSpecError: none of the three forms (message shows each form).
    """
    text = text.strip()
    if text.startswith("s3://"):
        if not _S3_URI.match(text):
            raise BuildSpecError(f"--model '{text}' is not a valid S3 URI like s3://bucket/path/to/model/")
        return ModelSource("s3", text)
    if Path(text).is_dir():
        return ModelSource("local", text)
    if _HF_ID.match(text):
        return ModelSource("hf", text)
    raise BuildSpecError(
        f"--model '{text}' is neither an existing folder, an s3://bucket/prefix URI, nor a Hugging Face id "
        "like openai/whisper-large-v3-turbo"
    )
