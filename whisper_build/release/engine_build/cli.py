"""``python -m whisper_build.release.engine_build``: build, smoke-test, lay out and (optionally) publish.

Runs on the GPU the engines are for (a Kubernetes Job on the target HyperPod group, or a CodeBuild
GPU fleet). Steps: check the GPU → fetch the checkpoint → ``convert_checkpoint.py`` →
``trtllm-build`` encoder and decoder → Triton model repository → smoke test → ``manifest.json``
→ publish (``--publish-bucket``). ``--dry-run`` prints the derived flags and commands only.
Docs: docs/engines.md, "Running the build tool by hand".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from settings.schema import WHISPER_MODELS
from whisper_build.release.engine_build import commands, gpu, layout, smoke, trtllm_support
from whisper_build.release.engine_build.spec import (
    BuildSpec,
    BuildSpecError,
    ModelSource,
    build_key,
    derive_spec,
    model_name_for,
    parse_model_source,
)
from whisper_build.release.manifest import EngineManifest, checksum_tree, utc_now, write_manifest


class BuildError(RuntimeError):
    """A build step failed; the message names the step."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m whisper_build.release.engine_build",
        description="Build TensorRT-LLM Whisper engines for THIS machine's GPU, smoke-test them, lay out the "
        "Triton model repository and write manifest.json; optionally publish to S3.",
    )
    src = parser.add_argument_group("model")
    src.add_argument("--model", required=True, help="Hugging Face id, local folder, or s3://bucket/prefix/")
    src.add_argument("--model-name", help="Whisper model name (e.g. large-v3); derived from a Hugging Face id")
    lim = parser.add_argument_group("engine limits (defaults follow the model)")
    lim.add_argument("--max-batch-size", type=int, default=16)
    lim.add_argument("--beam-width", type=int, default=1)
    lim.add_argument("--max-output-len", type=int, default=224, help="tokens per 30 s window, <= 224")
    lim.add_argument("--max-prompt-len", type=int, help="decoder --max_input_len (default: room left in 448)")
    lim.add_argument("--weight-only", choices=["none", "int8", "int4"], default="none")
    lim.add_argument("--dtype", choices=["float16", "bfloat16"], default="float16")
    out = parser.add_argument_group("output")
    out.add_argument("--output-dir", type=Path, required=True, help="new version folder to create")
    out.add_argument("--work-dir", type=Path, help="scratch space (default: a temporary folder)")
    out.add_argument(
        "--image-tag",
        default=os.environ.get("WHISPER_IMAGE_TAG"),
        help="tag of the serving image this build runs in, part of the manifest's build_key "
        "(env WHISPER_IMAGE_TAG; default: the installed TensorRT-LLM version)",
    )
    out.add_argument("--expect-arch", help="fail unless the GPU is this architecture (e.g. sm86)")
    out.add_argument(
        "--mig-profile",
        help="MIG profile this build runs on and is sized for (e.g. 1g.10gb): recorded in the manifest and the "
        "build key, and published under <arch>-<profile>/",
    )
    tools = parser.add_argument_group("tools")
    tools.add_argument(
        "--trtllm-example-dir",
        type=Path,
        default=Path(os.environ.get("TRTLLM_WHISPER_EXAMPLE_DIR", commands.DEFAULT_EXAMPLE_DIR)),
        help="TensorRT-LLM examples/models/core/whisper (env TRTLLM_WHISPER_EXAMPLE_DIR)",
    )
    tools.add_argument("--python", default=sys.executable, help="interpreter for the example scripts")
    tools.add_argument("--trtllm-build", default="trtllm-build")
    chk = parser.add_argument_group("smoke test")
    chk.add_argument(
        "--smoke-clip", type=Path, default=os.environ.get("WHISPER_SMOKE_CLIP"), help="env WHISPER_SMOKE_CLIP"
    )
    chk.add_argument("--smoke-text", default=os.environ.get("WHISPER_SMOKE_TEXT"), help="env WHISPER_SMOKE_TEXT")
    chk.add_argument("--max-wer", type=float, default=smoke.DEFAULT_MAX_WER)
    chk.add_argument("--skip-smoke-test", action="store_true", help="recorded in the manifest's build_flags")
    pubg = parser.add_argument_group("publish")
    pubg.add_argument("--publish-bucket", help="publish to this model bucket after a successful build")
    pubg.add_argument("--version", help="version name (default: UTC time)")
    parser.add_argument("--dry-run", action="store_true", help="print derived flags and commands, run nothing")
    return parser


