"""serving.target: inference_operator — the operator add-on, InferenceEndpointConfigs, no fleet Deployments."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from cdk_assembly import CONFIGS, synthesized
from k8s_support import of_kind, synth, validate

from k8s_charts.inference_endpoint import MODEL_MOUNT_PATH, resource_shapes
from k8s_charts.inputs import PLACEHOLDER_INPUTS
from k8s_charts.sizing import pod_resources
from observability.scrape_config import scrape_jobs
from settings import ConfigError, load_config, parse_config
from whisper_build.paths import REPO_ROOT

OPERATOR = CONFIGS["inference-operator"]
MIG = REPO_ROOT / "config" / "examples" / "mig.yaml"
CERTIFICATE = "arn:aws:acm:us-east-1:123456789012:certificate/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0"


def _operator(path=OPERATOR, **sections):
    data = yaml.safe_load(path.read_text())
    data.setdefault("serving", {})["target"] = "inference_operator"
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return parse_config(data, "test")


@pytest.fixture(scope="module")
def config():
    return load_config(OPERATOR)


@pytest.fixture(scope="module")
def manifests(config):
    return synth(config)


def test_one_schema_valid_endpoint_config_and_no_fleet_deployments(config, manifests):
    kinds = {m["kind"] for m in manifests}
    # DaemonSets: the DCGM exporters; NetworkPolicies: their namespace's default deny + scrape ingress
    assert kinds == {"Namespace", "InferenceEndpointConfig", "DaemonSet", "NetworkPolicy"}
    assert {m["metadata"]["namespace"] for m in manifests if m["kind"] == "NetworkPolicy"} == {"whisper-gpu-metrics"}
    assert not {"Deployment", "ScaledObject", "Service", "Ingress", "PersistentVolume"} & kinds
    (endpoint,) = of_kind(manifests, "InferenceEndpointConfig").values()
    assert validate(endpoint, config.cluster.kubernetes_version) == (
        "crd:inference.sagemaker.aws.amazon.com/v1/InferenceEndpointConfig"
    )
    spec = endpoint["spec"]
    assert spec["instanceTypes"] == ["ml.g5.2xlarge", "ml.g6e.2xlarge"]  # gpu_groups order
    assert spec["endpointName"] == "whisper-hyperpod"
    assert spec["modelSourceConfig"] == {
        "modelSourceType": "s3",
        "s3Storage": {"bucketName": PLACEHOLDER_INPUTS.bucket_name, "region": "us-east-1"},
        "modelLocation": "models/large-v3-turbo/",  # the model's root: every architecture
    }
    assert spec["invocationEndpoint"] == "invocations"
    assert spec["loadBalancer"] == {"healthCheckPath": "/ping", "routingAlgorithm": "least_outstanding_requests"}
    worker = spec["worker"]
    assert worker["modelInvocationPort"] == {"containerPort": 8080, "name": "http"}
    assert worker["modelVolumeMount"]["mountPath"] == MODEL_MOUNT_PATH
    # the container selects the engine of the GPU it landed on, then runs the supervisor
    command = worker["command"]
    assert command[:3] == ["python3", "-m", "whisper_build.podstart.preflight"]
    assert command[command.index("--model-dir") + 1] == MODEL_MOUNT_PATH
    assert command[command.index("--select-engine") :] == [
        "--select-engine",
        "--exec",
        "python3",
        "-m",
        "whisper_build.serving.supervisor",
    ]
    # the Deployments target's probes: liveness never depends on the model, readiness does
    assert worker["probes"]["livenessProbe"]["httpGet"] == {"path": "/live", "port": 8080, "scheme": "HTTP"}
    assert worker["probes"]["readinessProbe"]["httpGet"]["path"] == "/ping"
    assert worker["probes"]["startupProbe"]["httpGet"]["path"] == "/live"
    env = {e["name"]: e["value"] for e in worker["environmentVariables"]}
    assert env["WHISPER_MODEL_REPOSITORY_FILE"] == command[command.index("--write-model-repository") + 1]
    # sized to the smallest group (g5: 8 vCPU, 32 GiB, capacity 8) so a pod fits either instance type
    g5 = config.gpu_groups[0]
    size = pod_resources(g5.instance, g5.pods_per_node)
    assert worker["resources"]["requests"] == {"cpu": size.cpu, "memory": size.memory, "nvidia.com/gpu": 1}
    assert env["WHISPER_GATEWAY_CAPACITY"] == "8"
    assert spec["replicas"] == 2


def test_autoscaling_uses_the_crd_prometheus_trigger_on_the_in_flight_signal(manifests):
    (endpoint,) = of_kind(manifests, "InferenceEndpointConfig").values()
    scaling = endpoint["spec"]["autoScalingSpec"]
    assert (scaling["minReplicaCount"], scaling["maxReplicaCount"]) == (2, 2)
    trigger = scaling["prometheusTrigger"]
    pattern = (
        r"^https:\/\/aps-workspaces\.[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*\.amazonaws\.com\/workspaces\/ws-[a-zA-Z0-9-]+$"
    )
    assert re.match(pattern, trigger["serverAddress"])
    assert trigger["metricType"] == "Value" and trigger["targetValue"] == 0.7
    pods = '{namespace="whisper",pod=~"whisper-[a-z0-9]+-[a-z0-9]+"}'
    assert trigger["query"] == (
        f"sum(whisper_gateway_inflight_requests{pods}) / sum(whisper_gateway_capacity_requests{pods}) + "
        f"(sum(whisper_realtime_sessions_active{pods}) or vector(0)) / "
        f"(64 * count(count by (pod) (whisper_gateway_capacity_requests{pods})))"
    )


def test_tls_is_the_operator_certificate_unless_a_certificate_and_domain_are_set():
    default = of_kind(synth(_operator()), "InferenceEndpointConfig")["whisper"]["spec"]["tlsConfig"]
    assert default == {
        "tlsCertificateOutputS3Uri": f"s3://{PLACEHOLDER_INPUTS.tls_bucket_name}/inference-operator-certificates/"
    }
    custom = _operator(endpoint={"certificate_arn": CERTIFICATE, "domain_name": "whisper.example.com"})
    manifests = synth(custom)
    endpoint = of_kind(manifests, "InferenceEndpointConfig")["whisper"]
    assert endpoint["spec"]["tlsConfig"] == {
        "customCertificateConfig": {"acmArn": CERTIFICATE, "domainName": "whisper.example.com"}
    }
    validate(endpoint, custom.cluster.kubernetes_version)
    with pytest.raises(ConfigError, match="domain_name needs certificate_arn"):
        _operator(endpoint={"domain_name": "whisper.example.com"})


def test_each_mig_profile_gets_its_own_endpoint_config():
    config = _operator(MIG)
    assert [(s.mig_profile, [g.name for g in s.groups]) for s in resource_shapes(config)] == [
        (None, ["g5", "g6e"]),
        ("1g.10gb", ["p5"]),
    ]
    endpoints = of_kind(synth(config), "InferenceEndpointConfig")
    assert sorted(endpoints) == ["whisper", "whisper-mig-1g-10gb"]
    mig = endpoints["whisper-mig-1g-10gb"]["spec"]
    assert mig["instanceTypes"] == ["ml.p5.48xlarge"] and mig["endpointName"] == "whisper-hyperpod-mig-1g-10gb"
    assert mig["worker"]["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == 1
    command = mig["worker"]["command"]
    assert command[command.index("--mig-profile") + 1] == "1g.10gb"
    assert (mig["autoScalingSpec"]["minReplicaCount"], mig["autoScalingSpec"]["maxReplicaCount"]) == (2, 28)
    for endpoint in endpoints.values():
        validate(endpoint, config.cluster.kubernetes_version)


def test_ctranslate2_groups_stay_on_the_deployments_target():
    data = yaml.safe_load(OPERATOR.read_text())
    data["gpu_groups"][1]["serving_engine"] = "ctranslate2"
    with pytest.raises(ConfigError, match="gpu_groups.1.serving_engine: ctranslate2 is served by serving.target"):
        parse_config(data, "test")


def test_scrape_jobs_keep_the_operators_pods_by_namespace_and_port(config):
    jobs = {job.name: job for job in scrape_jobs(config)}
    assert jobs["whisper-gateway"].app is None and jobs["whisper-gateway"].namespace == "whisper"
    assert jobs["dcgm-exporter"].app == "dcgm-exporter"


@pytest.fixture(scope="module")
def assembly():
    result = synthesized(OPERATOR)
    assert result.error is None, result.error
    return result


def _resources(template, kind):
    return {key: value for key, value in template["Resources"].items() if value["Type"] == kind}


def test_operator_add_on_with_its_role_and_no_own_controllers(assembly):
    workloads = assembly.template_json("WhisperHyperpodWorkloads")
    (addon,) = _resources(workloads, "AWS::EKS::Addon").values()
    assert addon["Properties"]["AddonName"] == "amazon-sagemaker-hyperpod-inference"
    values = json.dumps(addon["Properties"]["ConfigurationValues"])
    assert "executionRoleArn" in values and "tlsCertificateS3Bucket" in values
    roles = _resources(workloads, "AWS::IAM::Role")
    role = next(r for r in roles.values() if "HyperPod inference operator" in r["Properties"].get("Description", ""))
    statement = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    managed = json.dumps(role["Properties"]["ManagedPolicyArns"])
    assert "AmazonSageMakerHyperPodInferenceAccess" in managed
    # the add-on brings the load balancer controller and KEDA: this stack installs neither
    assert not _resources(workloads, "Custom::AWSCDK-EKS-HelmChart")
    storage = assembly.template_json("WhisperHyperpodStorage")
    names = json.dumps([b["Properties"].get("BucketName") for b in _resources(storage, "AWS::S3::Bucket").values()])
    assert "whisper-hyperpod-tls-" in names
