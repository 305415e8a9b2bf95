"""Safe publish to S3 (moto): upload → verify → one-PutObject pointer switch; failures leave the pointer."""

from __future__ import annotations

import io
import json
from datetime import UTC

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from moto import mock_aws

from settings.storage import pointer_key, version_prefix
from whisper_build.release import publish as pub
from whisper_build.release.engine_build.spec import build_key
from whisper_build.release.manifest import EngineManifest, checksum_tree, utc_now, write_manifest

BUCKET = "whisper-models-test"
MODEL, ARCH = "large-v3-turbo", "sm86"
MB = 1024 * 1024


@pytest.fixture()
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _build(tmp_path, name: str, payload: bytes = b"engine", build_key: str | None = None) -> object:
    """A version folder like the engine build writes: a repository plus manifest.json."""
    root = tmp_path / name
    engine = root / "model_repository" / "whisper" / "engine"
    (engine / "encoder").mkdir(parents=True)
    (engine / "decoder").mkdir(parents=True)
    (engine / "encoder" / "rank0.engine").write_bytes(payload + b"-encoder")
    (engine / "decoder" / "rank0.engine").write_bytes(payload + b"-decoder")
    (root / "model_repository" / "whisper" / "config.pbtxt").write_text('name: "whisper"\n')
    manifest = EngineManifest(
        model=MODEL,
        engine="tensorrt_llm",
        tensorrt_llm_version="0.20.0",
        cuda_version="12.8",
        gpu_name="NVIDIA A10G",
        compute_capability="8.6",
        gpu_arch=ARCH,
        build_key=build_key,
        files=checksum_tree(root),
        built_at=utc_now(),
    )
    write_manifest(manifest, root)
    return root


def _pointer(s3) -> dict:
    return json.loads(s3.get_object(Bucket=BUCKET, Key=pointer_key(MODEL, ARCH))["Body"].read())


def test_happy_path_uploads_verifies_and_switches(s3, tmp_path):
    out = io.StringIO()
    version = pub.publish(s3, BUCKET, _build(tmp_path, "a"), version="20261130T100000Z", out=out)
    assert version == "20261130T100000Z"
    # The pointer is exactly the contract's {"version": ...}.
    assert _pointer(s3) == {"version": "20261130T100000Z"}
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]}
    prefix = version_prefix(MODEL, ARCH, version)
    assert {
        prefix + "manifest.json",
        prefix + "model_repository/whisper/config.pbtxt",
        prefix + "model_repository/whisper/engine/encoder/rank0.engine",
        prefix + "model_repository/whisper/engine/decoder/rank0.engine",
        pointer_key(MODEL, ARCH),
    } == keys
    assert "now current" in out.getvalue()


def test_progress_is_printed_for_long_uploads(s3, tmp_path):
    root = tmp_path / "big"
    _build(tmp_path, "big")
    big = root / "model_repository" / "whisper" / "engine" / "decoder" / "rank0.engine"
    big.write_bytes(b"x" * (12 * MB))
    fields = json.loads((root / "manifest.json").read_text())
    manifest = EngineManifest.model_validate({**fields, "files": checksum_tree(root)})
    write_manifest(manifest, root)
    out = io.StringIO()
    config = TransferConfig(multipart_threshold=5 * MB, multipart_chunksize=5 * MB)
    pub.publish(s3, BUCKET, root, version="v1", transfer_config=config, out=out)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("model_repository/whisper/engine/decoder")]
    assert lines[-1].endswith("100% (12.0/12.0 MB)")
    assert len(lines) >= 3  # several steps, not just the final line
    # The multipart object was verified by download-and-hash and the pointer switched.
    assert _pointer(s3) == {"version": "v1"}


def test_checksum_mismatch_aborts_before_switch(s3, tmp_path, monkeypatch):
    pub.publish(s3, BUCKET, _build(tmp_path, "old"), version="v1")
    real_upload = s3.upload_file

    def corrupting_upload(filename, bucket, key, **kwargs):
        real_upload(filename, bucket, key, **kwargs)
        if key.endswith("encoder/rank0.engine"):  # bit rot / truncated transfer after the upload
            s3.put_object(Bucket=bucket, Key=key, Body=b"corrupted")

    monkeypatch.setattr(s3, "upload_file", corrupting_upload)
    with pytest.raises(pub.ChecksumMismatchError, match="encoder/rank0.engine"):
        pub.publish(s3, BUCKET, _build(tmp_path, "new", b"new"), version="v2")
    assert _pointer(s3) == {"version": "v1"}


def test_failure_between_upload_and_switch_keeps_old_version_mounted(s3, tmp_path, monkeypatch):
    pub.publish(s3, BUCKET, _build(tmp_path, "old"), version="v1")

    def crash(*args, **kwargs):
        raise RuntimeError("pod evicted")

    # Everything of v2 is uploaded; the process dies right before the switch.
    monkeypatch.setattr(pub, "verify_version", crash)
    with pytest.raises(RuntimeError, match="pod evicted"):
        pub.publish(s3, BUCKET, _build(tmp_path, "new", b"new"), version="v2")
    uploaded = s3.list_objects_v2(Bucket=BUCKET, Prefix=version_prefix(MODEL, ARCH, "v2"))["KeyCount"]
    assert uploaded == 4  # 3 files + manifest.json
    assert _pointer(s3) == {"version": "v1"}
    assert pub.read_pointer(s3, BUCKET, MODEL, ARCH) == "v1"


