"""Pure construction of the TensorRT-LLM command lines of one build (argv lists, nothing runs here).

Written from NVIDIA/TensorRT-LLM ``examples/models/core/whisper`` (README build commands,
``convert_checkpoint.py`` arguments, ``distil_whisper/convert_from_distil_whisper.py``;
https://github.com/NVIDIA/TensorRT-LLM/tree/main/examples/models/core/whisper):

1. a Hugging Face checkpoint (``openai/whisper-*``, ``distil-whisper/*`` or a folder in that format)
   is first rewritten to OpenAI's ``<name>.pt`` layout by ``convert_from_distil_whisper.py``
   (it loads any Whisper model with ``transformers.AutoModel``);
2. ``convert_checkpoint.py --model_dir <dir with <name>.pt> --model_name <name>`` writes the
   ``encoder/`` and ``decoder/`` TensorRT-LLM checkpoints (optional ``--use_weight_only``);
3. ``trtllm-build`` compiles each, with the encoder/decoder limits of :class:`BuildSpec`.
Docs: docs/engines.md, "TensorRT-LLM without its TensorRT backend".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from whisper_build.release.engine_build.spec import ENCODER_MAX_INPUT_LEN, BuildSpec

DEFAULT_EXAMPLE_DIR = Path("/app/tensorrt_llm/examples/models/core/whisper")
"""Where the serving image keeps TensorRT-LLM's Whisper example (``--trtllm-example-dir``)."""


@dataclass(frozen=True)
class BuildPaths:
    """Working folders of one build, all under ``work_dir``.

    Attributes:
        work_dir: scratch space (several GB for large models).
    """

    work_dir: Path

    @property
    def assets_dir(self) -> Path:
        """Holds the OpenAI-format ``<name>.pt`` that ``convert_checkpoint.py`` reads."""
        return self.work_dir / "assets"

    @property
    def checkpoint_dir(self) -> Path:
        """TensorRT-LLM checkpoint (``encoder/``, ``decoder/``)."""
        return self.work_dir / "checkpoint"

    @property
    def engine_dir(self) -> Path:
        """Built engines (``encoder/``, ``decoder/``), later moved into the model repository."""
        return self.work_dir / "engines"


@dataclass(frozen=True)
class Step:
    """One subprocess of the build: a short name for logs and its argv."""

    name: str
    argv: list[str]


def hf_to_openai_step(python: str, example_dir: Path, checkpoint: str, spec: BuildSpec, paths: BuildPaths) -> Step:
    """Rewrite a Hugging Face Whisper checkpoint (id or folder) to ``assets/<model_name>.pt``."""
    return Step(
        "hf-to-openai",
        [
            python,
            str(example_dir / "distil_whisper" / "convert_from_distil_whisper.py"),
            "--model_name", checkpoint,
            "--output_dir", str(paths.assets_dir),
            "--output_name", spec.model_name,
        ],
    )  # fmt: skip


def convert_step(python: str, example_dir: Path, model_dir: Path, spec: BuildSpec, paths: BuildPaths) -> Step:
    """``convert_checkpoint.py`` reading ``model_dir/<model_name>.pt``; weight-only flags when asked."""
    argv = [
        python,
        str(example_dir / "convert_checkpoint.py"),
        "--model_dir", str(model_dir),
        "--model_name", spec.model_name,
        "--dtype", spec.dtype,
        "--output_dir", str(paths.checkpoint_dir),
    ]  # fmt: skip
    if spec.weight_only != "none":
        argv += ["--use_weight_only", "--weight_only_precision", spec.weight_only]
    return Step("convert-checkpoint", argv)


def encoder_build_step(spec: BuildSpec, paths: BuildPaths, trtllm_build: str = "trtllm-build") -> Step:
    """``trtllm-build`` of the encoder: 3000 mel frames in, no GEMM plugin (upstream README)."""
    return Step(
        "build-encoder",
        [
            trtllm_build,
            "--checkpoint_dir", str(paths.checkpoint_dir / "encoder"),
            "--output_dir", str(paths.engine_dir / "encoder"),
            "--moe_plugin", "disable",
            "--max_batch_size", str(spec.max_batch_size),
            "--gemm_plugin", "disable",
            "--bert_attention_plugin", spec.dtype,
            "--max_input_len", str(ENCODER_MAX_INPUT_LEN),
            "--max_seq_len", str(ENCODER_MAX_INPUT_LEN),
        ],
    )  # fmt: skip


def decoder_build_step(spec: BuildSpec, paths: BuildPaths, trtllm_build: str = "trtllm-build") -> Step:
    """``trtllm-build`` of the decoder: prompt + output tokens, cross-attention over 3000 frames."""
    return Step(
        "build-decoder",
        [
            trtllm_build,
            "--checkpoint_dir", str(paths.checkpoint_dir / "decoder"),
            "--output_dir", str(paths.engine_dir / "decoder"),
            "--moe_plugin", "disable",
            "--max_beam_width", str(spec.beam_width),
            "--max_batch_size", str(spec.max_batch_size),
            "--max_seq_len", str(spec.decoder_max_seq_len),
            "--max_input_len", str(spec.max_prompt_len),
            "--max_encoder_input_len", str(ENCODER_MAX_INPUT_LEN),
            "--gemm_plugin", spec.dtype,
            "--bert_attention_plugin", spec.dtype,
            "--gpt_attention_plugin", spec.dtype,
            *(["--gather_context_logits"] if spec.gather_context_logits else []),
        ],
    )  # fmt: skip


def build_plan(
    spec: BuildSpec,
    paths: BuildPaths,
    *,
    openai_checkpoint_dir: Path | None,
    hf_checkpoint: str | None,
    python: str = "python3",
    example_dir: Path = DEFAULT_EXAMPLE_DIR,
    trtllm_build: str = "trtllm-build",
) -> list[Step]:
    """All subprocesses of one build, in order.

    Args:
        spec: what to build (model, dtype, batch and length limits).
        paths: the build's working and output folders.
        openai_checkpoint_dir: folder that already holds ``<model_name>.pt``; skips the rewrite.
        hf_checkpoint: Hugging Face id or folder to rewrite first (when no ``.pt`` is at hand).
        python: interpreter that runs TensorRT-LLM's example scripts.
        example_dir: TensorRT-LLM's Whisper example folder (:data:`DEFAULT_EXAMPLE_DIR`).
        trtllm_build: the ``trtllm-build`` executable.

    Raises:
        ValueError: neither or both of ``openai_checkpoint_dir`` / ``hf_checkpoint`` given.
    """
    if (openai_checkpoint_dir is None) == (hf_checkpoint is None):
        raise ValueError("give exactly one of openai_checkpoint_dir or hf_checkpoint")
    steps: list[Step] = []
    if hf_checkpoint is not None:
        steps.append(hf_to_openai_step(python, example_dir, hf_checkpoint, spec, paths))
        openai_checkpoint_dir = paths.assets_dir
    assert openai_checkpoint_dir is not None
    steps.append(convert_step(python, example_dir, openai_checkpoint_dir, spec, paths))
    steps.append(encoder_build_step(spec, paths, trtllm_build))
    steps.append(decoder_build_step(spec, paths, trtllm_build))
    return steps
