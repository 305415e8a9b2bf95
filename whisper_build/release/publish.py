"""Publish a built engine version to the model bucket, safely (``docs/contracts.md`` §3).

Entry point: :func:`main` (the details, in its docstring).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from settings.storage import MANIFEST_FILE, model_prefix, pointer_key, version_prefix
from whisper_build.release.manifest import EngineManifest, ManifestError, parse_manifest, read_manifest, verify_tree

MB = 1024 * 1024
_VERSION_FORMAT = "%Y%m%dT%H%M%SZ"


class PublishError(RuntimeError):
    """Publishing stopped before the pointer switch; the message says what to fix."""


class ChecksumMismatchError(PublishError):
    """An uploaded object does not match the manifest; the pointer was not switched."""


def new_version(now: datetime | None = None) -> str:
    """Version name from the UTC time, e.g. ``20261130T101500Z`` (sorts chronologically)."""
    return (now or datetime.now(UTC)).astimezone(UTC).strftime(_VERSION_FORMAT)


class UploadProgress:
    """boto3 transfer callback printing ``name: 42% (630.0/1500.0 MB)`` every ``step_percent``.

    boto3 calls it from several threads with the bytes sent since the last call; a lock keeps the
    count right.
    """

    def __init__(self, name: str, total_bytes: int, out: TextIO = sys.stderr, step_percent: int = 10) -> None:
        self._name, self._total, self._out, self._step = name, max(total_bytes, 1), out, step_percent
        self._sent = 0
        self._next = step_percent
        self._lock = threading.Lock()

    def __call__(self, bytes_sent: int) -> None:
        """Add ``bytes_sent`` (bytes since the last call) and print when the next step is reached."""
        with self._lock:
            self._sent += bytes_sent
            percent = min(100, self._sent * 100 // self._total)
            if percent >= self._next:
                self._next = (percent // self._step + 1) * self._step
                self._out.write(f"{self._name}: {percent}% ({self._sent / MB:.1f}/{self._total / MB:.1f} MB)\n")
                self._out.flush()


def _sha256_b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def _object_sha256(s3: Any, bucket: str, key: str) -> str:
    """Hex SHA-256 of an object: from its full-object checksum when S3 has one, else by download.

    A multipart object (ETag ``"<md5>-<parts>"``) carries a checksum of its part checksums
    (``ChecksumType: COMPOSITE``, S3 User Guide "Checking object integrity"), not of the file.
    """
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    checksum = head.get("ChecksumSHA256")
    multipart = "-" in head.get("ETag", "") or "-" in (checksum or "") or head.get("ChecksumType") == "COMPOSITE"
    if checksum and not multipart:
        return base64.b64decode(checksum).hex()
    digest = hashlib.sha256()
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    for chunk in iter(lambda: body.read(MB), b""):
        digest.update(chunk)
    return digest.hexdigest()


def _prefix_has_objects(s3: Any, bucket: str, prefix: str) -> bool:
    return s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0) > 0


def upload_version(
    s3: Any,
    bucket: str,
    version_dir: Path,
    version: str,
    *,
    transfer_config: Any = None,
    out: TextIO = sys.stderr,
) -> EngineManifest:
    """Upload ``version_dir`` (files + ``manifest.json``) under its version prefix.

    Args:
        s3: a boto3 S3 client.
        bucket: the model bucket's name.
        version_dir: folder with ``manifest.json`` and the files it lists.
        version: version name (see :func:`new_version`).
        transfer_config: ``boto3.s3.transfer.TransferConfig``; default 64 MiB parts, 8 threads.
        out: where upload progress is written.

    Returns:
        The manifest that was uploaded.

    Raises:
        PublishError: invalid manifest, local files differ from it, or the version exists.
    """
    try:
        manifest = read_manifest(version_dir)
    except ManifestError as exc:
        raise PublishError(f"cannot publish {version_dir}: {exc}") from exc
    problems = verify_tree(manifest, version_dir)
    if problems:
        raise PublishError(f"local files of {version_dir} differ from manifest.json: {'; '.join(problems)}")
    prefix = version_prefix(manifest.model, manifest.engine_target, version)
    if _prefix_has_objects(s3, bucket, prefix):
        raise PublishError(f"s3://{bucket}/{prefix} already exists: published versions are immutable, pick a new one")
    if transfer_config is None:
        from boto3.s3.transfer import TransferConfig

        transfer_config = TransferConfig(multipart_chunksize=64 * MB, max_concurrency=8)
    for relative in [*sorted(manifest.files), MANIFEST_FILE]:
        path = version_dir / relative
        s3.upload_file(
            str(path),
            bucket,
            prefix + relative,
            ExtraArgs={"ChecksumAlgorithm": "SHA256"},
            Config=transfer_config,
            Callback=UploadProgress(relative, path.stat().st_size, out),
        )
    return manifest


def verify_version(s3: Any, bucket: str, manifest: EngineManifest, version: str) -> None:
    """Check every uploaded object of ``version`` against the manifest.

    Raises:
        ChecksumMismatchError: an object is missing or its SHA-256 differs (lists them all).
    """
    prefix = version_prefix(manifest.model, manifest.engine_target, version)
    problems = []
    for relative, expected in sorted(manifest.files.items()):
        try:
            actual = _object_sha256(s3, bucket, prefix + relative)
        except s3.exceptions.ClientError as exc:
            problems.append(f"{relative}: {exc.response.get('Error', {}).get('Code', exc)}")
            continue
        if actual != expected:
            problems.append(f"{relative}: sha256 {actual} != manifest {expected}")
    if problems:
        raise ChecksumMismatchError(
            f"s3://{bucket}/{prefix} does not match manifest.json; pointer left unchanged: " + "; ".join(problems)
        )


def read_pointer(s3: Any, bucket: str, model: str, gpu_arch: str) -> str | None:
    """Version ``current.json`` points to, or None when there is no pointer yet.

    Raises:
        PublishError: the pointer exists but is not ``{"version": "<name>"}``.
    """
    try:
        body = s3.get_object(Bucket=bucket, Key=pointer_key(model, gpu_arch))["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None
    try:
        version = json.loads(body)["version"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PublishError(f's3://{bucket}/{pointer_key(model, gpu_arch)} is not {{"version": ...}}') from exc
    if not isinstance(version, str) or not version:
        raise PublishError(f"s3://{bucket}/{pointer_key(model, gpu_arch)} names no version")
    return version


def read_remote_manifest(s3: Any, bucket: str, model: str, gpu_arch: str, version: str) -> EngineManifest:
    """The ``manifest.json`` of a published version.

    Raises:
        PublishError: missing or invalid.
    """
    key = version_prefix(model, gpu_arch, version) + MANIFEST_FILE
    try:
        return parse_manifest(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except s3.exceptions.NoSuchKey as exc:
        raise PublishError(f"s3://{bucket}/{key} not found: version {version} was never completely published") from exc
    except ManifestError as exc:
        raise PublishError(f"s3://{bucket}/{key}: {exc}") from exc


def switch_pointer(s3: Any, bucket: str, model: str, gpu_arch: str, version: str) -> None:
    """Point ``current.json`` at ``version`` in one ``PutObject``, after checking its manifest.

    Raises:
        PublishError: the version has no valid manifest for this model and architecture.
    """
    manifest = read_remote_manifest(s3, bucket, model, gpu_arch, version)
    if (manifest.model, manifest.engine_target) != (model, gpu_arch):
        raise PublishError(
            f"version {version} holds {manifest.model}/{manifest.engine_target}, not {model}/{gpu_arch}; "
            "pointer unchanged"
        )
    s3.put_object(
        Bucket=bucket,
        Key=pointer_key(model, gpu_arch),
        Body=json.dumps({"version": version}).encode(),
        ContentType="application/json",
        ChecksumAlgorithm="SHA256",
    )


def publish(
    s3: Any,
    bucket: str,
    version_dir: Path,
    *,
    version: str | None = None,
    transfer_config: Any = None,
    out: TextIO = sys.stderr,
) -> str:
    """Upload, verify, then switch the pointer. Returns the published version name.

    Raises:
        PublishError / ChecksumMismatchError: before the switch; the pointer is unchanged.
    """
    version = version or new_version()
    manifest = upload_version(s3, bucket, version_dir, version, transfer_config=transfer_config, out=out)
    verify_version(s3, bucket, manifest, version)
    switch_pointer(s3, bucket, manifest.model, manifest.engine_target, version)
    out.write(
        f"published s3://{bucket}/{version_prefix(manifest.model, manifest.engine_target, version)} (now current)\n"
    )
    return version


def list_versions(s3: Any, bucket: str, model: str, gpu_arch: str) -> list[str]:
    """Completely published versions (those with a ``manifest.json``), oldest first."""
    prefix = model_prefix(model, gpu_arch)
    versions = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        for common in page.get("CommonPrefixes", []):
            name = common["Prefix"][len(prefix) :].rstrip("/")
            if _prefix_has_objects(s3, bucket, version_prefix(model, gpu_arch, name) + MANIFEST_FILE):
                versions.append(name)
    return sorted(versions)


def rollback(s3: Any, bucket: str, model: str, gpu_arch: str, to_version: str | None = None) -> str:
    """Point ``current.json`` back at ``to_version`` (default: the version before the current one).

    Raises:
        PublishError: no earlier complete version, or ``to_version`` is not published.
    """
    if to_version is None:
        versions = list_versions(s3, bucket, model, gpu_arch)
        current = read_pointer(s3, bucket, model, gpu_arch)
        older = [v for v in versions if current is None or v < current]
        if not older:
            raise PublishError(f"no version older than {current} under s3://{bucket}/{model_prefix(model, gpu_arch)}")
        to_version = older[-1]
    switch_pointer(s3, bucket, model, gpu_arch, to_version)
    return to_version


def current_build_key_problem(s3: Any, bucket: str, model: str, gpu_arch: str, key: str) -> str | None:
    """Why the engine ``current.json`` points to was NOT built with build key ``key``; None when it was.

    ``key`` is :func:`whisper_build.release.engine_build.spec.build_key` of the build about to run; a
    match means that build would reproduce the published engine. Missing pointer, a manifest
    without ``build_key`` (built before keys existed) or another key each give a reason.

    Raises:
        PublishError: the pointer or the manifest it names is invalid or missing.
    """
    version = read_pointer(s3, bucket, model, gpu_arch)
    if version is None:
        return f"no s3://{bucket}/{pointer_key(model, gpu_arch)}: nothing published yet"
    published = read_remote_manifest(s3, bucket, model, gpu_arch, version).build_key
    if published is None:
        return f"current version {version} has no build_key (built before build keys)"
    if published != key:
        return f"current version {version} was built with {published}, not {key}"
    return None


# ------------------------------------------------------------------------------------------------ CLI


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.release.publish",
        description="Publish an engine version to the model bucket (upload, verify, switch current.json), "
        "list versions, or roll back.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("upload", help="publish a built version folder (holds manifest.json)")
    up.add_argument("version_dir", type=Path)
    up.add_argument("--bucket", required=True)
    up.add_argument("--version", help="version name (default: UTC time, e.g. 20261130T101500Z)")
    for name, text in (("list", "list published versions"), ("rollback", "point current.json at an older version")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--bucket", required=True)
        cmd.add_argument("--model", required=True)
        cmd.add_argument("--gpu-arch", required=True, help="engine target, e.g. sm86 or sm90-1g.10gb (MIG)")
    sub.choices["rollback"].add_argument("--to", help="version (default: the one before the current)")
    cur = sub.add_parser(
        "current", help="exit 0 when current.json names a version built with --build-key, 1 otherwise (says why)"
    )
    cur.add_argument("--bucket", required=True)
    cur.add_argument("--model", required=True)
    cur.add_argument(
        "--gpu-arch", "--arch", dest="gpu_arch", required=True, help="engine target, e.g. sm86 or sm90-1g.10gb (MIG)"
    )
    cur.add_argument("--build-key", required=True, help="sha256:<hex> of the build about to run")
    return parser


def main(argv: list[str] | None = None, s3: Any = None) -> int:
    """CLI entry point; returns the exit status (1 with a message on :class:`PublishError`).

    Order, each step only after the previous one succeeded:

    1. check the local files against ``manifest.json``;
    2. refuse if ``models/<model>/<arch>/<version>/`` already holds objects (versions are immutable);
    3. upload every file, then ``manifest.json`` last, with S3 SHA-256 checksums
       (``ChecksumAlgorithm=SHA256``), showing progress for large files;
    4. verify every object against the manifest: a full-object ``ChecksumSHA256`` from
       ``HeadObject(ChecksumMode=ENABLED)`` when S3 has one, otherwise (multipart uploads carry a
       checksum of part checksums) by downloading and hashing;
    5. switch ``models/<model>/<arch>/current.json`` to ``{"version": ...}`` in one ``PutObject``.

    A failure anywhere before step 5 leaves the pointer, and so what every pod mounts, unchanged; the
    half-uploaded version is inert garbage under its own prefix. A single ``PutObject`` replaces an
    object atomically: readers see the old or the new pointer, never a mix (S3 User Guide, "Amazon S3
    data consistency model").

    Model and architecture come from the manifest, so an engine can never be published under another
    GPU architecture's prefix. ``python -m whisper_build.release.publish --help`` for the CLI.
    """
    args = _parser().parse_args(argv)
    if s3 is None:
        import boto3

        s3 = boto3.client("s3")
    try:
        if args.command == "upload":
            publish(s3, args.bucket, args.version_dir, version=args.version)
        elif args.command == "list":
            current = read_pointer(s3, args.bucket, args.model, args.gpu_arch)
            for version in list_versions(s3, args.bucket, args.model, args.gpu_arch):
                print(f"{version}{'  (current)' if version == current else ''}")
        elif args.command == "current":
            problem = current_build_key_problem(s3, args.bucket, args.model, args.gpu_arch, args.build_key)
            if problem is not None:
                print(f"not current: {problem}")
                return 1
            pointer = f"s3://{args.bucket}/{pointer_key(args.model, args.gpu_arch)}"
            print(f"current: {pointer} names a version built with {args.build_key}")
        else:
            print(f"current.json -> {rollback(s3, args.bucket, args.model, args.gpu_arch, args.to)}")
    except PublishError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "ChecksumMismatchError",
    "PublishError",
    "UploadProgress",
    "current_build_key_problem",
    "list_versions",
    "main",
    "new_version",
    "publish",
    "read_pointer",
    "read_remote_manifest",
    "rollback",
    "switch_pointer",
    "upload_version",
    "verify_version",
]
