"""Command lines of the release tools for a deployment config: the engine build and its skip check.

Pure functions of :class:`settings.DeploymentConfig`, used by both the AWS stacks (CodeBuild
projects, the engine-build Job) and the cdk8s charts (the preflight names the exact build command),
so they live below both.

Engines are built per *engine target* (``GpuGroup.engine_target``): the GPU architecture (``sm86``),
or architecture plus MIG profile (``sm90-1g.10gb``) for a group served on MIG slices, whose engine is
sized to the slice's memory (:func:`whisper_build.release.engine_build.memory.max_batch_size_for_memory`)
and therefore built and keyed on its own.
Docs: docs/engines.md, "Builds are skipped when the engine is current".
"""

from __future__ import annotations

from settings.schema import DeploymentConfig, GpuGroup
from whisper_build.release.engine_build.memory import max_batch_size_for_memory
from whisper_build.release.engine_build.spec import build_key, derive_spec

WORK_DIR = "/work"
"""Mount path of the engine-build Job's scratch volume."""


def target_group(config: DeploymentConfig, target: str) -> GpuGroup:
    """The first GPU group whose engine target is ``target`` (it builds and defines the engine).

    Raises:
        ValueError: no group has that engine target.
    """
    groups = config.groups_for_target(target)
    if not groups:
        raise ValueError(f"no GPU group with engine target {target}; configured: {', '.join(config.engine_targets)}")
    return groups[0]


def target_max_batch_size(config: DeploymentConfig, target: str) -> int:
    """``model.max_batch_size``, capped on a MIG target to what the slice's memory holds.

    Raises:
        BuildSpecError: not even one window fits the slice.
    """
    model = config.model
    mig = target_group(config, target).mig
    if mig is None:
        return model.max_batch_size
    return max_batch_size_for_memory(
        model.name,
        mig.memory_gb,
        configured=model.max_batch_size,
        beam_width=model.beam_width,
        weight_only=model.weight_only,
    )


def engine_build_command(config: DeploymentConfig, target: str, bucket_name: str) -> list[str]:
    """Argv of ``python -m whisper_build.release.engine_build`` for ``target``, publishing to ``bucket_name``.

    ``target`` is an engine target such as ``sm86`` or ``sm90-1g.10gb``. The build limits come from
    ``config.model`` (the batch size capped to a MIG slice's memory); the smoke clip comes from the
    image's ``WHISPER_SMOKE_CLIP`` / ``WHISPER_SMOKE_TEXT`` environment.
    """
    model = config.model
    group = target_group(config, target)
    mig = ["--mig-profile", group.mig_profile] if group.mig_profile else []
    return [
        "python3", "-m", "whisper_build.release.engine_build",
        "--model", model.hf_id,
        "--model-name", model.name,
        "--max-batch-size", str(target_max_batch_size(config, target)),
        "--beam-width", str(model.beam_width),
        "--max-output-len", str(model.max_output_len),
        "--weight-only", model.weight_only,
        "--dtype", model.dtype,
        "--image-tag", config.serving.image_tag,
        "--expect-arch", group.arch,
        *mig,
        "--work-dir", f"{WORK_DIR}/scratch",
        "--output-dir", f"{WORK_DIR}/version",
        "--publish-bucket", bucket_name,
    ]  # fmt: skip


def engine_build_key(config: DeploymentConfig, target: str) -> str:
    """Build key that :func:`engine_build_command` makes the build tool record in ``manifest.json``.

    The key (:func:`whisper_build.release.engine_build.spec.build_key`) of the model id, the serving image
    tag and the flags derived from ``config.model`` (plus the MIG profile and its batch size on a MIG
    target). Whole-GPU targets of different architectures share a key (the architecture is the S3 prefix
    the key is compared under).

    Raises:
        BuildSpecError: the config's model limits are outside Whisper's.
    """
    model = config.model
    spec = derive_spec(
        model.name,
        max_batch_size=target_max_batch_size(config, target),
        beam_width=model.beam_width,
        max_output_len=model.max_output_len,
        weight_only=model.weight_only,
        dtype=model.dtype,
    )
    return build_key(model.hf_id, config.serving.image_tag, spec.build_flags(target_group(config, target).mig_profile))


def engine_current_command(config: DeploymentConfig, target: str, bucket_name: str) -> list[str]:
    """Argv of ``python -m whisper_build.release.publish current`` for ``target`` with :func:`engine_build_key`.

    The command exits 0 when the engine published for ``target`` was built from the inputs of
    :func:`engine_build_command`, so that build can be skipped.
    """
    return [
        "python3", "-m", "whisper_build.release.publish", "current",
        "--bucket", bucket_name,
        "--model", config.model.name,
        "--gpu-arch", target,
        "--build-key", engine_build_key(config, target),
    ]  # fmt: skip
