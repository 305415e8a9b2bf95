"""Engine manifest (docs/contracts.md §4): round trip, validation, checksums."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

import pytest

from settings.gpu_catalog import arch_for_compute_capability
from whisper_build.release.manifest import (
    EngineManifest,
    ManifestError,
    checksum_tree,
    parse_manifest,
    read_manifest,
    verify_tree,
    write_manifest,
)


def _manifest(**overrides) -> EngineManifest:
    fields = dict(
        model="large-v3-turbo",
        engine="tensorrt_llm",
        tensorrt_llm_version="0.20.0",
        cuda_version="12.8",
        gpu_name="NVIDIA L40S",
        compute_capability="8.9",
        gpu_arch="sm89",
        build_flags={"max_batch_size": 16},
        files={"model_repository/whisper/config.pbtxt": "a" * 64},
        built_at=datetime(2026, 11, 30, 10, 15, tzinfo=UTC),
    )
    fields.update(overrides)
    return EngineManifest(**fields)


def test_round_trip_through_a_file(tmp_path):
    manifest = _manifest()
    path = write_manifest(manifest, tmp_path / "v1")
    assert path.name == "manifest.json"
    assert read_manifest(tmp_path / "v1") == manifest
    assert '"built_at": "2026-11-30T10:15:00Z"' in path.read_text()


def test_contract_field_names():
    # The preflight container and the publish step read exactly these keys.
    assert set(EngineManifest.model_fields) == {
        "schema_version",
        "model",
        "engine",
        "tensorrt_llm_version",
        "cuda_version",
        "gpu_name",
        "compute_capability",
        "gpu_arch",
        "mig_profile",
        "build_flags",
        "build_key",
        "files",
        "built_at",
    }


def test_build_key_is_optional_and_round_trips(tmp_path):
    # Manifests written before build keys have no such field and still parse; a key round-trips.
    legacy = _manifest()
    assert '"build_key"' not in legacy.to_json()
    assert parse_manifest(legacy.to_json()).build_key is None
    keyed = _manifest(build_key="sha256:" + "0" * 64)
    assert read_manifest(write_manifest(keyed, tmp_path / "v1")).build_key == "sha256:" + "0" * 64


def test_malformed_build_key_is_refused():
    with pytest.raises(ValueError, match="build_key"):
        _manifest(build_key="not-a-key")


@pytest.mark.parametrize(
    ("capability", "arch"), [("8.6", "sm86"), ("8.9", "sm89"), ("9.0", "sm90"), ("12.0", "sm120"), (" 7.5 ", "sm75")]
)
def test_arch_for_compute_capability(capability, arch):
    assert arch_for_compute_capability(capability) == arch


@pytest.mark.parametrize("bad", ["", "8", "sm86", "8.6.1", "eight"])
def test_arch_from_bad_compute_capability(bad):
    with pytest.raises(ValueError, match="compute capability"):
        arch_for_compute_capability(bad)


def test_arch_must_match_capability():
    with pytest.raises(ValueError, match="contradicts compute_capability"):
        _manifest(gpu_arch="sm86")


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../b", "a\\b"])
def test_file_paths_stay_inside_the_version(path):
    with pytest.raises(ValueError, match="must be relative"):
        _manifest(files={path: "b" * 64})


def test_checksums_are_sha256_hex():
    with pytest.raises(ValueError, match="SHA-256"):
        _manifest(files={"x": "ABC"})


def test_naive_timestamp_rejected():
    with pytest.raises(ValueError, match="timezone"):
        _manifest(built_at=datetime(2026, 11, 30, 10, 15))


def test_unknown_key_and_bad_json_name_the_problem():
    with pytest.raises(ManifestError, match="not valid JSON"):
        parse_manifest("{")
    text = _manifest().to_json().replace('"model":', '"modle":')
    with pytest.raises(ManifestError, match="modle"):
        parse_manifest(text)


def test_newer_schema_rejected():
    text = _manifest().to_json().replace('"schema_version": 1', '"schema_version": 99')
    with pytest.raises(ManifestError, match="schema_version"):
        parse_manifest(text)


def test_missing_manifest_file(tmp_path):
    with pytest.raises(ManifestError, match="no engine manifest"):
        read_manifest(tmp_path)


def test_checksum_tree_and_verify(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"engine bytes")
    (tmp_path / "manifest.json").write_text("{}")
    sums = checksum_tree(tmp_path)
    assert sums == {"a/x.bin": hashlib.sha256(b"engine bytes").hexdigest()}
    manifest = _manifest(files=sums)
    assert verify_tree(manifest, tmp_path) == []
    (tmp_path / "a" / "x.bin").write_bytes(b"tampered")
    (tmp_path / "extra").write_bytes(b"")
    assert verify_tree(manifest, tmp_path) == ["unexpected: extra", "checksum differs: a/x.bin"]