def resolve_model_name(source: ModelSource, given: str | None) -> str:
    """``--model-name``, or the name of a known Hugging Face id.

    Raises:
        BuildSpecError: neither available, or both given and contradicting.
    """
    derived = model_name_for(source.location) if source.kind == "hf" else None
    if given and derived and given != derived:
        raise BuildSpecError(f"--model-name {given} contradicts --model {source.location} ({derived})")
    name = given or derived
    if name is None:
        raise BuildSpecError(f"--model-name is required for {source.location} (e.g. --model-name large-v3)")
    return name


def spec_from_args(args: argparse.Namespace, source: ModelSource) -> BuildSpec:
    """The :class:`BuildSpec` the parsed command line asks for.

    Raises:
        BuildSpecError: unknown model name or limits outside Whisper's.
    """
    return derive_spec(
        resolve_model_name(source, args.model_name),
        max_batch_size=args.max_batch_size,
        beam_width=args.beam_width,
        max_output_len=args.max_output_len,
        weight_only=args.weight_only,
        dtype=args.dtype,
        max_prompt_len=args.max_prompt_len,
    )


def serving_image_identity(image_tag: str | None, trtllm_version: str | None) -> str:
    """What ties the engine to its TensorRT-LLM version in :func:`build_key`.

    The serving image tag when given, else ``tensorrt_llm==<installed version>`` (``unknown`` when not
    installed).
    """
    return image_tag or f"tensorrt_llm=={trtllm_version or 'unknown'}"


def checkpoint_inputs(folder: Path, model_name: str) -> tuple[Path | None, str | None]:
    """(folder with ``<name>.pt``, None) for an OpenAI checkpoint, (None, folder) for a Hugging Face one.

    Raises:
        BuildSpecError: the folder holds neither ``<model_name>.pt`` nor a ``config.json``.
    """
    if (folder / f"{model_name}.pt").is_file():
        return folder, None
    if (folder / "config.json").is_file():
        return None, str(folder)
    raise BuildSpecError(f"{folder} holds neither {model_name}.pt (OpenAI format) nor config.json (Hugging Face)")


def _download_s3_prefix(source: ModelSource, target: Path) -> Path:
    import boto3

    bucket, prefix = source.s3_bucket_and_prefix
    s3 = boto3.client("s3")
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            relative = obj["Key"][len(prefix) :]
            if not relative or relative.endswith("/"):
                continue
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, obj["Key"], str(path))
            count += 1
    if count == 0:
        raise BuildSpecError(f"--model {source.location}: no objects under that prefix")
    return target


def tokenizer_origin(source: ModelSource, folder: Path | None, model_name: str) -> Path | str:
    """Where ``tokenizer.json`` comes from: the checkpoint folder, else a Hugging Face repository.

    The checkpoint folder when it holds one, else a Hugging Face repository (the source's own id, so
    fine-tunes keep their tokenizer, or the model's official id for OpenAI ``.pt`` folders).
    """
    if folder is not None and (folder / layout.TOKENIZER_FILE).is_file():
        return folder / layout.TOKENIZER_FILE
    if source.kind == "hf":
        return source.location
    return WHISPER_MODELS[model_name][0]


def _fetch_tokenizer(origin: Path | str, work_dir: Path) -> Path:
    if isinstance(origin, Path):
        return origin
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(origin, layout.TOKENIZER_FILE, cache_dir=str(work_dir / "hf")))


def _run(step: commands.Step) -> None:
    print(f"==> {step.name}: {' '.join(step.argv)}", flush=True)
    try:
        subprocess.run(step.argv, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"step {step.name} failed: {exc}") from exc


