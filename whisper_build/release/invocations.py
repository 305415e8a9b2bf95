"""Command lines of the release tools for a deployment config: the engine build and its skip check.

Pure functions of :class:`settings.DeploymentConfig`, used by both the AWS stacks (CodeBuild
projects, the engine-build Job) and the cdk8s charts (the preflight names the exact build command),
so they live below both.
"""

from __future__ import annotations

from settings.schema import DeploymentConfig
from whisper_build.release.engine_build.spec import build_key, derive_spec

WORK_DIR = "/work"
"""Mount path of the engine-build Job's scratch volume."""


def engine_build_command(config: DeploymentConfig, arch: str, bucket_name: str) -> list[str]:
    """Argv of ``python -m whisper_build.release.engine_build`` for ``arch``, publishing to ``bucket_name``.

    The build limits come from ``config.model``; the smoke clip comes from the image's
    ``WHISPER_SMOKE_CLIP`` / ``WHISPER_SMOKE_TEXT`` environment.
    """
    model = config.model
    return [
        "python3", "-m", "whisper_build.release.engine_build",
        "--model", model.hf_id,
        "--model-name", model.name,
        "--max-batch-size", str(model.max_batch_size),
        "--beam-width", str(model.beam_width),
        "--max-output-len", str(model.max_output_len),
        "--weight-only", model.weight_only,
        "--dtype", model.dtype,
        "--image-tag", config.serving.image_tag,
        "--expect-arch", arch,
        "--work-dir", f"{WORK_DIR}/scratch",
        "--output-dir", f"{WORK_DIR}/version",
        "--publish-bucket", bucket_name,
    ]  # fmt: skip


def engine_build_key(config: DeploymentConfig) -> str:
    """Build key (:func:`whisper_build.release.engine_build.spec.build_key`) that :func:`engine_build_command`
    makes the build tool record in ``manifest.json``: the model id, the serving image tag and the
    flags derived from ``config.model``. The same for every architecture (the architecture is the
    S3 prefix the key is compared under).

    Raises:
        BuildSpecError: the config's model limits are outside Whisper's.
    """
    model = config.model
    spec = derive_spec(
        model.name,
        max_batch_size=model.max_batch_size,
        beam_width=model.beam_width,
        max_output_len=model.max_output_len,
        weight_only=model.weight_only,
        dtype=model.dtype,
    )
    return build_key(model.hf_id, config.serving.image_tag, spec.build_flags())


def engine_current_command(config: DeploymentConfig, arch: str, bucket_name: str) -> list[str]:
    """Argv of ``python -m whisper_build.release.publish current`` for ``arch`` with :func:`engine_build_key`:
    exits 0 when the engine published for ``arch`` was built from the inputs of
    :func:`engine_build_command`, so that build can be skipped.
    """
    return [
        "python3", "-m", "whisper_build.release.publish", "current",
        "--bucket", bucket_name,
        "--model", config.model.name,
        "--gpu-arch", arch,
        "--build-key", engine_build_key(config),
    ]  # fmt: skip
