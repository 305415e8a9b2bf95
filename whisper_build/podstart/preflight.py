"""Fail-fast check of the mounted model repository, run as the serving pod's init container.

``python -m whisper_build.podstart.preflight --model-dir /models --model large-v3-turbo --bucket B
--gpu-arch sm86 --build-command "<engine build argv>"`` (the charts pass all of these). Before Triton
starts it checks that the mount (``s3://<bucket>/models/<model>/<gpu_arch>/``, docs/contracts.md §3)
holds a published version whose ``manifest.json`` (§4) fits this model, this node's GPU and this
image's TensorRT-LLM — or, with ``--engine ctranslate2`` / ``torch``, the CTranslate2 conversion or
the Hugging Face checkpoint. Entry points: :func:`main` (exit status 0 ok, 1 check failed, 2 bad
arguments), :func:`run_preflight`, :func:`check_hf_checkpoint`.
Docs: docs/kubernetes.md, "Fail-fast preflight (init container)".
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

from pydantic import TypeAdapter, ValidationError

from settings import storage
from settings.engines import ENGINE_PROFILES, profile
from settings.gpu_catalog import arch_for_compute_capability
from settings.schema import WHISPER_MODELS
from whisper_build.release.engine_build.gpu import GpuQueryError, package_version, query_gpu, tensorrt_llm_version
from whisper_build.release.engine_build.trtllm_support import engine_builder_refusal
from whisper_build.release.manifest import EngineManifest, ManifestError, read_manifest
from whisper_build.serving import contract
from whisper_build.serving.diarization.weights import check_weights

TRTLLM_VERSION_ENV = "WHISPER_TRTLLM_VERSION"
"""Environment variable holding the image's TensorRT-LLM version (set in the serving image)."""

ENGINES: tuple[str, ...] = tuple(ENGINE_PROFILES)
"""``tensorrt_llm``, ``ctranslate2``, ``torch``: the ``serving_engine`` choices of a GPU group."""


VERDICT_PREFIX = "preflight-verdict: "
"""Start of the fixed last line of a failed preflight's output: ``preflight-verdict: <verdict>``.

``make pods`` / ``make deploy`` (:mod:`whisper_build.deploy.pods`) classify a pod on
this line. Kubernetes keeps only the *tail* of a log as the termination message ("the last chunk of
container log output ... limited to 2048 bytes or 80 lines, whichever is smaller", Kubernetes docs,
"Determine the Reason for Pod Failure", ``terminationMessagePolicy: FallbackToLogsOnError``), so
the verdict is the last line, not the first; the preflight also writes the message itself
(:data:`TERMINATION_LOG`) for containers without that policy."""
VERDICT_WAITING = "waiting-for-publish"
"""Verdict of a failure that only means nothing is published here yet (:class:`NotYetPublished`: an empty
engine prefix, a prefix without ``current.json``, a missing CTranslate2 conversion or Hugging Face
checkpoint), the normal state of a first deploy until the engine builds (or you) publish."""
VERDICT_FAILED = "failed"
"""Verdict of every other failure: a real mismatch to fix."""
TERMINATION_LOG = Path("/dev/termination-log")
"""Kubernetes' default ``terminationMessagePath``; its content becomes the container's termination
message. Written only when it exists (the kubelet provides it in a container)."""
TERMINATION_MESSAGE_BYTES = 4096
"""The kubelet truncates termination messages longer than 4096 bytes (same Kubernetes page)."""


def read_verdict(output: str) -> str | None:
    """The verdict of the last ``preflight-verdict:`` line in ``output`` (a log tail or termination message)."""
    lines = [line.strip() for line in output.splitlines() if line.strip().startswith(VERDICT_PREFIX)]
    return lines[-1].removeprefix(VERDICT_PREFIX) if lines else None


def termination_message(failure: str, said: str, limit: int = TERMINATION_MESSAGE_BYTES) -> str:
    """``failure`` then the verdict line of ``said``, cut in the middle when needed so the whole fits ``limit`` bytes."""
    last = f"{VERDICT_PREFIX}{said}\n"
    room = limit - len(last.encode()) - len(" …\n".encode())
    encoded = failure.encode()
    if len(encoded) + 1 > room:
        failure = encoded[:room].decode(errors="ignore").rstrip() + " …"
    return f"{failure}\n{last}"


def _write_termination_log(path: Path, message: str) -> None:
    if not path.exists():
        return
    try:
        path.write_text(message, encoding="utf-8")
    except OSError as err:
        print(f"(cannot write the termination message to {path}: {err})", file=sys.stderr)