def test_half_uploaded_version_without_manifest_cannot_be_pointed_to(s3, tmp_path):
    pub.publish(s3, BUCKET, _build(tmp_path, "old"), version="v1")
    s3.put_object(Bucket=BUCKET, Key=version_prefix(MODEL, ARCH, "v2") + "model_repository/x", Body=b"partial")
    with pytest.raises(pub.PublishError, match="never completely published"):
        pub.switch_pointer(s3, BUCKET, MODEL, ARCH, "v2")
    assert pub.list_versions(s3, BUCKET, MODEL, ARCH) == ["v1"]
    assert _pointer(s3) == {"version": "v1"}


def test_local_tampering_refused_before_any_upload(s3, tmp_path):
    root = _build(tmp_path, "a")
    (root / "model_repository" / "whisper" / "config.pbtxt").write_text("changed after the build")
    with pytest.raises(pub.PublishError, match="checksum differs: model_repository/whisper/config.pbtxt"):
        pub.publish(s3, BUCKET, root, version="v1")
    assert s3.list_objects_v2(Bucket=BUCKET)["KeyCount"] == 0


def test_published_versions_are_immutable(s3, tmp_path):
    pub.publish(s3, BUCKET, _build(tmp_path, "a"), version="v1")
    with pytest.raises(pub.PublishError, match="already exists"):
        pub.publish(s3, BUCKET, _build(tmp_path, "b", b"other"), version="v1")


def test_list_and_rollback(s3, tmp_path):
    for name in ("20261101T000000Z", "20261115T000000Z", "20261130T000000Z"):
        pub.publish(s3, BUCKET, _build(tmp_path, name, name.encode()), version=name)
    assert pub.list_versions(s3, BUCKET, MODEL, ARCH) == ["20261101T000000Z", "20261115T000000Z", "20261130T000000Z"]
    assert pub.rollback(s3, BUCKET, MODEL, ARCH) == "20261115T000000Z"
    assert _pointer(s3) == {"version": "20261115T000000Z"}
    assert pub.rollback(s3, BUCKET, MODEL, ARCH, "20261130T000000Z") == "20261130T000000Z"
    assert _pointer(s3) == {"version": "20261130T000000Z"}


def test_rollback_without_older_version(s3, tmp_path):
    pub.publish(s3, BUCKET, _build(tmp_path, "a"), version="v1")
    with pytest.raises(pub.PublishError, match="no version older"):
        pub.rollback(s3, BUCKET, MODEL, ARCH)


def test_cli_list_and_errors(s3, tmp_path, capsys):
    assert pub.main(["upload", str(_build(tmp_path, "a")), "--bucket", BUCKET, "--version", "v1"], s3=s3) == 0
    assert pub.main(["list", "--bucket", BUCKET, "--model", MODEL, "--gpu-arch", ARCH], s3=s3) == 0
    assert "v1  (current)" in capsys.readouterr().out
    assert pub.main(["upload", str(tmp_path / "missing"), "--bucket", BUCKET], s3=s3) == 1
    assert "no engine manifest" in capsys.readouterr().err


KEY_A = build_key("openai/whisper-large-v3-turbo", "0.1.0", {"max_batch_size": 16})
KEY_B = build_key("openai/whisper-large-v3-turbo", "0.2.0", {"max_batch_size": 16})


def _current(s3, key: str) -> int:
    return pub.main(["current", "--bucket", BUCKET, "--model", MODEL, "--arch", ARCH, "--build-key", key], s3=s3)


def test_current_without_pointer_is_not_current(s3, capsys):
    assert _current(s3, KEY_A) == 1
    assert "nothing published yet" in capsys.readouterr().out


def test_current_with_matching_key_is_current(s3, tmp_path, capsys):
    pub.publish(s3, BUCKET, _build(tmp_path, "a", build_key=KEY_A), version="v1")
    assert _current(s3, KEY_A) == 0
    assert KEY_A in capsys.readouterr().out


def test_current_with_another_key_is_not_current(s3, tmp_path, capsys):
    pub.publish(s3, BUCKET, _build(tmp_path, "a", build_key=KEY_A), version="v1")
    assert _current(s3, KEY_B) == 1
    assert f"built with {KEY_A}, not {KEY_B}" in capsys.readouterr().out


def test_current_follows_the_pointer_not_the_newest_version(s3, tmp_path):
    pub.publish(s3, BUCKET, _build(tmp_path, "a", b"a", build_key=KEY_A), version="v1")
    pub.publish(s3, BUCKET, _build(tmp_path, "b", b"b", build_key=KEY_B), version="v2")
    assert _current(s3, KEY_B) == 0
    pub.rollback(s3, BUCKET, MODEL, ARCH, "v1")
    assert (_current(s3, KEY_A), _current(s3, KEY_B)) == (0, 1)


def test_current_manifest_without_key_is_not_current(s3, tmp_path, capsys):
    pub.publish(s3, BUCKET, _build(tmp_path, "a"), version="v1")
    assert _current(s3, KEY_A) == 1
    assert "has no build_key" in capsys.readouterr().out


def test_new_version_sorts_by_time():
    from datetime import datetime

    assert pub.new_version(datetime(2026, 11, 30, 10, 15, 0, tzinfo=UTC)) == "20261130T101500Z"
