"""MIG slices (``gpu_groups[].mig_profile``): validation, resources, ceilings, weights, engines, labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_support import of_kind, synth, validate

from k8s_charts import naming
from k8s_charts.gpu_metrics import MIG_COUNTERS_FILE
from k8s_charts.sizing import pod_resources
from settings import ConfigError, load_config, parse_config
from settings.gpu_catalog import H100, H200
from stacks import engine_job
from stacks.engine_build_stack import engine_project_name
from stacks.hyperpod import instance_group_labels
from whisper_build.paths import REPO_ROOT
from whisper_build.release import invocations
from whisper_build.release.engine_build.memory import max_batch_size_for_memory
from whisper_build.release.engine_build.spec import BuildSpecError

MIG_EXAMPLE = REPO_ROOT / "config" / "examples" / "mig.yaml"


def _config(**group_overrides):
    """The MIG example with its p5 group changed."""
    data = yaml.safe_load(MIG_EXAMPLE.read_text())
    data["gpu_groups"][2].update(group_overrides)
    return parse_config(data, "test")


def _error(**group_overrides) -> str:
    with pytest.raises(ConfigError) as err:
        _config(**group_overrides)
    return str(err.value)


@pytest.fixture(scope="module")
def config():
    return load_config(MIG_EXAMPLE)


@pytest.fixture(scope="module")
def manifests(config):
    return synth(config)


def test_catalog_profiles_follow_the_mig_user_guide():
    assert [(p.name, p.max_per_gpu) for p in H100.mig_profiles] == [
        ("1g.10gb", 7), ("1g.20gb", 4), ("2g.20gb", 3), ("3g.40gb", 2), ("4g.40gb", 1), ("7g.80gb", 1),
    ]  # fmt: skip
    assert [p.name for p in H200.mig_profiles] == ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]
    profile = H100.mig_profile("2g.20gb")
    assert profile is not None
    assert (profile.compute_slices, profile.memory_gb) == (2, 20)
    assert profile.resource_name == "nvidia.com/mig-2g.20gb"
    assert profile.mig_config == "all-2g.20gb"


def test_mig_group_resource_slices_weight_and_engine_target(config):
    p5 = config.gpu_groups[2]
    assert p5.gpu_resource == "nvidia.com/mig-1g.10gb"
    assert p5.slices_per_gpu == 7 and p5.pods_per_node == 56
    # capacity weight per slice: H100 capacity 32 × 1/7 → 4 (whole-GPU groups keep the GPU's default)
    assert p5.effective_capacity == 4
    assert [g.effective_capacity for g in config.gpu_groups[:2]] == [8, 16]
    assert p5.engine_target == "sm90-1g.10gb"
    assert config.engine_targets == ["sm86", "sm89", "sm90-1g.10gb"]
    # a 3g slice weighs 3/7 of the GPU; never below 1
    assert _config(mig_profile="3g.40gb", max_replicas=16).gpu_groups[2].effective_capacity == 32 * 3 // 7
    assert _config(mig_profile="1g.10gb", capacity=2).gpu_groups[2].effective_capacity == 2


def test_replica_ceiling_counts_slices():
    assert _config(max_replicas=56).gpu_groups[2].max_replicas == 56
    message = _error(max_replicas=57)
    assert "gpu_groups.2.max_replicas: 57 pods need 57 1g.10gb MIG slices" in message
    assert "1 × ml.p5.48xlarge = 8 GPU(s) × 7 slices = 56 slices" in message
    # 3g.40gb: two slices per GPU
    assert "= 8 GPU(s) × 2 slices = 16 slices" in _error(mig_profile="3g.40gb", max_replicas=17)


def test_mig_on_a10g_is_refused_naming_the_gpu():
    data = yaml.safe_load(MIG_EXAMPLE.read_text())
    data["gpu_groups"][0]["mig_profile"] = "1g.10gb"
    with pytest.raises(ConfigError) as err:
        parse_config(data, "test")
    message = str(err.value)
    assert "gpu_groups.0" in message
    assert "the NVIDIA A10G of ml.g5.2xlarge has no MIG (Multi-Instance GPU) support; remove mig_profile" in message


def test_unknown_profile_lists_the_gpus_profiles():
    message = _error(mig_profile="1g.18gb")  # an H200 profile on an H100
    assert "mig_profile '1g.18gb' is not a MIG profile of the NVIDIA H100 80GB HBM3 (ml.p5.48xlarge)" in message
    assert "accepted: 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb" in message


def test_only_the_instance_types_hyperpod_partitions():
    # ml.p5.4xlarge has an H100 but HyperPod does not partition it
    message = _error(instance_type="ml.p5.4xlarge", max_replicas=7)
    assert "HyperPod partitions GPUs with MIG only on ml.p4d.24xlarge, ml.p5.48xlarge, ml.p5e.48xlarge" in message
    assert "not ml.p5.4xlarge" in message
    h200 = _config(instance_type="ml.p5e.48xlarge", mig_profile="1g.18gb").gpu_groups[2]
    assert h200.gpu_resource == "nvidia.com/mig-1g.18gb" and h200.engine_target == "sm90-1g.18gb"


def test_deployment_requests_one_slice_and_a_slice_share_of_the_node(config, manifests):
    deployments = of_kind(manifests, "Deployment")
    pod = deployments["whisper-p5"]["spec"]["template"]["spec"]
    size = pod_resources(config.gpu_groups[2].instance, 56)
    for container in (*pod["initContainers"], *pod["containers"]):
        for kind in ("requests", "limits"):
            assert container["resources"][kind]["nvidia.com/mig-1g.10gb"] == 1
            assert "nvidia.com/gpu" not in container["resources"][kind]
    serving = pod["containers"][0]
    assert serving["resources"]["requests"]["cpu"] == size.cpu  # 1/56 of the node after the reserve
    assert serving["resources"]["requests"]["memory"] == size.memory
    env = {e["name"]: e["value"] for e in serving["env"]}
    assert env["WHISPER_GATEWAY_CAPACITY"] == "4"
    # whole-GPU groups are unchanged
    g5 = deployments["whisper-g5"]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert g5["nvidia.com/gpu"] == 1
    # the preflight checks the slice's engine and names the build of that target
    args = pod["initContainers"][0]["command"]
    assert args[args.index("--mig-profile") + 1] == "1g.10gb"
    assert args[args.index("--gpu-arch") + 1] == "sm90"
    assert "--mig-profile 1g.10gb" in args[args.index("--build-command") + 1]


def test_volume_mounts_the_slice_engine_prefix_and_everything_validates(config, manifests):
    volumes = of_kind(manifests, "PersistentVolume")
    assert sorted(volumes) == ["whisper-models-sm86", "whisper-models-sm89", "whisper-models-sm90-1g-10gb"]
    options = volumes["whisper-models-sm90-1g-10gb"]["spec"]["mountOptions"]
    assert "prefix models/large-v3-turbo/sm90-1g.10gb/" in options
    claim = of_kind(manifests, "Deployment")["whisper-p5"]["spec"]["template"]["spec"]["volumes"][0]
    assert claim["persistentVolumeClaim"]["claimName"] == naming.model_volume_name("sm90-1g.10gb")
    for manifest in manifests:
        validate(manifest, config.cluster.kubernetes_version)


def test_keda_ceiling_and_dcgm_profiling_fields(manifests):
    scaled = of_kind(manifests, "ScaledObject")["whisper-p5"]["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 28)
    exporters = of_kind(manifests, "DaemonSet")
    assert exporters["dcgm-exporter-p5"]["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "-f",
        MIG_COUNTERS_FILE,
    ]
    assert MIG_COUNTERS_FILE not in exporters["dcgm-exporter-g5"]["spec"]["template"]["spec"]["containers"][0]["args"]


def test_instance_group_gets_the_mig_layout_label(config):
    assert instance_group_labels(config.gpu_groups[2]) == {
        "whisper-hyperpod.io/gpu-group": "p5",
        "whisper-hyperpod.io/gpu-arch": "sm90",
        "nvidia.com/mig.config": "all-1g.10gb",
    }
    assert "nvidia.com/mig.config" not in instance_group_labels(config.gpu_groups[0])


def test_slice_engine_is_built_on_a_slice_with_its_own_key_and_names(config):
    argv = invocations.engine_build_command(config, "sm90-1g.10gb", "bucket")
    assert argv[argv.index("--expect-arch") + 1] == "sm90"
    assert argv[argv.index("--mig-profile") + 1] == "1g.10gb"
    assert invocations.engine_build_key(config, "sm90-1g.10gb") != invocations.engine_build_key(config, "sm89")
    assert engine_project_name(config, "sm90-1g.10gb") == "whisper-hyperpod-engine-sm90-1g-10gb"
    assert engine_job.build_namespace(config, "sm90-1g.10gb") == "whisper-build-sm90-1g-10gb"
    _, job = engine_job.engine_build_manifests(config, "sm90-1g.10gb", image_uri="img", bucket_name="b", region="r")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert job["spec"]["template"]["spec"]["nodeSelector"]["whisper-hyperpod.io/gpu-arch"] == "sm90"
    current = invocations.engine_current_command(config, "sm90-1g.10gb", "bucket")
    assert current[current.index("--gpu-arch") + 1] == "sm90-1g.10gb"


def test_engine_batch_is_sized_to_the_slice_memory():
    # large-v3-turbo (about 1.5 GiB of fp16 weights) keeps the configured 16 windows on a 10 GB slice
    assert max_batch_size_for_memory("large-v3-turbo", 10, configured=16) == 16
    # large-v3 (about 2.9 GiB) on 10 GB fits fewer than 16 windows with beam 4
    assert max_batch_size_for_memory("large-v3", 10, configured=16, beam_width=4) == 3
    assert max_batch_size_for_memory("large-v3", 10, configured=16, weight_only="int8", beam_width=4) == 4
    with pytest.raises(
        BuildSpecError, match=r"needs about 5\.2 GiB for one 30 s window but the GPU memory is 4\.7 GiB"
    ):
        max_batch_size_for_memory("large-v3", 5, configured=16)
    # the build command carries the capped size
    data = yaml.safe_load(MIG_EXAMPLE.read_text())
    data["model"].update(name="large-v3", beam_width=4)
    capped = parse_config(data, "test")
    argv = invocations.engine_build_command(capped, "sm90-1g.10gb", "bucket")
    assert argv[argv.index("--max-batch-size") + 1] == "3"
    assert invocations.engine_build_command(capped, "sm86", "bucket")[argv.index("--max-batch-size") + 1] == "16"


def test_example_keeps_the_three_group_layout():
    assert [g.name for g in load_config(MIG_EXAMPLE).gpu_groups] == ["g5", "g6e", "p5"]
    assert Path(MIG_EXAMPLE).read_text().count("mig_profile:") == 1