class PreflightError(Exception):
    """The mounted model repository cannot be served on this node; the message says how to fix it."""


class NotYetPublished(PreflightError):
    """Nothing is published at the mounted prefix yet: the normal state of a first deploy.

    No engine, no ``current.json``, no CTranslate2 conversion, an empty checkpoint folder; its
    verdict line is :data:`VERDICT_WAITING`.
    """


@dataclass(frozen=True)
class PreflightTarget:
    """What this pod is about to serve.

    Attributes:
        model_dir: Mount point of ``models/<model>/<gpu_arch>/`` (``models/<model>/hf/`` for ``torch``).
        model: Whisper model name (``config.model.name``), e.g. ``large-v3-turbo``.
        bucket: Model bucket name, used only in messages (``s3://<bucket>/<prefix>``).
        engine: ``tensorrt_llm``, ``ctranslate2`` or ``torch`` (the GPU group's ``serving_engine``).
        gpu_group: GPU group name, used only in messages.
        gpu_arch: Architecture of the mounted prefix (the group's), e.g. ``sm86``; ``None`` skips
            the node-placement check.
        build_command: The exact command that builds and publishes this architecture's engine
            (the charts pass the engine-build Job's argv); ``None`` derives a generic one.
        mig_profile: MIG profile of the slice the pod runs on (e.g. ``1g.10gb``), ``None`` for a whole GPU.
        select_engine: ``model_dir`` is the model's root prefix; use its ``<node_arch>[-<profile>]/`` folder.
        region: AWS region of the bucket (``config.region``), added as ``--region`` to the upload
            commands the messages print, so they work from a workstation set to another region.
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
    region: str | None = None

    def engine_target(self, gpu_arch: str) -> str:
        """``sm86``, or ``sm90-1g.10gb`` on a MIG slice (:func:`settings.storage.engine_target`)."""
        return storage.engine_target(gpu_arch, self.mig_profile)

    def prefix_uri(self, gpu_arch: str) -> str:
        """``s3://<bucket>/models/<model>/<engine target>/``."""
        return f"s3://{self.bucket}/{storage.model_prefix(self.model, self.engine_target(gpu_arch))}"

    def ctranslate2_uri(self, gpu_arch: str) -> str:
        """``s3://<bucket>/models/<model>/<engine target>/ctranslate2/``."""
        return f"s3://{self.bucket}/{storage.ctranslate2_prefix(self.model, self.engine_target(gpu_arch))}"

    @property
    def region_args(self) -> list[str]:
        """``["--region", region]`` for AWS CLI commands, or nothing when the region is not known."""
        return ["--region", self.region] if self.region else []

    @property
    def hf_checkpoint_uri(self) -> str:
        """``s3://<bucket>/models/<model>/hf/``: the Hugging Face checkpoint of ``torch`` groups."""
        return f"s3://{self.bucket}/{storage.hf_checkpoint_prefix(self.model)}"


