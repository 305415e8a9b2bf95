"""Fail-fast check of the mounted model repository, run as the serving pod's init container.

``python -m whisper_build.podstart.preflight --model-dir /models --model large-v3-turbo --bucket B
--gpu-arch sm86 --build-command "<engine build argv>"`` (the charts pass all of these).

Every serving pod mounts ``s3://<bucket>/models/<model>/<gpu_arch>/`` (``docs/contracts.md`` §3)
read-only through Mountpoint for S3. Before Triton starts, this script checks that:

1. the mount is not empty and ``current.json`` names a version folder that exists;
2. that version's ``manifest.json`` (§4) is a TensorRT-LLM build of the configured model;
3. the manifest's ``gpu_arch`` equals this node's GPU (``nvidia-smi --query-gpu=name,compute_cap``):
   TensorRT engines only run on the compute capability they were built for;
4. the manifest's ``tensorrt_llm_version`` equals the image's: TensorRT-LLM engines are not
   portable across TensorRT-LLM releases ("engines are not portable across TensorRT-LLM
   versions", TensorRT-LLM docs, ``trtllm-build``).

With ``--mig-profile`` (a group served on MIG slices) the engine target is ``<gpu_arch>-<profile>``
(``settings.storage.engine_target``) and the manifest must name the same profile.

With ``--select-engine`` the mount is the model's root prefix ``models/<model>/`` (one volume for every
GPU type, as the HyperPod inference operator mounts it) and the check *selects* the folder of this
node's GPU, ``<node_arch>[-<profile>]/``, before checking it as above; the path written with
``--write-model-repository`` is inside that folder. ``--exec CMD…`` then replaces the process with
``CMD`` (the worker of the inference operator, which has no init containers sharing a volume with it,
runs ``preflight … --select-engine --exec python3 -m whisper_build.serving.supervisor``).

On a mismatch it exits 1 with a message naming the S3 prefix it expected and the command that
builds the missing engine. With ``--engine ctranslate2`` (the group's ``serving_engine``
switch) no TensorRT-LLM engine is needed, but the CTranslate2 conversion of the configured model
must be published under ``models/<model>/<gpu_arch>/ctranslate2/`` (:data:`settings.storage.
CTRANSLATE2_REQUIRED_FILES`); when it is missing the message gives the converter and upload
commands. Exit status: 0 ok, 1 check failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from settings import storage
from settings.gpu_catalog import arch_for_compute_capability
from settings.schema import WHISPER_MODELS
from whisper_build.release.engine_build.gpu import GpuQueryError, package_version, query_gpu, tensorrt_llm_version
from whisper_build.release.manifest import EngineManifest, ManifestError, read_manifest

TRTLLM_VERSION_ENV = "WHISPER_TRTLLM_VERSION"
"""Environment variable holding the image's TensorRT-LLM version (set in the serving image)."""

ENGINES = ("tensorrt_llm", "ctranslate2")


class PreflightError(Exception):
    """The mounted model repository cannot be served on this node; the message says how to fix it."""


