"""``serving_engine: torch`` as a fleet choice: config → charts → pod start → Triton model parameters.

A torch group serves the Hugging Face checkpoint under ``models/<model>/hf/`` with no engine build: the
config validation, the volume and environment of its pods, the model repository the image renders from
that environment, the deploy plan and (slow) the synthesized engine-build stack and gates of
``config/examples/fine-tuned-torch.yaml``. The engine itself needs PyTorch (tests/bench/test_ct2_whisper_to_hf.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_support import config_with, of_kind, synth, validate

from k8s_charts import workload
from settings import ConfigError, gpu_catalog, labels, load_config
from settings.gpu_catalog import GpuSpec
from whisper_build.deploy.deploy_plan import deploy_steps
from whisper_build.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "config" / "examples" / "fine-tuned-torch.yaml"
MIXED = [
    {"name": "g5", "instance_type": "ml.g5.2xlarge"},
    {"name": "g6e", "instance_type": "ml.g6e.2xlarge", "serving_engine": "torch"},
]


def _pod(deployment):
    return deployment["spec"]["template"]["spec"]


def _container(deployment, name="serving"):
    pod = _pod(deployment)
    return next(c for c in pod["containers"] + pod["initContainers"] if c["name"] == name)


def _env(container):
    return {e["name"]: e["value"] for e in container["env"]}


# ---------------------------------------------------------------- config validation
def test_torch_groups_build_no_engine_but_share_the_architecture_with_those_that_do() -> None:
    config = config_with(
        gpu_groups=[*MIXED, {"name": "g6e-ft", "instance_type": "ml.g6e.4xlarge", "serving_engine": "torch"}]
    )
    # sm89 is served by torch groups only: no engine target, no build group
    assert config.engine_targets == ["sm86"]
    assert config.groups_for_target("sm89") == []
    assert [g.model_volume_key for g in config.gpu_groups] == ["sm86", "hf", "hf"]
    both = config_with(gpu_groups=[*MIXED, {"name": "g6e-trt", "instance_type": "ml.g6e.4xlarge"}])
    # a tensorrt_llm group of the same architecture still gets its build, on its own nodes
    assert both.engine_targets == ["sm86", "sm89"]
    assert [g.name for g in both.groups_for_target("sm89")] == ["g6e-trt"]


def test_torch_on_mig_slices_is_refused_naming_the_fix() -> None:
    groups = [{"name": "p5", "instance_type": "ml.p5.48xlarge", "serving_engine": "torch", "mig_profile": "1g.10gb"}]
    with pytest.raises(ConfigError) as err:
        config_with(gpu_groups=groups)
    assert "gpu_groups.0: mig_profile '1g.10gb' with serving_engine torch" in str(err.value)
    assert "serve MIG slices with serving_engine tensorrt_llm" in str(err.value)


def test_torch_with_a_beam_width_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"gpu_groups\.1\.serving_engine: torch decodes greedily but model\.beam_width is 4"
    ):
        config_with(gpu_groups=MIXED, model={"beam_width": 4})


def test_the_inference_operator_target_refuses_torch_groups() -> None:
    with pytest.raises(
        ConfigError, match=r"gpu_groups\.1\.serving_engine: torch is served by serving\.target deployments"
    ):
        config_with(gpu_groups=MIXED, serving={"target": "inference_operator"})


def test_a_gpu_older_than_ampere_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # a catalog entry for a pre-Ampere GPU (compute capability 7.5, e.g. a T4) on the g5 family's sizes
    monkeypatch.setitem(gpu_catalog.GPU_FAMILIES, "g5", GpuSpec("NVIDIA T4", "7.5", 16, 4))
    with pytest.raises(ConfigError, match=r"gpu_groups\.0: serving_engine torch needs a GPU of compute "
                       r"capability 8\.0 or newer .* the NVIDIA T4 of ml\.g5\.2xlarge is 7\.5"):  # fmt: skip
        config_with(gpu_groups=[{"name": "g5", "instance_type": "ml.g5.2xlarge", "serving_engine": "torch"}])


# ---------------------------------------------------------------- charts
@pytest.fixture(scope="module")
def mixed():
    config = config_with(gpu_groups=MIXED)
    return config, synth(config)


def test_a_torch_group_mounts_the_checkpoint_prefix_and_checks_it_before_start(mixed) -> None:
    config, manifests = mixed
    volumes = of_kind(manifests, "PersistentVolume")
    assert sorted(volumes) == ["whisper-models-hf", "whisper-models-sm86"]  # no sm89 engine volume
    checkpoint = volumes["whisper-models-hf"]
    assert "prefix models/large-v3-turbo/hf/" in checkpoint["spec"]["mountOptions"]
    assert "read-only" in checkpoint["spec"]["mountOptions"]
    assert checkpoint["spec"]["csi"]["volumeHandle"] == "whisper-hyperpod-large-v3-turbo-hf"
    assert checkpoint["metadata"]["labels"] == {labels.APP_NAME_LABEL: "whisper"}  # no GPU architecture
    assert volumes["whisper-models-sm86"]["metadata"]["labels"][labels.GPU_ARCH_LABEL] == "sm86"
    deployments = of_kind(manifests, "Deployment")
    torch_pod, trt_pod = _pod(deployments["whisper-g6e"]), _pod(deployments["whisper-g5"])
    claim = next(v for v in torch_pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]
    assert claim == {"claimName": "whisper-models-hf", "readOnly": True}
    preflight = _container(deployments["whisper-g6e"], "preflight")["command"]
    args = dict(zip(preflight[3::2], preflight[4::2], strict=False))
    assert args["--engine"] == "torch" and args["--model-dir"] == "/models"
    assert "--build-command" not in preflight  # nothing to build for a torch group
    assert "--build-command" in _container(deployments["whisper-g5"], "preflight")["command"]
    assert next(v for v in trt_pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]["claimName"] == (
        "whisper-models-sm86"
    )


def test_a_torch_group_serves_the_mounted_checkpoint_with_the_model_limits(mixed) -> None:
    config, manifests = mixed
    env = _env(_container(of_kind(manifests, "Deployment")["whisper-g6e"]))
    preflight = _container(of_kind(manifests, "Deployment")["whisper-g6e"], "preflight")["command"]
    engine = {k: v for k, v in env.items() if k.startswith(("WHISPER_TRITON_ENGINE__", "WHISPER_TRITON_BATCHING__"))}
    assert engine == {
        "WHISPER_TRITON_ENGINE__ENGINE": "torch",
        # the very folder the preflight checked
        "WHISPER_TRITON_ENGINE__MODEL_PATH": preflight[preflight.index("--model-dir") + 1],
        "WHISPER_TRITON_ENGINE__DEVICE": "cuda",
        "WHISPER_TRITON_ENGINE__COMPUTE_TYPE": config.model.dtype,
        "WHISPER_TRITON_ENGINE__BEAM_SIZE": "1",
        "WHISPER_TRITON_ENGINE__MAX_NEW_TOKENS": str(config.model.max_output_len),
        "WHISPER_TRITON_ENGINE__MAX_ENGINE_BATCH": str(config.model.max_batch_size),
        "WHISPER_TRITON_ENGINE__CUDA_GRAPHS": "true",
        "WHISPER_TRITON_BATCHING__MAX_BATCH_SIZE": str(config.model.max_batch_size),
    }
    bf16 = config_with(gpu_groups=MIXED, model={"dtype": "bfloat16", "max_batch_size": 1, "torch_cuda_graphs": False})
    torch_env = workload.engine_env(bf16, bf16.gpu_groups[1])
    assert torch_env["WHISPER_TRITON_ENGINE__COMPUTE_TYPE"] == "bfloat16"
    assert torch_env["WHISPER_TRITON_ENGINE__CUDA_GRAPHS"] == "false"  # the eager fall-back switch
    assert torch_env["WHISPER_TRITON_BATCHING__MAX_BATCH_SIZE"] == workload.MIN_TRITON_BATCH
    assert workload.engine_env(bf16, bf16.gpu_groups[0]) == {}


def test_the_image_renders_a_torch_model_from_the_pod_env(mixed, monkeypatch, tmp_path: Path) -> None:
    # GIVEN the torch group's pod env and the empty repository file its preflight writes
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    from whisper_build.serving.engines.params import EngineParams
    from whisper_build.serving.supervisor import SupervisorSettings, resolve_model_repository
    from whisper_build.serving.triton_model.settings import TritonSettings

    _, manifests = mixed
    written = tmp_path / "model_repository"
    written.write_text("")
    with monkeypatch.context() as patch:
        for name, value in _env(_container(of_kind(manifests, "Deployment")["whisper-g6e"])).items():
            patch.setenv(name, value)
        patch.setenv("WHISPER_MODEL_REPOSITORY_FILE", str(written))
        patch.setenv("WHISPER_SUPERVISOR_RENDERED_REPOSITORY_DIR", str(tmp_path / "rendered"))
        triton, supervisor = TritonSettings(), SupervisorSettings()
    # WHEN the supervisor resolves what to serve
    text = (resolve_model_repository(triton, supervisor) / "whisper" / "config.pbtxt").read_text()
    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    # THEN the python-backend model reads back the torch engine on the mounted checkpoint (1/model.py's parse)
    raw = {key: value.string_value for key, value in parsed.parameters.items()}
    params = EngineParams.from_strings({k: v for k, v in raw.items() if k in EngineParams.model_fields})
    assert (params.engine, params.model_path, params.device, params.compute_type) == (
        "torch",
        "/models",
        "cuda",
        "float16",
    )
    assert (params.beam_size, params.max_new_tokens, params.max_engine_batch) == (1, 224, 16)
    assert parsed.max_batch_size == 16


def test_the_example_serves_every_group_from_one_checkpoint_and_validates() -> None:
    config = load_config(EXAMPLE)
    assert {group.serving_engine for group in config.gpu_groups} == {"torch"}
    assert config.engine_targets == []
    manifests = synth(config)
    assert list(of_kind(manifests, "PersistentVolume")) == ["whisper-models-hf"]
    # every object validates (raises otherwise): core ones against Kubernetes 1.33, custom resources their CRD
    validated = {validate(manifest, config.cluster.kubernetes_version) for manifest in manifests}
    assert "k8s:1.33" in validated and "crd:keda.sh/v1alpha1/ScaledObject" in validated


# ---------------------------------------------------------------- deploy plan
def test_the_deploy_plan_builds_engines_only_for_tensorrt_llm_groups() -> None:
    steps = {step.name: step for step in deploy_steps(config_with(gpu_groups=MIXED), "cfg.yaml", "123456789012")}
    assert "for sm86 in parallel" in steps["engines"].title
    assert "sm89" not in steps["engines"].title
    names = [step.name for step in deploy_steps(load_config(EXAMPLE), "cfg.yaml", "123456789012")]
    assert "engines" not in names and names.index("serving-image") + 1 == names.index("rollout")


# ---------------------------------------------------------------- CDK (slow: one synthesis, shared)
@pytest.mark.slow
def test_the_example_synthesizes_no_engine_build_and_passes_the_gates() -> None:
    from cdk_assembly import CONFIGS, synthesized

    from stacks.gates import read_nag_findings, run_cfn_lint

    assert CONFIGS["fine-tuned-torch"] == EXAMPLE  # so every CONFIGS-wide stack test covers it too
    result = synthesized(EXAMPLE)
    assert result.error is None and result.stacks is not None and result.stacks.engine_build is not None
    template = result.template_json(result.stacks.engine_build.artifact_id)
    projects = sorted(
        r["Properties"]["Name"] for r in template["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"
    )
    assert projects == ["whisper-hyperpod-rollout", "whisper-hyperpod-serving-image"]
    assert run_cfn_lint(list(result.templates.values())) == []
    assert read_nag_findings(result.outdir) == []
    assert yaml.safe_load(EXAMPLE.read_text())["model"]["beam_width"] == 1


def test_the_config_offers_exactly_the_engines_the_image_can_load() -> None:
    from typing import get_args

    from settings import schema
    from whisper_build.podstart.preflight import ENGINES
    from whisper_build.serving import contract
    from whisper_build.serving.engines import base

    assert schema.EngineKind is base.EngineKind is contract.EngineKind
    assert get_args(contract.EngineKind) == ENGINES


def test_the_image_build_fails_without_the_torch_engine_runtime() -> None:
    # the Dockerfile's check, run with this interpreter: it passes exactly where torch, transformers and
    # safetensors are installed (CI has no torch: it must fail there, naming the missing package)
    import importlib.util
    import re
    import subprocess
    import sys

    dockerfile = (REPO_ROOT / "whisper_build" / "image" / "Dockerfile").read_text()
    [script] = re.findall(r'^RUN python3 -c "(import importlib.metadata as m; \\\n.*torch engine runtime.*)"$',
                          dockerfile, flags=re.MULTILINE)  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-c", script.replace("\\\n", "")], capture_output=True, text=True, timeout=60, check=False
    )
    present = all(importlib.util.find_spec(name) for name in ("torch", "transformers", "safetensors"))
    assert (result.returncode == 0) == present, result.stderr
    if present:
        assert result.stdout.startswith("torch engine runtime: torch ")
    else:
        assert "PackageNotFoundError" in result.stderr


@pytest.mark.slow
def test_a_pipeline_of_torch_groups_has_no_engines_stage() -> None:
    import aws_cdk as cdk
    from cdk_assembly import PIPELINE_CONFIG

    from settings import parse_config
    from stacks.assembly import cdk_json_context
    from stacks.pipeline_stack import PipelineStack

    data = yaml.safe_load(EXAMPLE.read_text())
    data["pipeline"] = yaml.safe_load(PIPELINE_CONFIG.read_text())["pipeline"]  # the pipeline example's source
    config = parse_config(data)
    app = cdk.App(context=cdk_json_context())
    stack = PipelineStack(app, "P", config=config, config_path="c.yaml", env=cdk.Environment(region=config.region))
    stages = [stage.stage_name for stage in stack.pipeline.pipeline.stages]
    # nothing to build per architecture: the image, then the rollout (CodePipeline refuses an empty stage)
    assert stages[-2:] == ["ServingImage", "Rollout"] and "Engines" not in stages
    assert stack.engine_steps == {}