def build(args: argparse.Namespace, spec: BuildSpec, source: ModelSource, work_dir: Path) -> Path:
    """Run the whole build into ``args.output_dir``; returns the version folder."""
    gpu_info = gpu.query_gpu()
    print(f"GPU: {gpu_info.name} (compute capability {gpu_info.compute_capability}, {gpu_info.arch})", flush=True)
    if args.expect_arch and gpu_info.arch != args.expect_arch:
        raise BuildError(f"this node's GPU is {gpu_info.arch}, expected {args.expect_arch}: wrong node selected")
    started = utc_now()
    paths = commands.BuildPaths(work_dir)
    local: Path | None = None
    if source.kind == "s3":
        local = _download_s3_prefix(source, work_dir / "source")
    elif source.kind == "local":
        local = Path(source.location)
    openai_dir, hf_checkpoint = checkpoint_inputs(local, spec.model_name) if local else (None, source.location)
    for step in commands.build_plan(
        spec, paths, openai_checkpoint_dir=openai_dir, hf_checkpoint=hf_checkpoint, python=args.python,
        example_dir=args.trtllm_example_dir, trtllm_build=args.trtllm_build,
    ):  # fmt: skip
        _run(step)
    engine_dir = layout.layout_repository(
        args.output_dir,
        engine_dir=paths.engine_dir,
        tokenizer_json=_fetch_tokenizer(tokenizer_origin(source, local, spec.model_name), work_dir),
        spec=spec,
    )
    flags = spec.build_flags(args.mig_profile) | {"smoke_test": "skipped" if args.skip_smoke_test else "passed"}
    if not args.skip_smoke_test:
        # Same parameters and path resolution as the Triton model (relative to the model folder).
        params = layout.engine_params(spec).relative_to(engine_dir.parent)
        transcript = smoke.transcribe_clip(params, args.smoke_clip)
        result = smoke.judge(transcript, args.smoke_text, args.max_wer)
        print(f"smoke test passed: WER {result.wer:.2f}: {result.transcript!r}", flush=True)
        flags["smoke_test_wer"] = round(result.wer, 4)
    flags["build_seconds"] = int((utc_now() - started).total_seconds())
    trtllm_version = gpu.tensorrt_llm_version()
    manifest = EngineManifest(
        model=spec.model_name,
        engine="tensorrt_llm",
        tensorrt_llm_version=trtllm_version,
        cuda_version=gpu.cuda_version(),
        gpu_name=gpu_info.name,
        compute_capability=gpu_info.compute_capability,
        gpu_arch=gpu_info.arch,
        mig_profile=args.mig_profile,
        build_flags=flags,
        build_key=build_key(
            args.model, serving_image_identity(args.image_tag, trtllm_version), spec.build_flags(args.mig_profile)
        ),
        files=checksum_tree(args.output_dir),
        built_at=utc_now(),
    )
    print(f"wrote {write_manifest(manifest, args.output_dir)}", flush=True)
    return args.output_dir


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status.

    2 for bad options; 1 for a failed build or an image whose TensorRT-LLM has no TensorRT-engine
    builder (:mod:`.trtllm_support`).
    """
    args = _parser().parse_args(argv)
    try:
        source = parse_model_source(args.model)
        spec = spec_from_args(args, source)
        if not args.skip_smoke_test and not args.dry_run and (args.smoke_clip is None or not args.smoke_text):
            raise BuildSpecError(
                "give --smoke-clip and --smoke-text (or env WHISPER_SMOKE_CLIP/_TEXT), or --skip-smoke-test"
            )
    except BuildSpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    refusal = trtllm_support.engine_builder_refusal(gpu.tensorrt_llm_version())
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 1
    if args.dry_run:
        paths = commands.BuildPaths(args.work_dir or Path("<work-dir>"))
        hf = source.location if source.kind == "hf" else "<checkpoint>"
        plan = commands.build_plan(
            spec, paths, openai_checkpoint_dir=None, hf_checkpoint=hf, python=args.python,
            example_dir=args.trtllm_example_dir, trtllm_build=args.trtllm_build,
        )  # fmt: skip
        image = serving_image_identity(args.image_tag, gpu.tensorrt_llm_version())
        flags = spec.build_flags(args.mig_profile)
        key = build_key(args.model, image, flags)
        print(json.dumps({"build_flags": flags, "build_key": key, "commands": [s.argv for s in plan]}, indent=2))
        return 0
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="engine-build-"))
    try:
        version_dir = build(args, spec, source, work_dir)
        if args.publish_bucket:
            from whisper_build.release.publish import main as publish_main

            upload = ["upload", str(version_dir), "--bucket", args.publish_bucket]
            return publish_main(upload + (["--version", args.version] if args.version else []))
    except (BuildError, BuildSpecError, gpu.GpuQueryError, layout.LayoutError, smoke.SmokeTestError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.work_dir is None:
            shutil.rmtree(work_dir, ignore_errors=True)
    return 0