@dataclass(frozen=True)
class PreflightTarget:
    """What this pod is about to serve.

    Attributes:
        model_dir: Mount point of ``models/<model>/<gpu_arch>/``.
        model: Whisper model name (``config.model.name``), e.g. ``large-v3-turbo``.
        bucket: Model bucket name, used only in messages (``s3://<bucket>/<prefix>``).
        engine: ``tensorrt_llm`` or ``ctranslate2`` (the GPU group's ``serving_engine``).
        gpu_group: GPU group name, used only in messages.
        gpu_arch: Architecture of the mounted prefix (the group's), e.g. ``sm86``; ``None`` skips
            the node-placement check.
        build_command: The exact command that builds and publishes this architecture's engine
            (the charts pass the engine-build Job's argv); ``None`` derives a generic one.
        mig_profile: MIG profile of the slice the pod runs on (e.g. ``1g.10gb``), ``None`` for a whole GPU.
        select_engine: ``model_dir`` is the model's root prefix; use its ``<node_arch>[-<profile>]/`` folder.
    """

    model_dir: Path
    model: str
    bucket: str
    engine: str = "tensorrt_llm"
    gpu_group: str = ""
    gpu_arch: str | None = None
    build_command: str | None = None
    mig_profile: str | None = None
    select_engine: bool = False

    def engine_target(self, gpu_arch: str) -> str:
        """``sm86``, or ``sm90-1g.10gb`` on a MIG slice (:func:`settings.storage.engine_target`)."""
        return storage.engine_target(gpu_arch, self.mig_profile)

    def prefix_uri(self, gpu_arch: str) -> str:
        """``s3://<bucket>/models/<model>/<engine target>/``."""
        return f"s3://{self.bucket}/{storage.model_prefix(self.model, self.engine_target(gpu_arch))}"

    def ctranslate2_uri(self, gpu_arch: str) -> str:
        """``s3://<bucket>/models/<model>/<engine target>/ctranslate2/``."""
        return f"s3://{self.bucket}/{storage.ctranslate2_prefix(self.model, self.engine_target(gpu_arch))}"


@dataclass(frozen=True)
class PreflightResult:
    """A passed check.

    Attributes:
        message: One line for the pod log.
        model_repository: The version's Triton model repository (``None`` for ctranslate2: the
            supervisor renders one from ``WHISPER_TRITON_ENGINE__*``).
        model_path: The CTranslate2 model folder the pod serves (ctranslate2 only; the charts set
            ``WHISPER_TRITON_ENGINE__MODEL_PATH`` to the same :func:`ctranslate2_model_dir`).
    """

    message: str
    model_repository: Path | None
    model_path: Path | None = None


def ctranslate2_model_dir(model_dir: Path) -> Path:
    """The CTranslate2 folder inside the mounted per-arch prefix, e.g. ``/models/ctranslate2``."""
    return model_dir / storage.CTRANSLATE2_DIR


def ctranslate2_publish_commands(target: PreflightTarget, gpu_arch: str) -> list[str]:
    """Shell commands that convert ``target.model`` to CTranslate2 (float16) and upload it.

    The converter is CTranslate2's ``ct2-transformers-converter`` (needs ``transformers[torch]``;
    the command line is the one faster-whisper documents for its models); the output is not tied
    to a GPU architecture. The CTranslate2 version is the image's, so the model format matches
    the runtime that loads it.
    """
    hf_id = WHISPER_MODELS.get(target.model, (target.model,))[0]
    local = f"whisper-{target.model}-ct2"
    version = package_version("ctranslate2")
    ct2 = f"ctranslate2=={version}" if version else "ctranslate2"
    return [
        shlex.join(["pip", "install", ct2, "transformers[torch]"]),
        shlex.join([
            "ct2-transformers-converter", "--model", hf_id, "--output_dir", local,
            "--copy_files", "tokenizer.json", "preprocessor_config.json", "--quantization", "float16",
        ]),
        shlex.join(["aws", "s3", "sync", local, target.ctranslate2_uri(gpu_arch)]),
    ]  # fmt: skip


