"""Engine manifest (``manifest.json``): what was built, on which GPU, and the checksum of every file.

Contract: ``docs/contracts.md`` §4. The engine build writes one next to the Triton model repository
of every published version (``models/<model>/<gpu_arch>/<version>/manifest.json``); the publish step
verifies the uploaded objects against :attr:`EngineManifest.files`; the serving pods' preflight
container refuses to start Triton when the manifest's ``gpu_arch`` differs from the node's GPU.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from settings.gpu_catalog import arch_for_compute_capability
from settings.storage import engine_target

SCHEMA_VERSION = 1
"""Bumped when a field changes meaning; readers reject manifests with a newer version."""

MANIFEST_FILE = "manifest.json"

_CHUNK_BYTES = 1024 * 1024
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """A manifest file is missing, is not JSON, or does not match :class:`EngineManifest`."""


class EngineManifest(BaseModel):
    """One built engine version (``docs/contracts.md`` §4).

    ``files`` maps POSIX paths relative to the version folder (e.g.
    ``model_repository/whisper/1/engines/encoder/rank0.engine``) to lowercase hex SHA-256; the
    manifest itself is never listed. ``compute_capability`` is the ``nvidia-smi`` form (``"8.6"``)
    and ``gpu_arch`` the matching ``sm86``; both are checked against each other.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int = Field(SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    model: str = Field(min_length=1, description="Whisper model name, e.g. large-v3-turbo.")
    engine: Literal["tensorrt_llm", "ctranslate2"]
    tensorrt_llm_version: str | None = Field(None, description="None for ctranslate2 builds.")
    cuda_version: str | None = None
    gpu_name: str = Field(min_length=1, description="nvidia-smi name, e.g. NVIDIA A10G.")
    compute_capability: str = Field(pattern=r"^\d{1,2}\.\d$")
    gpu_arch: str = Field(pattern=r"^sm\d{2,3}$")
    mig_profile: str | None = Field(
        None,
        pattern=r"^\d+g\.\d+gb$",
        description="MIG profile the engine was built on and sized for (e.g. 1g.10gb); None for a whole GPU.",
    )
    build_flags: dict[str, Any] = Field(default_factory=dict)
    build_key: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="whisper_build.release.engine_build.spec.build_key of the build; None in manifests from "
        "before build keys (such an engine is always rebuilt).",
    )
    files: dict[str, str] = Field(default_factory=dict)
    built_at: datetime

    @field_validator("built_at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("built_at must carry a timezone (ISO 8601 UTC, e.g. 2026-11-30T10:15:00Z)")
        return value.astimezone(UTC)

    @field_validator("files")
    @classmethod
    def _relative_paths_and_digests(cls, files: dict[str, str]) -> dict[str, str]:
        for path, digest in files.items():
            if path.startswith("/") or "\\" in path or ".." in path.split("/") or not path:
                raise ValueError(f"file path '{path}' must be relative, POSIX-style and stay inside the version")
            if not _SHA256_RE.match(digest):
                raise ValueError(f"checksum of '{path}' is not a lowercase hex SHA-256: '{digest}'")
        return files

    @model_validator(mode="after")
    def _arch_matches_capability(self) -> EngineManifest:
        expected = arch_for_compute_capability(self.compute_capability)
        if expected != self.gpu_arch:
            raise ValueError(
                f"gpu_arch '{self.gpu_arch}' contradicts compute_capability {self.compute_capability} ({expected})"
            )
        return self

    @property
    def engine_target(self) -> str:
        """What the engine runs on (:func:`settings.storage.engine_target`), e.g. ``sm90-1g.10gb``.

        The S3 prefix it is published under.
        """
        return engine_target(self.gpu_arch, self.mig_profile)

    def to_json(self) -> str:
        """Pretty JSON text (``built_at`` as ISO 8601 with ``Z``), newline-terminated."""
        data = self.model_dump(mode="json")
        data["built_at"] = self.built_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        for optional in ("build_key", "mig_profile"):  # absent, manifests stay as they were
            if data[optional] is None:
                del data[optional]
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def sha256_file(path: Path) -> str:
    """Lowercase hex SHA-256 of a file, read in 1 MiB chunks (engines are several GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_tree(root: Path, *, exclude: tuple[str, ...] = (MANIFEST_FILE,)) -> dict[str, str]:
    """SHA-256 of every regular file under ``root``, keyed by POSIX path relative to ``root``, sorted.

    Files whose relative path is in ``exclude`` (default: the manifest itself) are skipped.

    Raises:
        NotADirectoryError: when ``root`` is not a directory.
    """
    if not root.is_dir():
        raise NotADirectoryError(f"{root} is not a directory")
    result: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        relative = path.relative_to(root).as_posix()
        if relative not in exclude:
            result[relative] = sha256_file(path)
    return result


def utc_now() -> datetime:
    """Current time in UTC, to the second (the manifest's ``built_at``)."""
    return datetime.now(UTC).replace(microsecond=0)


def parse_manifest(text: str | bytes) -> EngineManifest:
    """Parse manifest JSON text.

    Raises:
        ManifestError: not JSON, or a field is missing/invalid (message names the field).
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ManifestError(f"manifest is not valid JSON: {exc}") from exc
    try:
        return EngineManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()
        )
        raise ManifestError(f"invalid engine manifest: {problems}") from exc


def read_manifest(path: Path) -> EngineManifest:
    """Read ``manifest.json`` from a file or from a version folder containing one.

    Raises:
        ManifestError: file missing, not JSON or invalid.
    """
    file = path / MANIFEST_FILE if path.is_dir() else path
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(f"no engine manifest at {file}") from exc
    return parse_manifest(text)


def write_manifest(manifest: EngineManifest, directory: Path) -> Path:
    """Write ``directory/manifest.json`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / MANIFEST_FILE
    file.write_text(manifest.to_json(), encoding="utf-8")
    return file


def verify_tree(manifest: EngineManifest, root: Path) -> list[str]:
    """Compare files under ``root`` with ``manifest.files``.

    Returns:
        Human-readable problems (missing, unexpected or changed files); empty when all match.
    """
    actual = checksum_tree(root)
    problems = [f"missing: {p}" for p in sorted(set(manifest.files) - set(actual))]
    problems += [f"unexpected: {p}" for p in sorted(set(actual) - set(manifest.files))]
    problems += [
        f"checksum differs: {p}" for p in sorted(set(actual) & set(manifest.files)) if actual[p] != manifest.files[p]
    ]
    return problems
