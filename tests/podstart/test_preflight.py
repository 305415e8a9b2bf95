"""The serving pod's init-container check (whisper_build/podstart/preflight.py) on real folders."""

from __future__ import annotations

import json
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest

from whisper_build.podstart.preflight import (
    PreflightError,
    PreflightTarget,
    ctranslate2_model_dir,
    main,
    query_compute_capability,
    run_preflight,
)
from whisper_build.release.manifest import EngineManifest, write_manifest
from whisper_build.serving.diarization.weights import WEIGHTS

MODEL = "large-v3-turbo"
BUCKET = "model-bucket-123"
TRTLLM = "0.20.0"


def _publish(
    root: Path,
    *,
    arch: str = "sm89",
    capability: str = "8.9",
    trtllm: str = TRTLLM,
    model: str = MODEL,
    version: str = "20261130T101500Z",
    mig_profile: str | None = None,
    speaker: bool = True,
) -> Path:
    """Lay out what the engine build publishes: pointer, manifest, model repository (``speaker``: with that model)."""
    folder = root / version
    for name in ("whisper", "speaker") if speaker else ("whisper",):
        (folder / "model_repository" / name / "1").mkdir(parents=True)
        (folder / "model_repository" / name / "config.pbtxt").write_text(f'name: "{name}"\n')
    manifest = EngineManifest(
        model=model,
        engine="tensorrt_llm",
        tensorrt_llm_version=trtllm,
        cuda_version="12.8",
        gpu_name="NVIDIA L40S" if arch == "sm89" else "NVIDIA A10G",
        compute_capability=capability,
        gpu_arch=arch,
        mig_profile=mig_profile,
        built_at=datetime(2026, 11, 30, 10, 15, tzinfo=UTC),
    )
    write_manifest(manifest, folder)
    (root / "current.json").write_text(json.dumps({"version": version}))
    return folder


def _target(root: Path, engine: str = "tensorrt_llm") -> PreflightTarget:
    return PreflightTarget(root, MODEL, BUCKET, engine, gpu_group="g6e")


def _run(root: Path, capability: str = "8.9", image: str | None = TRTLLM, engine: str = "tensorrt_llm"):
    return run_preflight(_target(root, engine), compute_capability=lambda: capability, trtllm_version=lambda: image)


BUILD_COMMAND = (
    "python -m whisper_build.release.engine_build --model openai/whisper-large-v3-turbo --model-name large-v3-turbo "
    f"--expect-arch sm89 --output-dir /tmp/whisper-engine --publish-bucket {BUCKET}"
)