def _check_ctranslate2(target: PreflightTarget) -> PreflightResult:
    """The ctranslate2 fallback: the conversion must be in the mount (never the bundled tiny.en)."""
    arch = target.gpu_arch or "<gpu_arch>"
    folder = ctranslate2_model_dir(target.model_dir)
    uri = target.ctranslate2_uri(arch)
    missing = [name for name in storage.CTRANSLATE2_REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        commands = "\n".join(f"              {line}" for line in ctranslate2_publish_commands(target, arch))
        raise PreflightError(
            f"serving_engine is ctranslate2 for GPU group '{target.gpu_group or '?'}' but {folder} lacks "
            f"{', '.join(missing)}: the CTranslate2 model of {target.model} is not published\n"
            f"  expected: a CTranslate2 conversion of {target.model} under {uri}\n"
            f"  fix:      convert it once (any machine; the result runs on every GPU type) and upload it:\n"
            f"{commands}"
        )
    return PreflightResult(
        f"ok: serving_engine is ctranslate2 for GPU group '{target.gpu_group or '?'}': "
        f"serving the CTranslate2 model of {target.model} from {uri} (mounted at {folder})",
        None,
        folder,
    )


def build_command(target: PreflightTarget, gpu_arch: str) -> str:
    """The command that builds and publishes the engine this pod needs.

    ``target.build_command`` when given, else ``python -m whisper_build.release.engine_build`` with the
    model's Hugging Face id. It must run on a node with a ``gpu_arch`` GPU (an engine is built for
    the GPU it is built on), e.g. as the engine-build Job on that GPU group's nodes.
    """
    if target.build_command:
        return target.build_command
    hf_id = WHISPER_MODELS.get(target.model, (target.model,))[0]
    mig = ["--mig-profile", target.mig_profile] if target.mig_profile else []
    return shlex.join([
        "python", "-m", "whisper_build.release.engine_build", "--model", hf_id, "--model-name", target.model,
        "--expect-arch", gpu_arch, *mig, "--output-dir", "/tmp/whisper-engine", "--publish-bucket", target.bucket,
    ])  # fmt: skip


def _fix_lines(target: PreflightTarget, gpu_arch: str) -> str:
    group = target.gpu_group or "<group>"
    return (
        f"  expected: an engine published under {target.prefix_uri(gpu_arch)} "
        f"({storage.POINTER_FILE} -> <version>/{storage.MANIFEST_FILE})\n"
        f"  fix:      build and publish it on a {target.engine_target(gpu_arch)} node (the engine-build Job of "
        f"GPU group '{group}'):\n"
        f"              {build_command(target, gpu_arch)}\n"
        f"  or serve with CTranslate2 until then: set serving_engine: ctranslate2 on GPU group '{group}' "
        f"after publishing the model's CTranslate2 conversion to {target.ctranslate2_uri(gpu_arch)} "
        "(docs/kubernetes.md)"
    )


def query_compute_capability() -> str:
    """Compute capability of this node's GPU from ``nvidia-smi``, e.g. ``"8.9"``.

    Raises:
        PreflightError: nvidia-smi is missing, fails, or prints nothing usable.
    """
    try:
        return query_gpu().compute_capability
    except GpuQueryError as err:
        raise PreflightError(f"{err}; is the pod requesting nvidia.com/gpu on a GPU node?") from err


def image_trtllm_version() -> str | None:
    """TensorRT-LLM version of this image; ``None`` when it is not known.

    The installed ``tensorrt_llm`` wheel's (the same source the engine build writes into the manifest,
    :func:`whisper_build.release.engine_build.gpu.tensorrt_llm_version`), else
    ``$WHISPER_TRTLLM_VERSION``; ``None`` when neither is known.
    """
    return tensorrt_llm_version() or os.environ.get(TRTLLM_VERSION_ENV, "").strip() or None


def _resolve_version(target: PreflightTarget, node_arch: str) -> Path:
    """The version folder ``current.json`` points at; raises :class:`PreflightError` naming the fix."""
    root = target.model_dir
    if not root.is_dir() or not any(root.iterdir()):
        raise PreflightError(
            f"the model repository mounted at {root} is empty: nothing is published for {node_arch}\n"
            + _fix_lines(target, node_arch)
        )
    pointer = root / storage.POINTER_FILE
    try:
        version = json.loads(pointer.read_text(encoding="utf-8"))["version"]
    except FileNotFoundError:
        raise PreflightError(
            f"{pointer} is missing: {target.prefix_uri(node_arch)} has files but no published version\n"
            + _fix_lines(target, node_arch)
        ) from None
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise PreflightError(
            f'{pointer} is not {{"version": "<version>"}} ({err}); republish it\n' + _fix_lines(target, node_arch)
        ) from None
    folder = root / str(version)
    if not str(version) or "/" in str(version) or not folder.is_dir():
        raise PreflightError(
            f"{pointer} points at version '{version}' but {target.prefix_uri(node_arch)}{version}/ does not exist\n"
            + _fix_lines(target, node_arch)
        )
    return folder


def _check_manifest(
    target: PreflightTarget, manifest: EngineManifest, folder: Path, node_arch: str, image: str | None
) -> None:
    where = f"{target.prefix_uri(manifest.gpu_arch)}{folder.name}/"
    if manifest.gpu_arch != node_arch:
        raise PreflightError(
            f"GPU architecture mismatch: the engine at {where} was built for {manifest.gpu_arch} "
            f"({manifest.gpu_name}, compute capability {manifest.compute_capability}) but this node's GPU is "
            f"{node_arch}; a TensorRT engine only runs on the architecture it was built for\n"
            + _fix_lines(target, node_arch)
        )
    if manifest.mig_profile != target.mig_profile:
        built, here = (f"MIG profile {p}" if p else "a whole GPU" for p in (manifest.mig_profile, target.mig_profile))
        raise PreflightError(
            f"MIG profile mismatch: the engine at {where} was built for {built} but this pod runs on {here}; "
            "an engine is sized to the memory it was built for\n" + _fix_lines(target, node_arch)
        )
    if manifest.model != target.model:
        raise PreflightError(
            f"model mismatch: the engine at {where} is Whisper '{manifest.model}' but the deployment serves "
            f"'{target.model}'\n" + _fix_lines(target, node_arch)
        )
    if manifest.engine != "tensorrt_llm":
        raise PreflightError(
            f"the version at {where} is a {manifest.engine} build, not a TensorRT-LLM engine\n"
            + _fix_lines(target, node_arch)
        )
    if image is None:
        raise PreflightError(
            f"cannot tell this image's TensorRT-LLM version: set {TRTLLM_VERSION_ENV} in the image "
            "or install the tensorrt_llm package"
        )
    if manifest.tensorrt_llm_version != image:
        raise PreflightError(
            f"TensorRT-LLM version mismatch: the engine at {where} was built with TensorRT-LLM "
            f"{manifest.tensorrt_llm_version} but this image has {image}; engines only load with the "
            "TensorRT-LLM version that built them (rebuild with this image)\n" + _fix_lines(target, node_arch)
        )
    repository = folder / storage.MODEL_REPOSITORY_DIR
    if not repository.is_dir():
        raise PreflightError(f"{where}{storage.MODEL_REPOSITORY_DIR}/ is missing\n" + _fix_lines(target, node_arch))


def run_preflight(
    target: PreflightTarget,
    *,
    compute_capability: Callable[[], str] = query_compute_capability,
    trtllm_version: Callable[[], str | None] = image_trtllm_version,
) -> PreflightResult:
    """Check that ``target.model_dir`` holds an engine this node and image can serve.

    Args:
        target: What the pod serves and where it is mounted.
        compute_capability: Returns the node GPU's compute capability (``"8.9"``); defaults to nvidia-smi.
        trtllm_version: Returns the image's TensorRT-LLM version, or ``None`` when unknown.

    Returns:
        The version's Triton model repository (``<model_dir>/<version>/model_repository``); for
        the ``ctranslate2`` fallback no repository and the CTranslate2 folder as ``model_path``.

    Raises:
        PreflightError: the repository is empty, the pointer or manifest is missing/invalid, or the
            manifest's GPU architecture, model, engine or TensorRT-LLM version does not match;
            for ctranslate2, a file of :data:`settings.storage.CTRANSLATE2_REQUIRED_FILES` is missing.
        ValueError: ``target.engine`` is not one of :data:`ENGINES`.
    """
    if target.engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got '{target.engine}'")
    if target.engine == "ctranslate2":
        return _check_ctranslate2(target)
    try:
        node_arch = arch_for_compute_capability(compute_capability())
    except ValueError as err:
        raise PreflightError(f"cannot read this node's GPU compute capability: {err}") from err
    if target.select_engine:
        # one mount for every GPU type: this node's folder is the engine to serve
        selected = target.model_dir / target.engine_target(node_arch)
        target = dataclasses.replace(target, model_dir=selected, gpu_arch=node_arch, select_engine=False)
    elif target.gpu_arch is not None and target.gpu_arch != node_arch:
        raise PreflightError(
            f"this pod mounts {target.prefix_uri(target.gpu_arch)} (GPU group '{target.gpu_group or '?'}' is "
            f"{target.gpu_arch}) but landed on a {node_arch} GPU: the node's labels do not match its GPU; check "
            "the KubernetesConfig labels of the HyperPod instance group and the group's instance_type"
        )
    folder = _resolve_version(target, node_arch)
    try:
        manifest = read_manifest(folder)
    except ManifestError as err:
        raise PreflightError(
            f"{target.prefix_uri(node_arch)}{folder.name}/{storage.MANIFEST_FILE}: {err}\n"
            + _fix_lines(target, node_arch)
        ) from err
    _check_manifest(target, manifest, folder, node_arch, trtllm_version())
    return PreflightResult(
        f"ok: {target.prefix_uri(node_arch)}{folder.name}/ is a {manifest.gpu_arch} TensorRT-LLM "
        f"{manifest.tensorrt_llm_version} engine of {manifest.model}",
        folder / storage.MODEL_REPOSITORY_DIR,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 check failed, 2 bad arguments)."""
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.podstart.preflight", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model-dir", type=Path, required=True, help="mount point of models/<model>/<gpu_arch>/")
    parser.add_argument("--model", required=True, help="Whisper model name, e.g. large-v3-turbo")
    parser.add_argument("--bucket", required=True, help="model bucket name (for messages)")
    parser.add_argument("--engine", choices=ENGINES, default="tensorrt_llm", help="the group's serving_engine")
    parser.add_argument("--gpu-group", default="", help="GPU group name (for messages)")
    parser.add_argument("--gpu-arch", default=None, help="architecture of the mounted prefix, e.g. sm86")
    parser.add_argument("--build-command", default=None, help="exact engine build command (for messages)")
    parser.add_argument("--mig-profile", default=None, help="MIG profile of the pod's slice, e.g. 1g.10gb")
    parser.add_argument(
        "--select-engine",
        action="store_true",
        help="--model-dir is models/<model>/ (every GPU type); serve the folder of this node's GPU",
    )
    parser.add_argument("--compute-capability", default=None, help="override nvidia-smi, e.g. 8.9 (tests)")
    parser.add_argument(
        "--write-model-repository",
        type=Path,
        default=None,
        help="write the resolved Triton model repository path to this file (read by the supervisor)",
    )
    parser.add_argument(
        "--exec",
        dest="exec_argv",
        nargs=argparse.REMAINDER,
        default=None,
        help="after a passed check, replace this process with the rest of the command line (e.g. the "
        "supervisor); for containers that cannot have an init container, such as the inference operator's worker",
    )
    args = parser.parse_args(argv)
    if args.exec_argv is not None and not args.exec_argv:
        parser.error("--exec needs a command")
    target = PreflightTarget(
        args.model_dir,
        args.model,
        args.bucket,
        args.engine,
        args.gpu_group,
        args.gpu_arch,
        args.build_command,
        args.mig_profile,
        args.select_engine,
    )
    capability = (lambda: args.compute_capability) if args.compute_capability else query_compute_capability
    try:
        result = run_preflight(target, compute_capability=capability)
    except PreflightError as err:
        print(f"preflight FAILED: {err}", file=sys.stderr)
        return 1
    if args.write_model_repository is not None:
        args.write_model_repository.parent.mkdir(parents=True, exist_ok=True)
        args.write_model_repository.write_text(str(result.model_repository or ""), encoding="utf-8")
    print(f"preflight {result.message}", flush=True)
    if args.exec_argv:
        os.execvp(args.exec_argv[0], args.exec_argv)  # noqa: S606 (the container's own command line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
