"""TensorRT-LLM releases without the TensorRT-engine builder: the build tool and the preflight refuse them."""

from __future__ import annotations

from pathlib import Path

import pytest

from whisper_build.podstart.preflight import PreflightError, PreflightTarget, run_preflight
from whisper_build.release.engine_build import cli
from whisper_build.release.engine_build.trtllm_support import LAST_ENGINE_BUILDER_VERSION, engine_builder_refusal


@pytest.mark.parametrize("version", ["0.21.0", "1.2.0rc6.post3", "1.3.0rc19", "1.3.0rc20"])
def test_releases_up_to_the_last_with_the_builder_are_accepted(version):
    assert engine_builder_refusal(version) is None


@pytest.mark.parametrize("version", ["1.3.0rc21", "1.3.0", "1.4.0rc1", "2.0.0"])
def test_later_releases_are_refused_naming_the_last_version_its_source_and_the_way_out(version):
    message = engine_builder_refusal(version)
    assert message is not None
    assert f"TensorRT-LLM {version} in this image has no TensorRT-engine builder" in message
    assert f"after {LAST_ENGINE_BUILDER_VERSION}" in message
    assert "https://github.com/NVIDIA/TensorRT-LLM/releases/tag/v1.3.0rc20" in message
    assert "`serving_engine: torch`" in message
    assert "TensorRT-LLM 0.21.0" in message  # the pinned base image, the other way out


@pytest.mark.parametrize("version", [None, "not-a-version"])
def test_unknown_versions_are_left_to_the_other_checks(version):
    assert engine_builder_refusal(version) is None


def test_engine_build_refuses_before_building(monkeypatch, capsys):
    monkeypatch.setattr(cli.gpu, "tensorrt_llm_version", lambda: "1.4.0")
    assert cli.main(["--model", "openai/whisper-small", "--output-dir", "/tmp/unused", "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert "TensorRT-LLM 1.4.0 in this image has no TensorRT-engine builder" in err
    assert "serving_engine: torch" in err


def test_preflight_refuses_such_an_image_even_before_anything_is_published(tmp_path: Path):
    target = PreflightTarget(tmp_path, "large-v3-turbo", "bucket", "tensorrt_llm", gpu_group="g6e")

    def never() -> str:
        raise AssertionError("the GPU is not queried once the image is refused")

    with pytest.raises(PreflightError, match="TensorRT-LLM 1.3.0 in this image has no TensorRT-engine builder"):
        run_preflight(target, compute_capability=never, trtllm_version=lambda: "1.3.0")


def test_preflight_on_torch_groups_never_asks_the_tensorrt_llm_version(tmp_path: Path):
    target = PreflightTarget(tmp_path, "large-v3-turbo", "bucket", "torch", gpu_group="g6e")

    def never() -> str:
        raise AssertionError("torch groups need no TensorRT-LLM")

    with pytest.raises(PreflightError) as err:  # the empty mount is not a checkpoint: a different failure
        run_preflight(target, compute_capability=never, trtllm_version=never)
    assert "TensorRT-engine builder" not in str(err.value)
