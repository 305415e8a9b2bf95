"""Lay out the Triton model repository of one built version.

Result (``docs/contracts.md`` §3, §5)::

    <version_dir>/
      manifest.json                       (written last, by the CLI)
      model_repository/
        whisper/                          (copied from the project's template model)
          config.pbtxt                    (parameters engine=tensorrt_llm, model_path=engine, ...)
          1/model.py ...
          engine/                         (ENGINE_DIR_NAME)
            encoder/  decoder/            (trtllm-build output: rank0.engine, config.json)
            tokenizer.json

``model_path`` is written relative to the model folder so that the repository can be mounted
anywhere (Mountpoint for S3 in the pods); the Triton model resolves it against the model
directory Triton passes in ``args["model_repository"]``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from settings.storage import MODEL_REPOSITORY_DIR

TRITON_MODEL_NAME = "whisper"
ENGINE_DIR_NAME = "engine"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "model_repository"
"""The project's Triton model repository (``whisper_build/model_repository/``)."""

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", ENGINE_DIR_NAME)


class LayoutError(ValueError):
    """Template or engine folders are missing or malformed; the message names the path."""


def set_model_parameters(config_text: str, values: Mapping[str, str]) -> str:
    """Set string ``parameters`` of a Triton ``config.pbtxt`` (protobuf text format).

    Existing ``key: "<k>" value: { string_value: "..." }`` entries are rewritten in place; missing
    keys are appended as ``parameters { ... }`` blocks (a repeated field may be repeated).

    Raises:
        LayoutError: a value contains a double quote or backslash (not escaped here).
    """
    text = config_text
    for key, value in values.items():
        if '"' in value or "\\" in value:
            raise LayoutError(f"parameter {key}: value {value!r} must not contain quotes or backslashes")
        pattern = re.compile(
            r'(key\s*:\s*"' + re.escape(key) + r'"\s*,?\s*value\s*:?\s*\{\s*string_value\s*:\s*")[^"]*(")'
        )
        text, count = pattern.subn(lambda m: m.group(1) + value + m.group(2), text)
        if count == 0:
            text = text.rstrip("\n") + f'\nparameters {{\n  key: "{key}"\n  value: {{ string_value: "{value}" }}\n}}\n'
    return text


def model_parameters(max_batch_size: int, beam_width: int, max_output_len: int) -> dict[str, str]:
    """``config.pbtxt`` parameters for a TensorRT-LLM build (names of ``EngineParams``)."""
    return {
        "engine": "tensorrt_llm",
        "model_path": ENGINE_DIR_NAME,
        "device": "cuda",
        "max_engine_batch": str(max_batch_size),
        "beam_size": str(beam_width),
        "max_new_tokens": str(max_output_len),
    }


def layout_repository(
    version_dir: Path,
    *,
    engine_dir: Path,
    tokenizer_json: Path,
    parameters: Mapping[str, str],
    template_dir: Path = DEFAULT_TEMPLATE_DIR,
) -> Path:
    """Create ``version_dir/model_repository`` from the template and move the engines into it.

    Args:
        version_dir: new, empty (or absent) folder of this version.
        engine_dir: ``trtllm-build`` output with ``encoder/`` and ``decoder/``; moved, not copied
            (engines are GBs).
        tokenizer_json: the model's Hugging Face ``tokenizer.json``.
        parameters: ``config.pbtxt`` string parameters to set (see :func:`model_parameters`).
        template_dir: a Triton model repository holding ``whisper/config.pbtxt``.

    Returns:
        The engine folder inside the repository (what the smoke test loads).

    Raises:
        LayoutError: template without ``whisper/config.pbtxt``, engines without ``encoder/`` or
            ``decoder/``, missing tokenizer, or a non-empty ``version_dir``.
    """
    template_model = template_dir / TRITON_MODEL_NAME
    if not (template_model / "config.pbtxt").is_file():
        raise LayoutError(f"{template_model}/config.pbtxt not found: pass the Triton model repository (--template)")
    for part in ("encoder", "decoder"):
        if not (engine_dir / part).is_dir():
            raise LayoutError(f"{engine_dir / part} not found: trtllm-build did not produce the {part} engine")
    if not tokenizer_json.is_file():
        raise LayoutError(f"{tokenizer_json} not found: the engine needs the model's tokenizer.json")
    if version_dir.exists() and any(version_dir.iterdir()):
        raise LayoutError(f"{version_dir} is not empty: every build gets a fresh version folder")

    model_dir = version_dir / MODEL_REPOSITORY_DIR / TRITON_MODEL_NAME
    shutil.copytree(template_model, model_dir, ignore=_IGNORED)
    config = model_dir / "config.pbtxt"
    config.write_text(set_model_parameters(config.read_text(encoding="utf-8"), parameters), encoding="utf-8")

    target = model_dir / ENGINE_DIR_NAME
    target.mkdir()
    for part in ("encoder", "decoder"):
        shutil.move(str(engine_dir / part), str(target / part))
    shutil.copy2(tokenizer_json, target / TOKENIZER_FILE)
    return target