@dataclass(frozen=True)
class PreflightResult:
    """A passed check.

    Attributes:
        message: One line for the pod log.
        model_repository: The version's Triton model repository (``None`` for ctranslate2: the
            supervisor renders one from ``WHISPER_TRITON_ENGINE__*``).
        model_path: The model folder the pod serves: the CTranslate2 conversion (ctranslate2; the charts
            set ``WHISPER_TRITON_ENGINE__MODEL_PATH`` to the same :func:`ctranslate2_model_dir`) or the
            Hugging Face checkpoint, the mount itself (torch); ``None`` for tensorrt_llm.
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
        shlex.join(["aws", "s3", "sync", local, target.ctranslate2_uri(gpu_arch), *target.region_args]),
    ]  # fmt: skip


def _check_ctranslate2(target: PreflightTarget) -> PreflightResult:
    """The ctranslate2 fallback: the conversion must be in the mount (never the bundled tiny.en)."""
    arch = target.gpu_arch or "<gpu_arch>"
    folder = ctranslate2_model_dir(target.model_dir)
    uri = target.ctranslate2_uri(arch)
    missing = [name for name in storage.CTRANSLATE2_REQUIRED_FILES if not (folder / name).is_file()]
    if missing:
        commands = "\n".join(f"              {line}" for line in ctranslate2_publish_commands(target, arch))
        raise NotYetPublished(
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


def hf_publish_commands(target: PreflightTarget) -> list[str]:
    """Shell commands that publish a Hugging Face Whisper checkpoint for ``torch`` groups.

    A fine-tune: the folder ``save_pretrained`` wrote for the model and the processor (its
    ``tokenizer.json``). The base model: a download of its Hugging Face repository (``hf download``,
    huggingface_hub's CLI). Either is synced, without pickled ``*.bin`` weights, to
    :attr:`PreflightTarget.hf_checkpoint_uri`.
    """
    hf_id = WHISPER_MODELS.get(target.model, (target.model,))[0]
    local = f"whisper-{target.model}-hf"
    files = [*storage.HF_REQUIRED_FILES, "generation_config.json", "preprocessor_config.json", "*.safetensors*"]
    return [
        f"# a fine-tune of {target.model}: the folder model.save_pretrained() and processor.save_pretrained() wrote; "
        "or the base model:",
        shlex.join(["pip", "install", "huggingface_hub"]),
        shlex.join(["hf", "download", hf_id, "--local-dir", local, "--include", *files]),
        shlex.join([
            "aws", "s3", "sync", local, target.hf_checkpoint_uri, "--exclude", ".cache/*", "--exclude", "*.bin",
            *target.region_args,
        ]),  # fmt: skip
    ]  # fmt: skip


def check_hf_checkpoint(folder: Path, model: str) -> list[str]:
    """What keeps ``folder`` from being a Hugging Face Whisper checkpoint of ``model``'s shape.

    Args:
        folder: The mounted checkpoint (``models/<model>/hf/``).
        model: The configured Whisper model name (``settings.schema.WHISPER_MODELS``); the checkpoint
            must have its mel-bin count (a fine-tune keeps its base model's), so a checkpoint of another
            model size is caught before it is loaded.

    Returns:
        One sentence per problem; empty when the folder can be served. Checked: ``config.json`` is
        JSON with ``model_type`` ``whisper`` and ``num_mel_bins`` of ``model``; ``tokenizer.json``
        exists; the weights are ``model.safetensors``, or ``model.safetensors.index.json`` whose
        ``weight_map`` names shards that all exist (:data:`settings.storage.HF_WEIGHT_FILES`); pickled
        ``*.bin`` weights are refused (``torch.load`` of a pickle can run code).
    """
    problems = [f"{name} is missing" for name in storage.HF_REQUIRED_FILES if not (folder / name).is_file()]
    config_file = folder / "config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            problems.append(f"config.json is not JSON ({err})")
            config = {}
        if not isinstance(config, dict):
            problems.append("config.json is not a JSON object")
            config = {}
        if config and config.get("model_type") != "whisper":
            problems.append(f"config.json has model_type {config.get('model_type')!r}, not 'whisper'")
        expected_mels = WHISPER_MODELS[model][1] if model in WHISPER_MODELS else None
        if config.get("model_type") == "whisper" and expected_mels and config.get("num_mel_bins") != expected_mels:
            problems.append(
                f"config.json has num_mel_bins {config.get('num_mel_bins')}, but {model} (and a fine-tune of it) "
                f"has {expected_mels}: this is a checkpoint of another Whisper model"
            )
    single, index = (folder / name for name in storage.HF_WEIGHT_FILES)
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, AttributeError) as err:
            problems.append(f"{index.name} has no readable weight_map ({err})")
        else:
            missing = [shard for shard in shards if "/" in shard or not (folder / shard).is_file()]
            if missing or not shards:
                problems.append(f"{index.name} names shards that are missing: {', '.join(missing) or '(none listed)'}")
    elif not single.is_file():
        pickled = sorted(path.name for path in folder.glob("*.bin")) if folder.is_dir() else []
        problems.append(
            f"no safetensors weights ({' or '.join(storage.HF_WEIGHT_FILES)})"
            + (
                f"; {', '.join(pickled)} (pickled PyTorch weights) is refused: loading a pickle can run code, "
                "re-save with model.save_pretrained(folder, safe_serialization=True)"
                if pickled
                else ""
            )
        )
    return problems


def _check_torch(target: PreflightTarget) -> PreflightResult:
    """The torch engine: the mount must be a Hugging Face Whisper checkpoint of the configured model."""
    folder = target.model_dir
    uri = target.hf_checkpoint_uri
    group = target.gpu_group or "?"
    empty = not folder.is_dir() or not any(folder.iterdir())
    problems = ["the folder is empty"] if empty else check_hf_checkpoint(folder, target.model)
    if problems:
        commands = "\n".join(f"              {line}" for line in hf_publish_commands(target))
        raise (NotYetPublished if empty else PreflightError)(
            f"serving_engine is torch for GPU group '{group}' but {folder} (mounted from {uri}) is not a Hugging "
            f"Face Whisper checkpoint of {target.model}: {'; '.join(problems)}\n"
            f"  expected: config.json, tokenizer.json and model.safetensors (or model.safetensors.index.json and "
            f"its shards) under {uri}\n"
            f"  fix:      publish the checkpoint once (it serves every GPU type), then restart the pods:\n"
            f"{commands}"
        )
    return PreflightResult(
        f"ok: serving_engine is torch for GPU group '{group}': serving the Hugging Face checkpoint of "
        f"{target.model} from {uri} (mounted at {folder})",
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
        "(docs/kubernetes.md)\n"
        f"  or serve a Hugging Face checkpoint with no build: set serving_engine: torch on GPU group '{group}' "
        f"after publishing it to {target.hf_checkpoint_uri} (docs/engines.md)"
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
        raise NotYetPublished(
            f"the model repository mounted at {root} is empty: nothing is published for {node_arch}\n"
            + _fix_lines(target, node_arch)
        )
    pointer = root / storage.POINTER_FILE
    try:
        version = json.loads(pointer.read_text(encoding="utf-8"))["version"]
    except FileNotFoundError:
        raise NotYetPublished(
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
    if manifest.engine != target.engine:
        raise PreflightError(
            f"the version at {where} is a {manifest.engine} build, not a {profile(target.engine).title} engine\n"
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
    speaker: bool = True,
) -> PreflightResult:
    """Check that ``target.model_dir`` holds an engine this node and image can serve.

    Args:
        target: What the pod serves and where it is mounted.
        speaker: Triton loads the ``speaker`` model (``WHISPER_TRITON_SPEAKER__ENABLED``, default true).
        compute_capability: Returns the node GPU's compute capability (``"8.9"``); defaults to nvidia-smi.
        trtllm_version: Returns the image's TensorRT-LLM version, or ``None`` when unknown.

    Returns:
        The version's Triton model repository (``<model_dir>/<version>/model_repository``); for
        the ``ctranslate2`` fallback no repository and the CTranslate2 folder as ``model_path``; for
        ``torch`` no repository and the checkpoint folder (the mount) as ``model_path``.

    Raises:
        PreflightError: the image's TensorRT-LLM has no TensorRT-engine builder any more
            (:func:`~whisper_build.release.engine_build.trtllm_support.engine_builder_refusal`),
            the repository is empty, the pointer or manifest is missing/invalid, or the
            manifest's GPU architecture, model, engine or TensorRT-LLM version does not match;
            for ctranslate2, a file of :data:`settings.storage.CTRANSLATE2_REQUIRED_FILES` is missing;
            for torch, the mount is not a checkpoint of the model (:func:`check_hf_checkpoint`).
            Also: a speaker-model weight file differs from its pin; with ``speaker``, a published
            repository without the ``speaker`` model (built before it existed).
        ValueError: ``target.engine`` is not one of :data:`ENGINES`.

    Checks, in order: the speaker model's weight files match their sha256 pins
    (:func:`whisper_build.serving.diarization.weights.check_weights`); an image whose TensorRT-LLM is newer than the last release with the
    TensorRT-engine backend (1.3.0rc20, :mod:`whisper_build.release.engine_build.trtllm_support`) is
    refused first, naming that version and ``serving_engine: torch`` as the way out; then (1) the mount
    is not empty and ``current.json`` names a version folder that exists; (2) that version's
    ``manifest.json`` is a TensorRT-LLM build of the configured model; (3) its ``gpu_arch`` equals this
    node's GPU (``nvidia-smi --query-gpu=name,compute_cap``): TensorRT engines only run on the compute
    capability they were built for; (4) its ``tensorrt_llm_version`` equals the image's ("engines are
    not portable across TensorRT-LLM versions", TensorRT-LLM docs, ``trtllm-build``). With a MIG
    profile the engine target is ``<gpu_arch>-<profile>`` (``settings.storage.engine_target``) and the
    manifest must name the same profile. With ``select_engine`` the mount is ``models/<model>/`` (one
    volume for every GPU type, as the HyperPod inference operator mounts it) and the folder of this
    node's GPU, ``<node_arch>[-<profile>]/``, is selected first. ``ctranslate2``: no TensorRT-LLM
    engine, but the conversion under ``models/<model>/<gpu_arch>/ctranslate2/``
    (:data:`settings.storage.CTRANSLATE2_REQUIRED_FILES`); ``torch``: the checkpoint under
    ``models/<model>/hf/``, checked by :func:`check_hf_checkpoint` (pickled ``pytorch_model.bin`` is
    refused: loading a pickle runs code).
    """
    if speaker_problems := check_weights():  # Triton's speaker model (diarization), whatever the engine
        raise PreflightError("speaker model weights: " + "; ".join(speaker_problems))
    layout = profile(target.engine).layout
    if layout == "conversion":
        return _check_ctranslate2(target)
    if layout == "checkpoint":
        return _check_torch(target)
    image = trtllm_version()
    refusal = engine_builder_refusal(image)
    if refusal is not None:
        raise PreflightError(refusal)
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
    _check_manifest(target, manifest, folder, node_arch, image)
    speaker_model = folder / storage.MODEL_REPOSITORY_DIR / contract.SPEAKER_MODEL
    if speaker and not (speaker_model / "config.pbtxt").is_file():
        raise PreflightError(
            f"{target.prefix_uri(node_arch)}{folder.name}/{storage.MODEL_REPOSITORY_DIR}/ has no "
            f"{contract.SPEAKER_MODEL} model (published before diarization moved into Triton): publish the "
            "engine again with this release, or set WHISPER_TRITON_SPEAKER__ENABLED=false (no speakers)"
        )
    return PreflightResult(
        f"ok: {target.prefix_uri(node_arch)}{folder.name}/ is a {manifest.gpu_arch} TensorRT-LLM "
        f"{manifest.tensorrt_llm_version} engine of {manifest.model}",
        folder / storage.MODEL_REPOSITORY_DIR,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (0 ok, 1 check failed, 2 bad arguments).

    A mismatch prints a message naming the S3 prefix it expected and the command that builds the
    missing engine (or the converter and upload commands), ending with ``preflight-verdict:
    waiting-for-publish`` (nothing published yet) or ``preflight-verdict: failed``
    (:data:`VERDICT_PREFIX`), and writes the same to ``/dev/termination-log`` when the container has
    one. ``--write-model-repository`` writes the repository path (inside the selected folder with
    ``--select-engine``); ``--exec CMD…`` then replaces the process with ``CMD`` (the inference
    operator's worker, which has no init containers, runs ``preflight … --select-engine --exec python3
    -m whisper_build.serving.supervisor``).
    """
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.podstart.preflight", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--model-dir",
        type=Path,
        required=True,
        help="mount point of models/<model>/<gpu_arch>/ (models/<model>/hf/ for --engine torch)",
    )
    parser.add_argument("--model", required=True, help="Whisper model name, e.g. large-v3-turbo")
    parser.add_argument("--bucket", required=True, help="model bucket name (for messages)")
    parser.add_argument("--engine", choices=ENGINES, default="tensorrt_llm", help="the group's serving_engine")
    parser.add_argument("--gpu-group", default="", help="GPU group name (for messages)")
    parser.add_argument("--gpu-arch", default=None, help="architecture of the mounted prefix, e.g. sm86")
    parser.add_argument("--build-command", default=None, help="exact engine build command (for messages)")
    parser.add_argument("--mig-profile", default=None, help="MIG profile of the pod's slice, e.g. 1g.10gb")
    parser.add_argument("--region", default=None, help="AWS region of the bucket (for the upload commands printed)")
    parser.add_argument(
        "--select-engine",
        action="store_true",
        help="--model-dir is models/<model>/ (every GPU type); serve the folder of this node's GPU",
    )
    parser.add_argument("--compute-capability", default=None, help="override nvidia-smi, e.g. 8.9 (tests)")
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=TERMINATION_LOG,
        help="on failure, write the message and its verdict line here when the file exists (Kubernetes' "
        "terminationMessagePath)",
    )
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
        args.region,
    )
    capability = (lambda: args.compute_capability) if args.compute_capability else query_compute_capability
    enabled = os.environ.get("WHISPER_TRITON_SPEAKER__ENABLED", "true")
    try:
        speaker = TypeAdapter(bool).validate_python(enabled)
    except ValidationError:
        parser.error(f"WHISPER_TRITON_SPEAKER__ENABLED={enabled!r}: set true or false")
    try:
        result = run_preflight(target, compute_capability=capability, speaker=speaker)
    except PreflightError as err:
        failure = f"preflight FAILED: {err}"
        said = VERDICT_WAITING if isinstance(err, NotYetPublished) else VERDICT_FAILED
        print(failure, file=sys.stderr)
        print(f"{VERDICT_PREFIX}{said}", file=sys.stderr, flush=True)
        _write_termination_log(args.termination_log, termination_message(failure, said))
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