def test_empty_folder_fails_naming_prefix_and_build_command(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as err:
        _run(tmp_path)
    message = str(err.value)
    assert f"the model repository mounted at {tmp_path} is empty" in message
    assert f"s3://{BUCKET}/models/{MODEL}/sm89/" in message
    assert BUILD_COMMAND in message
    assert "serving_engine: ctranslate2 on GPU group 'g6e' after publishing" in message
    assert f"s3://{BUCKET}/models/{MODEL}/sm89/ctranslate2/" in message


def test_sm86_engine_on_sm89_node_fails_with_arch_mismatch(tmp_path: Path) -> None:
    _publish(tmp_path, arch="sm86", capability="8.6")
    with pytest.raises(PreflightError) as err:
        _run(tmp_path, capability="8.9")
    message = str(err.value)
    assert "GPU architecture mismatch" in message
    assert "built for sm86 (NVIDIA A10G, compute capability 8.6) but this node's GPU is sm89" in message
    # the prefix it expected is the node's architecture, not the one it found
    assert f"expected: an engine published under s3://{BUCKET}/models/{MODEL}/sm89/" in message
    assert "build and publish it on a sm89 node" in message
    assert BUILD_COMMAND in message


def test_trtllm_version_mismatch_fails(tmp_path: Path) -> None:
    _publish(tmp_path, trtllm="0.19.0")
    with pytest.raises(PreflightError) as err:
        _run(tmp_path, image="0.20.0")
    message = str(err.value)
    assert "TensorRT-LLM version mismatch" in message
    assert "built with TensorRT-LLM 0.19.0 but this image has 0.20.0" in message
    assert BUILD_COMMAND in message


def test_good_repository_passes_and_resolves_the_version(tmp_path: Path) -> None:
    folder = _publish(tmp_path)
    result = _run(tmp_path)
    assert result.model_repository == folder / "model_repository"
    assert result.message == (
        f"ok: s3://{BUCKET}/models/{MODEL}/sm89/{folder.name}/ is a sm89 TensorRT-LLM {TRTLLM} engine of {MODEL}"
    )


def test_a_repository_published_without_the_speaker_model_says_how_to_serve(tmp_path: Path) -> None:
    folder = _publish(tmp_path, speaker=False)
    with pytest.raises(PreflightError, match=r"model_repository/ has no speaker model .*publish the engine again"):
        _run(tmp_path)
    off = run_preflight(
        _target(tmp_path), compute_capability=lambda: "8.9", trtllm_version=lambda: TRTLLM, speaker=False
    )
    assert off.model_repository == folder / "model_repository"


CT2_PREFIX = f"s3://{BUCKET}/models/{MODEL}/sm89/ctranslate2/"


def _ct2_target(root: Path) -> PreflightTarget:
    return PreflightTarget(root, MODEL, BUCKET, "ctranslate2", gpu_group="g6e", gpu_arch="sm89")


def _never_queried() -> str:
    raise AssertionError("the ctranslate2 check must not need nvidia-smi or a TensorRT-LLM engine")


def test_ctranslate2_without_its_converted_model_fails_with_the_commands(tmp_path: Path) -> None:
    # GIVEN a ctranslate2 group whose mount holds only a half-copied conversion (no engine either)
    (tmp_path / "ctranslate2").mkdir()
    (tmp_path / "ctranslate2" / "config.json").write_text("{}")
    with pytest.raises(PreflightError) as err:
        run_preflight(_ct2_target(tmp_path), compute_capability=_never_queried, trtllm_version=_never_queried)
    message = str(err.value)
    # THEN it names what is missing, the S3 prefix it expected, and the exact convert + upload commands
    assert f"{tmp_path / 'ctranslate2'} lacks model.bin, tokenizer.json" in message
    assert f"expected: a CTranslate2 conversion of {MODEL} under {CT2_PREFIX}" in message
    assert (
        f"ct2-transformers-converter --model openai/whisper-{MODEL} --output_dir whisper-{MODEL}-ct2 "
        "--copy_files tokenizer.json preprocessor_config.json --quantization float16\n"
    ) in message
    assert message.endswith(f"aws s3 sync whisper-{MODEL}-ct2 {CT2_PREFIX}")
    assert "'transformers[torch]'" in message


def test_the_upload_command_names_the_bucket_region(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN the region the chart passes (a workstation may default to another one)
    args = ["--model-dir", str(tmp_path), "--model", MODEL, "--bucket", BUCKET, "--engine", "ctranslate2",
            "--gpu-arch", "sm89", "--region", "eu-west-1"]  # fmt: skip
    # WHEN the converted model is missing THEN the printed upload command carries --region
    assert main(args) == 1
    *message, verdict = capsys.readouterr().err.rstrip().splitlines()
    assert message[-1].endswith(f"aws s3 sync whisper-{MODEL}-ct2 {CT2_PREFIX} --region eu-west-1")
    assert verdict == "preflight-verdict: waiting-for-publish"


def test_ctranslate2_with_its_converted_model_passes_and_names_the_served_folder(tmp_path: Path) -> None:
    folder = tmp_path / "ctranslate2"
    folder.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.json", "preprocessor_config.json"):
        (folder / name).write_text("x")
    result = run_preflight(_ct2_target(tmp_path), compute_capability=_never_queried, trtllm_version=_never_queried)
    # the supervisor renders the repository itself; the model folder is the one the charts point it at
    assert result.model_repository is None
    assert result.model_path == ctranslate2_model_dir(tmp_path) == folder
    assert CT2_PREFIX in result.message and result.message.startswith("ok: ")


def test_ctranslate2_cli_writes_no_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    resolved = tmp_path / "run" / "model_repository"
    args = [
        "--model-dir",
        str(tmp_path / "mnt"),
        "--model",
        MODEL,
        "--bucket",
        BUCKET,
        "--engine",
        "ctranslate2",
        "--gpu-group",
        "g6e",
        "--gpu-arch",
        "sm89",
        "--write-model-repository",
        str(resolved),
    ]
    assert main(args) == 1
    assert "preflight FAILED: serving_engine is ctranslate2 for GPU group 'g6e'" in capsys.readouterr().err
    assert not resolved.exists()
    (tmp_path / "mnt" / "ctranslate2").mkdir(parents=True)
    for name in ("model.bin", "config.json", "tokenizer.json"):
        (tmp_path / "mnt" / "ctranslate2" / name).write_text("x")
    assert main(args) == 0
    assert resolved.read_text() == ""


def test_missing_pointer_is_named(tmp_path: Path) -> None:
    _publish(tmp_path)
    (tmp_path / "current.json").unlink()
    with pytest.raises(
        PreflightError, match=r"current\.json is missing: s3://model-bucket-123/models/large-v3-turbo/sm89/ has files"
    ):
        _run(tmp_path)


def test_pointer_to_missing_version_is_named(tmp_path: Path) -> None:
    _publish(tmp_path)
    (tmp_path / "current.json").write_text(json.dumps({"version": "20990101T000000Z"}))
    with pytest.raises(
        PreflightError, match=r"points at version '20990101T000000Z' but .*/sm89/20990101T000000Z/ does not exist"
    ):
        _run(tmp_path)


def test_wrong_model_is_named(tmp_path: Path) -> None:
    _publish(tmp_path, model="large-v3")
    with pytest.raises(PreflightError, match="is Whisper 'large-v3' but the deployment serves 'large-v3-turbo'"):
        _run(tmp_path)


def test_unknown_image_version_is_named(tmp_path: Path) -> None:
    _publish(tmp_path)
    with pytest.raises(PreflightError, match="set WHISPER_TRTLLM_VERSION in the image"):
        _run(tmp_path, image=None)


def test_cli_exit_status_and_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "--model-dir",
        str(tmp_path),
        "--model",
        MODEL,
        "--bucket",
        BUCKET,
        "--gpu-group",
        "g6e",
        "--compute-capability",
        "8.9",
    ]
    assert main(args) == 1
    assert "preflight FAILED: the model repository mounted at" in capsys.readouterr().err

    folder = _publish(tmp_path)
    monkeypatch.setenv("WHISPER_TRTLLM_VERSION", TRTLLM)
    resolved = tmp_path / "run" / "model_repository"
    assert main([*args, "--write-model-repository", str(resolved)]) == 0
    assert capsys.readouterr().out.startswith("preflight ok: ")
    assert resolved.read_text() == str(folder / "model_repository")

    monkeypatch.setenv("WHISPER_TRTLLM_VERSION", "0.21.0")
    assert main(args) == 1
    assert "this image has 0.21.0" in capsys.readouterr().err


def test_nvidia_smi_is_queried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=name,compute_cap" ] && echo "NVIDIA A10G, 8.6"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert query_compute_capability() == "8.6"

    fake.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    with pytest.raises(PreflightError, match=r"nvidia-smi failed \(9\): NVIDIA-SMI has failed"):
        query_compute_capability()

    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(PreflightError, match="nvidia-smi not found"):
        query_compute_capability()


def test_the_charts_build_command_is_quoted_verbatim(tmp_path: Path) -> None:
    command = (
        "python -m whisper_build.release.engine_build --model openai/whisper-large-v3-turbo --expect-arch sm89 ..."
    )
    target = PreflightTarget(tmp_path, MODEL, BUCKET, gpu_group="g6e", gpu_arch="sm89", build_command=command)
    with pytest.raises(PreflightError) as err:
        run_preflight(target, compute_capability=lambda: "8.9", trtllm_version=lambda: TRTLLM)
    assert f"              {command}\n" in str(err.value)


def test_pod_on_a_node_of_another_architecture_is_named(tmp_path: Path) -> None:
    _publish(tmp_path, arch="sm86", capability="8.6")
    target = PreflightTarget(tmp_path, MODEL, BUCKET, gpu_group="g5", gpu_arch="sm86")
    with pytest.raises(
        PreflightError,
        match=(
            r"this pod mounts s3://model-bucket-123/models/large-v3-turbo/sm86/ \(GPU group 'g5' is sm86\) "
            r"but landed on a sm89 GPU: the node's labels do not match its GPU"
        ),
    ):
        run_preflight(target, compute_capability=lambda: "8.9", trtllm_version=lambda: TRTLLM)


def test_unreadable_manifest_is_named(tmp_path: Path) -> None:
    folder = _publish(tmp_path)
    (folder / "manifest.json").write_text("{not json")
    with pytest.raises(PreflightError, match=rf"sm89/{folder.name}/manifest\.json: manifest is not valid JSON"):
        _run(tmp_path)


def _fake_nvidia_smi(folder: Path, line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``nvidia-smi`` on PATH that answers the compute-capability query with ``line``."""
    fake = folder / "nvidia-smi"
    fake.write_text(f'#!/bin/sh\n[ "$1" = "--query-gpu=name,compute_cap" ] && echo "{line}"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(folder))


def _select_args(root: Path, resolved: Path) -> list[str]:
    return [
        "--model-dir", str(root), "--model", MODEL, "--bucket", BUCKET, "--select-engine",
        "--write-model-repository", str(resolved),
    ]  # fmt: skip


def test_select_engine_on_an_sm86_node_serves_the_sm86_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the model's root prefix holding engines for two architectures (one mount for every GPU type)
    root = tmp_path / "models" / MODEL
    sm86 = _publish(root / "sm86", arch="sm86", capability="8.6")
    _publish(root / "sm89", arch="sm89", capability="8.9")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_nvidia_smi(bin_dir, "NVIDIA A10G, 8.6", monkeypatch)
    monkeypatch.setenv("WHISPER_TRTLLM_VERSION", TRTLLM)
    resolved = tmp_path / "run" / "model_repository"
    # WHEN the pod starts on an A10G node
    assert main(_select_args(root, resolved)) == 0
    # THEN it serves the sm86 engine, found through nvidia-smi
    assert resolved.read_text() == str(sm86 / "model_repository")
    assert f"s3://{BUCKET}/models/{MODEL}/sm86/{sm86.name}/ is a sm86 TensorRT-LLM" in capsys.readouterr().out


def test_select_engine_for_an_architecture_without_engine_fails_with_the_fix_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "models" / MODEL
    _publish(root / "sm86", arch="sm86", capability="8.6")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_nvidia_smi(bin_dir, "NVIDIA H200, 9.0", monkeypatch)  # an H200 node: no sm90 engine published
    monkeypatch.setenv("WHISPER_TRTLLM_VERSION", TRTLLM)
    resolved = tmp_path / "run" / "model_repository"
    assert main(_select_args(root, resolved)) == 1
    err = capsys.readouterr().err
    assert f"the model repository mounted at {root / 'sm90'} is empty: nothing is published for sm90" in err
    assert f"expected: an engine published under s3://{BUCKET}/models/{MODEL}/sm90/" in err
    assert (
        "python -m whisper_build.release.engine_build --model openai/whisper-large-v3-turbo --model-name "
        f"large-v3-turbo --expect-arch sm90 --output-dir /tmp/whisper-engine --publish-bucket {BUCKET}"
    ) in err
    assert not resolved.exists()


def test_select_engine_on_a_mig_slice_picks_the_profile_folder(tmp_path: Path) -> None:
    root = tmp_path / "models" / MODEL
    whole = _publish(root / "sm90", arch="sm90", capability="9.0")
    target = PreflightTarget(root, MODEL, BUCKET, mig_profile="1g.10gb", select_engine=True)
    # only a whole-GPU sm90 engine: the slice needs its own (sized to 10 GB)
    with pytest.raises(PreflightError, match=r"models/large-v3-turbo/sm90-1g\.10gb/") as err:
        run_preflight(target, compute_capability=lambda: "9.0", trtllm_version=lambda: TRTLLM)
    assert "--expect-arch sm90 --mig-profile 1g.10gb" in str(err.value)
    # a whole-GPU manifest copied into the slice's folder is refused as well
    sliced = root / "sm90-1g.10gb"
    sliced.mkdir()
    (sliced / "current.json").write_text(json.dumps({"version": whole.name}))
    (sliced / whole.name).symlink_to(whole, target_is_directory=True)
    with pytest.raises(PreflightError, match="built for a whole GPU but this pod runs on MIG profile 1g.10gb"):
        run_preflight(target, compute_capability=lambda: "9.0", trtllm_version=lambda: TRTLLM)
    # the slice's own engine passes
    (sliced / "current.json").unlink()
    built = _publish(sliced, arch="sm90", capability="9.0", version="20261201T000000Z", mig_profile="1g.10gb")
    result = run_preflight(target, compute_capability=lambda: "9.0", trtllm_version=lambda: TRTLLM)
    assert result.model_repository == built / "model_repository"


def test_exec_replaces_the_process_after_a_passed_check_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr("whisper_build.podstart.preflight.os.execvp", lambda file, argv: calls.append((file, argv)))
    monkeypatch.setenv("WHISPER_TRTLLM_VERSION", TRTLLM)
    root = tmp_path / "models" / MODEL
    resolved = tmp_path / "repo"
    args = [*_select_args(root, resolved), "--compute-capability", "8.9"]
    supervisor = ["python3", "-m", "whisper_build.serving.supervisor"]
    # nothing published for sm89: the check fails and the supervisor is never started
    assert main([*args, "--exec", *supervisor]) == 1
    assert calls == []
    folder = _publish(root / "sm89")
    main([*args, "--exec", *supervisor])
    assert calls == [("python3", supervisor)]
    assert resolved.read_text() == str(folder / "model_repository")


def test_a_speaker_weight_file_off_its_pin_fails_the_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ctranslate2"
    folder.mkdir()
    for name in ("model.bin", "config.json", "tokenizer.json", "vocabulary.json", "preprocessor_config.json"):
        (folder / name).write_text("x")
    relative, _ = WEIGHTS["silero_vad"]
    monkeypatch.setitem(WEIGHTS, "silero_vad", (relative, "0" * 64))
    with pytest.raises(PreflightError, match=r"speaker model weights: silero_vad/data/silero_vad\.jit has sha256"):
        run_preflight(_ct2_target(tmp_path), compute_capability=_never_queried, trtllm_version=_never_queried)
