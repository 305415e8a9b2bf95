"""What the charts say, for every GPU group of a three-group config and for each config switch."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from k8s_support import PUBLIC_TLS_ENDPOINT, THREE_GROUPS, config_with, of_kind, scraped_by, synth, three_groups

from k8s_charts import synth as synth_cli
from k8s_charts import timeouts, workload
from k8s_charts.inputs import PLACEHOLDER_INPUTS
from k8s_charts.sizing import PodResources, gateway_workers, pod_resources
from k8s_charts.timeouts import DEREGISTRATION_PROPAGATION_SECONDS
from observability import queries
from observability.queries import scaling_utilization_query
from observability.scrape_config import scrape_config
from settings import labels
from whisper_build.podstart.preflight import ctranslate2_model_dir

HEALTH = "sagemaker.amazonaws.com/node-health-status"


@pytest.fixture(scope="module")
def config():
    return three_groups()


@pytest.fixture(scope="module")
def manifests(config):
    return synth(config)


@pytest.fixture(scope="module")
def deployments(manifests):
    return of_kind(manifests, "Deployment")


def _pod(deployment):
    return deployment["spec"]["template"]["spec"]


def _container(deployment, name="serving"):
    return next(c for c in _pod(deployment)["containers"] + _pod(deployment)["initContainers"] if c["name"] == name)


def _env(container):
    return {e["name"]: e["value"] for e in container["env"]}


def test_one_deployment_per_group(config, deployments) -> None:
    assert sorted(deployments) == ["whisper-g5", "whisper-g6e", "whisper-p5"]
    for group in config.gpu_groups:
        labels_ = deployments[f"whisper-{group.name}"]["spec"]["template"]["metadata"]["labels"]
        assert labels_ == {
            labels.APP_NAME_LABEL: "whisper",
            labels.GPU_GROUP_LABEL: group.name,
            labels.GPU_ARCH_LABEL: group.arch,
        }
        assert "replicas" not in deployments[f"whisper-{group.name}"]["spec"]  # KEDA owns it


def test_every_group_is_pinned_to_its_healthy_nodes_and_tolerates_the_gpu_taint(config, deployments) -> None:
    for group in config.gpu_groups:
        pod = _pod(deployments[f"whisper-{group.name}"])
        terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert len(terms) == 1
        required = {e["key"]: (e["operator"], e["values"]) for e in terms[0]["matchExpressions"]}
        assert required == {
            labels.GPU_GROUP_LABEL: ("In", [group.name]),
            labels.INSTANCE_TYPE_LABEL: ("In", [group.instance_type]),
            HEALTH: ("In", ["Schedulable"]),
        }
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        spread = pod["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {"topology.kubernetes.io/zone", "kubernetes.io/hostname"}
        assert all(c["labelSelector"]["matchLabels"][labels.GPU_GROUP_LABEL] == group.name for c in spread)


def test_every_group_mounts_only_its_architecture_prefix(config, manifests, deployments) -> None:
    volumes = of_kind(manifests, "PersistentVolume")
    claims = of_kind(manifests, "PersistentVolumeClaim")
    assert {name: pv["spec"]["mountOptions"][2] for name, pv in volumes.items()} == {
        "whisper-models-sm86": "prefix models/large-v3-turbo/sm86/",
        "whisper-models-sm89": "prefix models/large-v3-turbo/sm89/",
        "whisper-models-sm90": "prefix models/large-v3-turbo/sm90/",
    }
    handles = [pv["spec"]["csi"]["volumeHandle"] for pv in volumes.values()]
    assert len(set(handles)) == len(handles)
    for group in config.gpu_groups:
        pod = _pod(deployments[f"whisper-{group.name}"])
        claim = next(v for v in pod["volumes"] if v["name"] == "models")["persistentVolumeClaim"]
        assert claim == {"claimName": f"whisper-models-{group.arch}", "readOnly": True}
        pv = volumes[claims[claim["claimName"]]["spec"]["volumeName"]]
        assert pv["spec"]["claimRef"] == {"name": claim["claimName"], "namespace": "whisper"}
        options = pv["spec"]["mountOptions"]
        assert f"prefix models/large-v3-turbo/{group.arch}/" in options and "read-only" in options
        assert f"region {config.region}" in options and "allow-other" in options
        # the non-root container user must own the mount, or it cannot read the engines
        assert f"uid={pod['securityContext']['runAsUser']}" in options
        assert f"gid={pod['securityContext']['runAsGroup']}" in options
        assert pv["spec"]["csi"]["driver"] == "s3.csi.aws.com" and pv["spec"]["accessModes"] == ["ReadOnlyMany"]


def test_groups_of_one_architecture_share_one_volume() -> None:
    config = config_with(
        gpu_groups=[
            {"name": "l40s", "instance_type": "ml.g6e.2xlarge"},
            {"name": "l4", "instance_type": "ml.g6.2xlarge"},
        ]
    )
    manifests = synth(config)
    assert list(of_kind(manifests, "PersistentVolume")) == ["whisper-models-sm89"]
    claims = {
        _pod(d)["volumes"][0]["persistentVolumeClaim"]["claimName"] for d in of_kind(manifests, "Deployment").values()
    }
    assert claims == {"whisper-models-sm89"}


def test_probes_target_only_the_gateway(config, deployments) -> None:
    for group in config.gpu_groups:
        serving = _container(deployments[f"whisper-{group.name}"])
        startup, live, ready = serving["startupProbe"], serving["livenessProbe"], serving["readinessProbe"]
        # liveness and startup: the gateway's event loop (+ supervisor heartbeat), never the model
        assert startup["httpGet"] == live["httpGet"] == {"path": "/live", "port": "http", "scheme": "HTTP"}
        # readiness: the canary-backed /ping, out of rotation within 10 s
        assert ready["httpGet"] == {"path": "/ping", "port": "http", "scheme": "HTTP"}
        assert ready["periodSeconds"] * ready["failureThreshold"] <= 10
        # no probe reaches a Triton port, so Triton can bind the pod's loopback
        triton_ports = {"triton-http", "triton-grpc", "triton-metrics", 8000, 8001, 8002}
        assert not {probe["httpGet"]["port"] for probe in (startup, live, ready)} & triton_ports
        ports = {p["name"]: p["containerPort"] for p in serving["ports"]}
        assert ports["http"] == 8080 and ports["gateway-metrics"] == 8081
        env = _env(serving)
        assert env["WHISPER_GATEWAY_SUPERVISOR_HEARTBEAT_FILE"] == env["WHISPER_SUPERVISOR_HEARTBEAT_FILE"]
        assert env["WHISPER_SUPERVISOR_HEARTBEAT_FILE"].startswith("/run/whisper/")  # a writable emptyDir


def test_init_and_serving_containers_fall_back_to_their_log_for_the_termination_message(config, deployments) -> None:
    for group in config.gpu_groups:
        pod = _pod(deployments[f"whisper-{group.name}"])
        for container in pod["initContainers"] + pod["containers"]:
            assert container["terminationMessagePolicy"] == "FallbackToLogsOnError", container["name"]


def test_security_context_is_restricted_for_every_container(config, deployments) -> None:
    for group in config.gpu_groups:
        deployment = deployments[f"whisper-{group.name}"]
        pod = _pod(deployment)
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"] + pod["initContainers"]:
            context = container["securityContext"]
            assert context["runAsNonRoot"] is True and context["runAsUser"] == pod["securityContext"]["runAsUser"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            # a read-only root needs writable emptyDirs for what the processes write
            assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp", "/run/whisper"}


def test_resources_gpu_shm_and_capacity_are_sized_per_group(config, deployments) -> None:
    for group in config.gpu_groups:
        deployment = deployments[f"whisper-{group.name}"]
        serving = _container(deployment)
        limits = serving["resources"]["limits"]
        assert serving["resources"]["requests"] == limits
        assert limits["nvidia.com/gpu"] == 1
        cpu_m = int(limits["cpu"].removesuffix("m"))
        memory_mib = int(limits["memory"].removesuffix("Mi"))
        instance = group.instance
        # one pod per GPU, with headroom left for the node's daemons
        assert 0 < cpu_m * instance.gpus < instance.vcpus * 1000 - 900
        assert 0 < memory_mib * instance.gpus < instance.memory_gib * 1024 - 2048
        shm = next(v for v in _pod(deployment)["volumes"] if v["name"] == "dshm")["emptyDir"]
        assert shm["medium"] == "Memory" and int(shm["sizeLimit"].removesuffix("Mi")) >= 1024
        assert {"mountPath": "/dev/shm", "name": "dshm"} in serving["volumeMounts"]
        env = _env(serving)
        assert env["WHISPER_GATEWAY_CAPACITY"] == str(group.effective_capacity)
        # gateway workers: one per whole core of half the pod's CPU, within [1, min(8, capacity)]
        workers = int(env["WHISPER_GATEWAY_WORKERS"])
        assert workers == max(1, min(cpu_m // 2000, 8, group.effective_capacity))
        assert env["WHISPER_TRITON_ENGINE__ENGINE"] == group.serving_engine
        assert env["WHISPER_GATEWAY_HOST"] == "0.0.0.0"


def test_gateway_workers_follow_the_pod_cpu_request() -> None:
    size = lambda cpu_m: PodResources(cpu_m, 16384, 4096)  # noqa: E731
    assert [gateway_workers(size(m), 64) for m in (900, 2800, 6600, 11100, 47000)] == [1, 1, 3, 5, 8]
    assert gateway_workers(size(11100), 2) == 2  # never more workers than requests admitted at once


def test_multi_gpu_instances_split_cpu_and_memory_per_gpu(config) -> None:
    p5 = next(g for g in config.gpu_groups if g.name == "p5")
    single = pod_resources(type(p5.instance)(p5.instance.vcpus, p5.instance.memory_gib, 1))
    assert pod_resources(p5.instance).cpu_millicores <= single.cpu_millicores // 8 + 100


def test_the_image_reads_the_pod_environment(config, deployments, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the serving container's environment WHEN the image's own settings classes read it
    # THEN every variable is one they know (extra="forbid") and means what the chart intends
    from whisper_build.serving.gateway.settings import GatewaySettings
    from whisper_build.serving.supervisor import SupervisorSettings
    from whisper_build.serving.triton_model.settings import TritonSettings, tritonserver_args

    for group in config.gpu_groups:
        deployment = deployments[f"whisper-{group.name}"]
        with monkeypatch.context() as patch:
            for name, value in _env(_container(deployment)).items():
                patch.setenv(name, value)
            gateway, triton, supervisor = GatewaySettings(), TritonSettings(), SupervisorSettings()
        assert (gateway.server.host, gateway.server.port, gateway.admission.capacity) == (
            "0.0.0.0",
            8080,
            group.effective_capacity,
        )
        assert gateway.triton_url == f"127.0.0.1:{triton.grpc_port}"
        assert gateway.requests.request_timeout_seconds == config.serving.request_timeout_seconds
        assert gateway.uploads.max_body_bytes == config.serving.max_body_mb * 1024 * 1024
        assert triton.engine.engine == group.serving_engine
        assert (triton.http_port, triton.grpc_port, triton.metrics_port) == (8000, 8001, 8002)
        assert str(supervisor.model_repository_file) == "/run/whisper/model_repository"
        # Triton's HTTP/gRPC on the loopback, its metrics on the pod IP; gateway metrics off the traffic port
        args = tritonserver_args(triton, Path("/models"))
        assert {"--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=0.0.0.0"} <= set(args)
        assert gateway.server.metrics_port == config.serving.gateway_metrics_port != gateway.server.port
        # API keys from the stack's secret (placeholder ARN in the plain YAML)
        assert gateway.auth.api_keys_secret == PLACEHOLDER_INPUTS.api_keys_secret_arn and gateway.auth.api_keys is None


def test_termination_outlasts_the_longest_request_with_a_drain(config, deployments) -> None:
    for group in config.gpu_groups:
        pod = _pod(deployments[f"whisper-{group.name}"])
        assert pod["terminationGracePeriodSeconds"] > config.serving.request_timeout_seconds
        serving = _container(deployments[f"whisper-{group.name}"])
        prestop = serving["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert prestop >= DEREGISTRATION_PROPAGATION_SECONDS
        env = {key: float(value) for key, value in _env(serving).items() if key.endswith(("_SECONDS", "_S"))}
        # the gateway drains, then finishes the longest request, within the supervisor's wait for it
        assert env["WHISPER_GATEWAY_GRACEFUL_SHUTDOWN_SECONDS"] >= config.serving.request_timeout_seconds
        assert (
            env["WHISPER_GATEWAY_DRAIN_SECONDS"] + env["WHISPER_GATEWAY_GRACEFUL_SHUTDOWN_SECONDS"]
            < env["WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S"]
        )
        # then Triton stops; all of it after the preStop sleep, before the kubelet's SIGKILL
        assert env["WHISPER_TRITON_EXIT_TIMEOUT_S"] < env["WHISPER_SUPERVISOR_TRITON_STOP_TIMEOUT_S"]
        assert (
            prestop + env["WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S"] + env["WHISPER_SUPERVISOR_TRITON_STOP_TIMEOUT_S"]
            < pod["terminationGracePeriodSeconds"]
        )


def test_prestop_falls_back_to_exec_before_kubernetes_1_30() -> None:
    deployment = next(iter(of_kind(synth(config_with(cluster={"kubernetes_version": "1.29"})), "Deployment").values()))
    assert _container(deployment)["lifecycle"]["preStop"] == {"exec": {"command": ["sleep", "30"]}}


def test_one_disruption_budget_per_group(config, manifests) -> None:
    budgets = of_kind(manifests, "PodDisruptionBudget")
    assert sorted(budgets) == ["whisper-g5", "whisper-g6e", "whisper-p5"]
    for group in config.gpu_groups:
        spec = budgets[f"whisper-{group.name}"]["spec"]
        assert spec["selector"]["matchLabels"][labels.GPU_GROUP_LABEL] == group.name
        assert spec["maxUnavailable"] == 1


def test_preflight_init_container_checks_the_group_engine(config, deployments) -> None:
    for group in config.gpu_groups:
        preflight = _container(deployments[f"whisper-{group.name}"], "preflight")
        command = preflight["command"]
        assert command[:3] == ["python3", "-m", "whisper_build.podstart.preflight"]
        args = dict(zip(command[3::2], command[4::2], strict=True))
        assert args["--engine"] == group.serving_engine and args["--gpu-group"] == group.name
        assert args["--model"] == config.model.name and args["--model-dir"] == "/models"
        assert args["--gpu-arch"] == group.arch
        build = args["--build-command"]
        assert "-m whisper_build.release.engine_build " in build and f"--expect-arch {group.arch}" in build
        assert preflight["resources"]["limits"]["nvidia.com/gpu"] == 1  # nvidia-smi needs the GPU


def test_ctranslate2_switch_reaches_the_pod() -> None:
    config = config_with(
        gpu_groups=[
            {"name": "g5", "instance_type": "ml.g5.2xlarge"},
            {"name": "g6e", "instance_type": "ml.g6e.2xlarge", "serving_engine": "ctranslate2"},
        ]
    )
    deployments = of_kind(synth(config), "Deployment")
    deployment = deployments["whisper-g6e"]
    env = _env(_container(deployment))
    assert env["WHISPER_TRITON_ENGINE__ENGINE"] == "ctranslate2"
    command = _container(deployment, "preflight")["command"]
    assert "ctranslate2" in command
    # the serving container loads the very folder the preflight checked, on the GPU, not tiny.en
    model_dir = Path(command[command.index("--model-dir") + 1])
    assert env["WHISPER_TRITON_ENGINE__MODEL_PATH"] == str(ctranslate2_model_dir(model_dir)) == "/models/ctranslate2"
    assert (env["WHISPER_TRITON_ENGINE__DEVICE"], env["WHISPER_TRITON_ENGINE__COMPUTE_TYPE"]) == ("cuda", "float16")
    # a tensorrt_llm group serves its published repository: no engine overrides
    assert "WHISPER_TRITON_ENGINE__MODEL_PATH" not in _env(_container(deployments["whisper-g5"]))


def test_the_image_serves_the_ctranslate2_model_the_pod_env_names(monkeypatch, tmp_path) -> None:
    # GIVEN a ctranslate2 group's pod env and the preflight's empty repository file
    from whisper_build.serving.supervisor import SupervisorSettings, resolve_model_repository
    from whisper_build.serving.triton_model.settings import TritonSettings

    config = config_with(
        gpu_groups=[{"name": "g6e", "instance_type": "ml.g6e.2xlarge", "serving_engine": "ctranslate2"}]
    )
    written = tmp_path / "model_repository"
    written.write_text("")
    with monkeypatch.context() as patch:
        for name, value in _env(_container(of_kind(synth(config), "Deployment")["whisper-g6e"])).items():
            patch.setenv(name, value)
        patch.setenv("WHISPER_MODEL_REPOSITORY_FILE", str(written))
        patch.setenv("WHISPER_SUPERVISOR_RENDERED_REPOSITORY_DIR", str(tmp_path / "rendered"))
        triton, supervisor = TritonSettings(), SupervisorSettings()
    # WHEN the supervisor resolves what to serve THEN the rendered config points at the mounted conversion
    config_text = (resolve_model_repository(triton, supervisor) / "whisper" / "config.pbtxt").read_text()
    for key, value in {
        "engine": "ctranslate2",
        "model_path": "/models/ctranslate2",
        "device": "cuda",
        "compute_type": "float16",
    }.items():
        assert f'key: "{key}"\n  value {{\n    string_value: "{value}"' in config_text


def test_one_scaled_object_per_group_on_its_capacity_weighted_utilization(config, manifests) -> None:
    scaled = of_kind(manifests, "ScaledObject")
    auth = of_kind(manifests, "TriggerAuthentication")
    assert sorted(scaled) == ["whisper-g5", "whisper-g6e", "whisper-p5"]
    assert [a["spec"] for a in auth.values()] == [{"podIdentity": {"provider": "aws"}}]
    for group in config.gpu_groups:
        spec = scaled[f"whisper-{group.name}"]["spec"]
        assert spec["scaleTargetRef"] == {"name": f"whisper-{group.name}"}
        assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (group.min_replicas, group.max_replicas)
        behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        assert (
            behavior["scaleDown"]["stabilizationWindowSeconds"] == config.autoscaling.scale_down_stabilization_seconds
        )
        assert spec["fallback"]["replicas"] >= max(group.min_replicas, 1) == group.baseline_replicas
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
        assert trigger["authenticationRef"] == {"name": next(iter(auth))}
        meta = trigger["metadata"]
        assert meta["awsRegion"] == config.region
        assert meta["serverAddress"] == (
            f"https://aps-workspaces.{config.region}.amazonaws.com/workspaces/ws-REPLACE-WITH-AMP-WORKSPACE-ID"
        )
        assert meta["query"] == scaling_utilization_query(group.name, config.serving.realtime_max_sessions)
        assert f'gpu_group="{group.name}"' in meta["query"]
        assert meta["threshold"] == str(config.autoscaling.target_utilization)
        assert meta["ignoreNullValues"] == "false"  # empty result -> error -> fallback, never 0


def test_nlb_service_spans_every_group(config, manifests, deployments) -> None:
    services = of_kind(manifests, "Service")
    (service,) = services.values()
    assert service["spec"]["type"] == "LoadBalancer"
    selector = service["spec"]["selector"]
    for deployment in deployments.values():
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
    annotations = service["metadata"]["annotations"]
    prefix = "service.beta.kubernetes.io/aws-load-balancer-"
    assert annotations[prefix + "type"] == "external"
    assert annotations[prefix + "nlb-target-type"] == "ip"
    assert annotations[prefix + "scheme"] == "internal"
    assert annotations[prefix + "healthcheck-protocol"] == "http"
    assert annotations[prefix + "healthcheck-path"] == "/ping"
    assert (
        annotations[prefix + "listener-attributes.TCP-80"]
        == f"tcp.idle_timeout.seconds={config.endpoint.idle_timeout_seconds}"
    )
    assert "deregistration_delay.timeout_seconds=" in annotations[prefix + "target-group-attributes"]
    assert all(isinstance(value, str) for value in annotations.values())
    assert not of_kind(manifests, "Ingress")


def test_alb_switch_creates_an_ingress_with_least_outstanding_requests() -> None:
    manifests = synth(config_with(THREE_GROUPS, endpoint={"kind": "alb", **PUBLIC_TLS_ENDPOINT}))
    (ingress,) = of_kind(manifests, "Ingress").values()
    (service,) = of_kind(manifests, "Service").values()
    assert service["spec"]["type"] == "ClusterIP"
    assert ingress["spec"]["ingressClassName"] == "alb"
    annotations = ingress["metadata"]["annotations"]
    assert (
        "load_balancing.algorithm.type=least_outstanding_requests"
        in annotations["alb.ingress.kubernetes.io/target-group-attributes"]
    )
    assert annotations["alb.ingress.kubernetes.io/scheme"] == "internet-facing"
    assert annotations["alb.ingress.kubernetes.io/target-type"] == "ip"
    assert annotations["alb.ingress.kubernetes.io/healthcheck-path"] == "/ping"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == service["metadata"]["name"]


def test_idle_timeout_shorter_than_a_request_is_refused() -> None:
    config = config_with(endpoint={"idle_timeout_seconds": 120}, serving={"request_timeout_seconds": 300})
    with pytest.raises(ValueError, match=r"endpoint.idle_timeout_seconds \(120\) must be greater than"):
        synth(config)


def test_idle_timeout_must_cover_the_queue_wait_plus_the_request() -> None:
    # GIVEN an idle timeout above the request timeout but below queue wait + request timeout
    config = config_with(endpoint={"idle_timeout_seconds": 320}, serving={"request_timeout_seconds": 300})
    with pytest.raises(
        ValueError,
        match=r"endpoint.idle_timeout_seconds \(320\) must be greater than serving.queue_timeout_seconds \(30\) "
        r"\+ serving.request_timeout_seconds \(300\) = 330",
    ):
        synth(config)
    # ... a shorter queue wait makes it fit, and the gateway is told that queue wait
    manifests = synth(
        config_with(
            endpoint={"idle_timeout_seconds": 320},
            serving={"request_timeout_seconds": 300, "queue_timeout_seconds": 10},
        )
    )
    for deployment in of_kind(manifests, "Deployment").values():
        assert _env(_container(deployment))["WHISPER_GATEWAY_QUEUE_TIMEOUT_SECONDS"] == "10"


@pytest.mark.parametrize("kind", ["alb", "nlb"])
def test_gateway_keep_alive_outlasts_the_load_balancer_idle_timeout(kind) -> None:
    config = config_with(endpoint={"kind": kind, "idle_timeout_seconds": 900}, serving={"request_timeout_seconds": 600})
    for deployment in of_kind(synth(config), "Deployment").values():
        assert int(_env(_container(deployment))["WHISPER_GATEWAY_KEEP_ALIVE_SECONDS"]) > 900


def test_a_keep_alive_shorter_than_the_alb_idle_timeout_is_refused() -> None:
    alb, nlb = config_with(endpoint={"kind": "alb"}), config_with(endpoint={"kind": "nlb"})
    idle = alb.endpoint.idle_timeout_seconds
    with pytest.raises(
        ValueError, match=rf"KEEP_ALIVE_SECONDS=5\) must be greater than endpoint.idle_timeout_seconds \({idle}\)"
    ):
        timeouts.check_keep_alive(alb, 5)  # uvicorn's default
    timeouts.check_keep_alive(alb, idle + 1)
    timeouts.check_keep_alive(nlb, 5)  # the rule is about the ALB's connection reuse


def test_a_prestop_shorter_than_deregistration_fails_synthesis(monkeypatch) -> None:
    monkeypatch.setattr(workload, "PRESTOP_SLEEP_SECONDS", DEREGISTRATION_PROPAGATION_SECONDS - 1)
    with pytest.raises(ValueError, match=r"preStop sleep \(29 s\) must be at least 30 s"):
        synth(three_groups())
    with pytest.raises(ValueError, match=r"shorter than terminationGracePeriodSeconds"):
        timeouts.check_prestop(400, 350)


def test_the_serving_namespace_asks_for_load_balancer_readiness_gates(manifests) -> None:
    namespace = of_kind(manifests, "Namespace")["whisper"]
    assert namespace["metadata"]["labels"]["elbv2.k8s.aws/pod-readiness-gate-inject"] == "enabled"
    # the gate works with IP targets only (the controller's doc): both endpoint kinds use them
    service = next(iter(of_kind(manifests, "Service").values()))
    assert service["metadata"]["annotations"]["service.beta.kubernetes.io/aws-load-balancer-nlb-target-type"] == "ip"


def test_node_autoscaling_switch(deployments) -> None:
    assert not of_kind(synth(three_groups()), "NodePool")
    config = config_with(THREE_GROUPS, cluster={"node_autoscaling": True})
    manifests = synth(config)
    classes = of_kind(manifests, "HyperpodNodeClass")
    pools = of_kind(manifests, "NodePool")
    assert sorted(classes) == sorted(pools) == ["whisper-g5", "whisper-g6e", "whisper-p5"]
    for group in config.gpu_groups:
        name = f"whisper-{group.name}"
        assert classes[name]["spec"] == {"instanceGroups": [group.name]}
        template = pools[name]["spec"]["template"]
        assert template["spec"]["nodeClassRef"] == {
            "group": "karpenter.sagemaker.amazonaws.com",
            "kind": "HyperpodNodeClass",
            "name": name,
        }
        node_labels = dict(template["metadata"]["labels"])
        for requirement in template["spec"]["requirements"]:
            assert requirement["operator"] == "In"
            node_labels[requirement["key"]] = requirement["values"][0]
        # Karpenter only provisions for a pod whose required node labels the NodePool defines
        terms = _pod(deployments[name])["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        for expression in terms["nodeSelectorTerms"][0]["matchExpressions"]:
            assert node_labels.get(expression["key"]) in expression["values"]
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in template["spec"]["taints"]


def test_synth_cli_writes_plain_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k8s"
    assert synth_cli.main(["--config", str(THREE_GROUPS), "--out", str(out), "--bucket", "my-models"]) == 0
    files = sorted(p.name for p in out.glob("*.yaml"))
    assert files == [
        "0000-whisper-serving.k8s.yaml",
        "0001-whisper-endpoint.k8s.yaml",
        "0002-whisper-autoscaling.k8s.yaml",
        "0003-whisper-gpu-metrics.k8s.yaml",
    ]
    assert "bucketName: my-models" in (out / files[0]).read_text()
    assert "REPLACE-WITH-AMP-WORKSPACE-ID" in (out / files[2]).read_text()
    assert "kind: DaemonSet" in (out / files[3]).read_text()
    assert capsys.readouterr().out.count("wrote ") == 4

    bad = tmp_path / "bad.yaml"
    bad.write_text("region: us-east-1\ngpu_groups: []\n")
    assert synth_cli.main(["--config", str(bad), "--out", str(out)]) == 2
    assert "gpu_groups" in capsys.readouterr().err


def test_without_observability_there_is_no_keda_and_replicas_are_fixed(tmp_path: Path) -> None:
    config = config_with(THREE_GROUPS, observability={"enabled": False, "grafana": False})
    config_file = tmp_path / "no-observability.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    out = tmp_path / "k8s"
    assert synth_cli.main(["--config", str(config_file), "--out", str(out)]) == 0
    text = "\n".join(p.read_text() for p in sorted(out.glob("*.yaml")))
    assert "kind: ScaledObject" not in text and "kind: TriggerAuthentication" not in text
    assert "kind: DaemonSet" not in text  # no scraper, no GPU metrics exporter
    manifests = [doc for p in sorted(out.glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text())]
    for deployment in of_kind(manifests, "Deployment").values():
        group = deployment["metadata"]["labels"][labels.GPU_GROUP_LABEL]
        expected = max(next(g for g in config.gpu_groups if g.name == group).min_replicas, 1)
        assert deployment["spec"]["replicas"] == expected


# ----------------------------------------------------------------------------- GPU metrics (DCGM exporter)


@pytest.fixture(scope="module")
def daemonsets(manifests):
    return of_kind(manifests, "DaemonSet")


def _jobs(config):
    return {job["job_name"]: job for job in scrape_config(config)["scrape_configs"]}


def _required_node_labels(pod):
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (term,) = terms
    assert all(e["operator"] == "In" and len(e["values"]) == 1 for e in term["matchExpressions"])
    return {e["key"]: e["values"][0] for e in term["matchExpressions"]}


def test_one_gpu_exporter_per_group_on_its_serving_nodes(config, deployments, daemonsets) -> None:
    assert len(daemonsets) == len(config.gpu_groups) == 3
    for group in config.gpu_groups:
        (exporter,) = [d for d in daemonsets.values() if d["metadata"]["labels"][labels.GPU_GROUP_LABEL] == group.name]
        pod, serving = _pod(exporter), _pod(deployments[f"whisper-{group.name}"])
        required = _required_node_labels(pod)
        # the group's own nodes (its instance-group label and instance type) ...
        assert required == {labels.GPU_GROUP_LABEL: group.name, labels.INSTANCE_TYPE_LABEL: group.instance_type}
        # ... every node a serving pod of the group may land on, also once HyperPod marks it unhealthy
        assert required.items() <= _required_node_labels(serving).items()
        assert all(t in pod["tolerations"] for t in serving["tolerations"])
        assert {"key": HEALTH, "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert exporter["spec"]["selector"]["matchLabels"] == exporter["spec"]["template"]["metadata"]["labels"]


def test_the_dcgm_scrape_job_keeps_exactly_the_exporters_with_their_group_labels(config, manifests) -> None:
    # GIVEN every pod of the charts as Kubernetes discovery would list it, WHEN the scrape config's
    # own relabel rules run, THEN the DCGM job keeps one target per exporter, labelled with its group
    jobs = _jobs(config)
    dcgm = scraped_by(jobs[queries.JOB_DCGM], manifests)
    assert sorted((t["gpu_group"], t["gpu_arch"], t["instance_type"]) for t in dcgm) == sorted(
        (g.name, g.arch, g.instance_type) for g in config.gpu_groups
    )
    assert all(t["namespace"] == "whisper-gpu-metrics" and t["pod"].startswith("dcgm-exporter-") for t in dcgm)
    # and the serving jobs keep only serving pods (no exporter is counted as a gateway or Triton)
    for name in (queries.JOB_GATEWAY, queries.JOB_TRITON):
        kept = scraped_by(jobs[name], manifests)
        assert len(kept) == len(config.gpu_groups)
        assert all(t["pod"].startswith("whisper-") and t["namespace"] == "whisper" for t in kept)


def test_gpu_exporter_runs_with_only_the_privilege_dcgm_needs(daemonsets, manifests) -> None:
    namespaces = {n["metadata"]["name"]: n["metadata"]["labels"] for n in of_kind(manifests, "Namespace").values()}
    enforce = "pod-security.kubernetes.io/enforce"
    assert namespaces["whisper"][enforce] == "restricted"  # the serving pods stay restricted
    for exporter in daemonsets.values():
        assert namespaces[exporter["metadata"]["namespace"]][enforce] == "privileged"  # CAP_SYS_ADMIN is not baseline
        pod = _pod(exporter)
        (container,) = pod["containers"]
        context = container["securityContext"]
        assert context["capabilities"] == {"add": ["SYS_ADMIN"], "drop": ["ALL"]}
        assert context["allowPrivilegeEscalation"] is False and context["privileged"] is False
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        assert not any(key in pod for key in ("hostNetwork", "hostPID", "hostIPC", "volumes"))
        # no GPU taken from serving; small, bounded requests
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
        image, _, tag = container["image"].rpartition(":")
        assert image == "nvcr.io/nvidia/k8s/dcgm-exporter" and tag and tag != "latest"
        assert {"name": "metrics", "containerPort": 9400, "protocol": "TCP"} in container["ports"]
        assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
