"""One GPU group's serving workload: a Deployment of the serving image and its PodDisruptionBudget.

The pod runs the preflight check (``whisper_build/podstart/preflight.py``) as an init container, then the
serving image (Triton + gateway, ``docs/contracts.md`` §6 ports). It is pinned to the group's
HyperPod nodes, takes one GPU, and drains on termination: the ``preStop`` sleep lets the
endpoints controller and the load balancer stop sending new requests, then SIGTERM makes the
gateway answer ``/ping`` 503 and finish in-flight requests (``WHISPER_GATEWAY_DRAIN_SECONDS``,
``WHISPER_GATEWAY_GRACEFUL_SHUTDOWN_SECONDS``) before the grace period ends.
"""

from __future__ import annotations

import shlex

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, probes, security
from k8s_charts.placement import affinity, gpu_tolerations, topology_spread
from k8s_charts.pod_spec import (
    MODEL_MOUNT_PATH,
    RUN_DIR,
    one_pod_at_a_time,
    serving_image_metadata,
    serving_mounts,
    serving_volumes,
)
from k8s_charts.sizing import gateway_workers, pod_resources, predicted_rtf, quantities
from settings.schema import DeploymentConfig, GpuGroup
from whisper_build.release.invocations import engine_build_command

MODEL_REPOSITORY_FILE = f"{RUN_DIR}/model_repository"
"""The preflight writes the resolved Triton model repository path here; the supervisor reads it."""
MIN_TRITON_BATCH = 2
"""``BatchingConfig.max_batch_size`` lower bound (dynamic batching needs > 1)."""

PRESTOP_SLEEP_SECONDS = 30
"""Time for the endpoint removal to reach kube-proxy and the load balancer before SIGTERM
(``k8s_charts.timeouts.DEREGISTRATION_PROPAGATION_SECONDS`` says why 30 s; checked at synthesis)."""
DRAIN_SECONDS = 15
"""After SIGTERM the gateway answers ``/ping`` 503, refuses new live sessions and has every open one
finish its turn in progress and close with 1012 (docs/gateway.md) this long before uvicorn stops
accepting and closes what is left: a full pod's final windows all at once, at the group's window rate."""
TRITON_STOP_SECONDS = 10
"""The supervisor stops Triton after the gateway (no requests left in flight): this long, then SIGKILL."""
SHUTDOWN_MARGIN_SECONDS = 5
KEEP_ALIVE_MARGIN_SECONDS = 5

TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"
"""The preflight's and the supervisor's last message shows in ``kubectl describe pod`` (``Last
State: Terminated … Message``): the supervisor writes ``/dev/termination-log``; a container that
exits with an error without writing it gets the tail of its log (the preflight's clear message)."""
HEARTBEAT_FILE = f"{RUN_DIR}/supervisor.heartbeat"
"""Touched by the supervisor every poll; the gateway's ``/live`` fails when it goes stale."""

PORT_GATEWAY = "http"
PORT_GATEWAY_METRICS = "gateway-metrics"
PORT_TRITON_METRICS = "triton-metrics"

PREFLIGHT_RESOURCES = {"cpu": "500m", "memory": "512Mi"}
MIB = 1024 * 1024


def graceful_shutdown_seconds(config: DeploymentConfig) -> int:
    """How long the gateway waits for in-flight requests after SIGTERM: the longest request + 10 s."""
    return config.serving.request_timeout_seconds + 10


def gateway_stop_seconds(config: DeploymentConfig) -> int:
    """How long the image's supervisor waits for the gateway after SIGTERM: drain + graceful shutdown + 5 s."""
    return DRAIN_SECONDS + graceful_shutdown_seconds(config) + 5


def gateway_keep_alive_seconds(config: DeploymentConfig) -> int:
    """The gateway's keep-alive (uvicorn ``timeout_keep_alive``), longer than the load balancer's idle timeout.

    A load balancer reuses idle connections to its targets; when the target closes one first, a
    request sent on it in that instant fails with 502. AWS: "configure the idle timeout of your
    application to be larger than the idle timeout configured for the load balancer" (Application
    Load Balancers, "Connection idle timeout",
    https://docs.aws.amazon.com/elasticloadbalancing/latest/application/application-load-balancers.html#connection-idle-timeout).
    uvicorn's default is 5 s.
    """
    return config.endpoint.idle_timeout_seconds + KEEP_ALIVE_MARGIN_SECONDS


def termination_grace_seconds(config: DeploymentConfig) -> int:
    """``terminationGracePeriodSeconds``: preStop + gateway stop + Triton stop + margin (> request timeout)."""
    return PRESTOP_SLEEP_SECONDS + gateway_stop_seconds(config) + TRITON_STOP_SECONDS + SHUTDOWN_MARGIN_SECONDS


def _env(values: dict[str, object]) -> list[k8s.EnvVar]:
    return [k8s.EnvVar(name=key, value=str(value)) for key, value in values.items()]


def engine_env(config: DeploymentConfig, group: GpuGroup) -> dict[str, object]:
    """``WHISPER_TRITON_ENGINE__*`` / ``BATCHING__*`` the group's engine profile asks the chart to set.

    Empty when the published model repository carries the engine parameters (``tensorrt_llm``).
    Else the model folder on the mount (:func:`engine_model_path`), CUDA and the profile's compute
    type (``model.dtype`` when it names none; without these a ``ctranslate2`` engine would load its
    local-dev default, the bundled tiny.en). An engine without beam search gets beam size 1 (the
    fleet's beam width 1 is checked at synthesis). One whose limits no build fixed
    (``chart_sizes_batches``, ``torch``) gets ``model.max_output_len`` tokens per window,
    ``model.max_batch_size`` windows per call and per Triton batch (the largest batch bucket) and
    ``model.torch_cuda_graphs`` (false = the eager fall-back).
    """
    engine = group.engine
    if not engine.chart_engine_params:
        return {}
    model = config.model
    env: dict[str, object] = {
        "WHISPER_TRITON_ENGINE__MODEL_PATH": engine_model_path(group),
        "WHISPER_TRITON_ENGINE__DEVICE": "cuda",
        "WHISPER_TRITON_ENGINE__COMPUTE_TYPE": engine.compute_type or model.dtype,
    }
    if not engine.beam_search:
        env["WHISPER_TRITON_ENGINE__BEAM_SIZE"] = 1
    if engine.chart_sizes_batches:
        env |= {
            "WHISPER_TRITON_ENGINE__MAX_NEW_TOKENS": model.max_output_len,
            "WHISPER_TRITON_ENGINE__MAX_ENGINE_BATCH": model.max_batch_size,
            "WHISPER_TRITON_ENGINE__CUDA_GRAPHS": str(model.torch_cuda_graphs).lower(),
            "WHISPER_TRITON_BATCHING__MAX_BATCH_SIZE": max(MIN_TRITON_BATCH, model.max_batch_size),
        }
    return env


def engine_model_path(group: GpuGroup) -> str:
    """Where the group's engine reads its model in the pod: the mount, or the profile's folder in it.

    A ``checkpoint`` group's volume mounts ``models/<model>/hf/`` itself
    (:func:`k8s_charts.storage.hf_checkpoint_volume`); a ``conversion`` reads
    ``models/<model>/<target>/<folder>/`` (the preflight checks the same folder,
    ``whisper_build.podstart.preflight.ctranslate2_model_dir``).
    """
    folder = group.engine.folder
    return f"{MODEL_MOUNT_PATH}/{folder}" if folder else MODEL_MOUNT_PATH


def auth_env(config: DeploymentConfig, api_keys_secret_arn: str | None) -> dict[str, object]:
    """``WHISPER_GATEWAY_API_KEYS_SECRET`` (the secret's ARN) when ``endpoint.auth`` is ``api_key``.

    Only for this project's Deployments: with ``serving.target: inference_operator`` callers
    authenticate to the SageMaker endpoint with IAM, and the worker's gateway checks no key.

    Raises:
        ValueError: authentication is on but no secret ARN was given.
    """
    if config.endpoint.auth != "api_key" or config.serving.target != "deployments":
        return {}
    if api_keys_secret_arn is None:
        raise ValueError("endpoint.auth is api_key but the charts got no API keys secret ARN")
    return {"WHISPER_GATEWAY_API_KEYS_SECRET": api_keys_secret_arn}


def metrics_env(config: DeploymentConfig) -> dict[str, object]:
    """Where the gateway serves ``/metrics``: its own port (Deployments) or the traffic port.

    Inference operator workers use the traffic port: the operator declares one port, and its SageMaker
    endpoint forwards only ``/invocations`` and ``/ping``. Matches :func:`observability.scrape_config.scrape_jobs`.
    """
    if config.serving.target == "deployments":
        return {"WHISPER_GATEWAY_METRICS_PORT": config.serving.gateway_metrics_port}
    return {"WHISPER_GATEWAY_METRICS_ON_TRAFFIC_PORT": "true"}


def serving_env(config: DeploymentConfig, group: GpuGroup, api_keys_secret_arn: str | None = None) -> dict[str, object]:
    """Environment of the serving container (the image's settings classes read it).

    ``WHISPER_GATEWAY_*`` (``whisper_build.serving.gateway.settings``), ``WHISPER_TRITON_*`` with the group's
    engine (``whisper_build.serving.triton_model.settings``; :func:`engine_env` from its engine profile),
    ``WHISPER_SUPERVISOR_*`` stop timeouts and the file the preflight writes
    (``whisper_build.serving.supervisor``). With ``endpoint.auth: api_key`` the gateway reads its
    keys from the secret :func:`auth_env` names.
    """
    serving = config.serving
    return {
        "WHISPER_GATEWAY_HOST": "0.0.0.0",  # noqa: S104 (pod IP; the Service/NLB reach it)
        "WHISPER_GATEWAY_PORT": serving.gateway_port,
        **metrics_env(config),
        **auth_env(config, api_keys_secret_arn),
        "WHISPER_GATEWAY_TRITON_URL": f"127.0.0.1:{serving.triton_grpc_port}",
        # its metrics bind the pod IP (below), so loopback reaches them too (health.py: busy vs hung)
        "WHISPER_GATEWAY_TRITON_METRICS_URL": f"http://127.0.0.1:{serving.triton_metrics_port}/metrics",
        "WHISPER_GATEWAY_CAPACITY": group.effective_capacity,
        "WHISPER_GATEWAY_WORKERS": gateway_workers(
            pod_resources(group.instance, group.pods_per_node), group.effective_capacity
        ),
        "WHISPER_GATEWAY_MAX_BODY_BYTES": serving.max_body_mb * MIB,
        "WHISPER_GATEWAY_MAX_AUDIO_SECONDS": serving.max_audio_seconds,
        "WHISPER_GATEWAY_REQUEST_TIMEOUT_SECONDS": serving.request_timeout_seconds,
        "WHISPER_GATEWAY_PREDICTED_RTF": round(predicted_rtf(config, group), 6),
        "WHISPER_GATEWAY_DRAIN_SECONDS": DRAIN_SECONDS,
        "WHISPER_GATEWAY_GRACEFUL_SHUTDOWN_SECONDS": graceful_shutdown_seconds(config),
        "WHISPER_GATEWAY_QUEUE_TIMEOUT_SECONDS": serving.queue_timeout_seconds,
        "WHISPER_GATEWAY_REALTIME_MAX_SESSIONS": serving.realtime_max_sessions,
        "WHISPER_GATEWAY_KEEP_ALIVE_SECONDS": gateway_keep_alive_seconds(config),
        "WHISPER_GATEWAY_SUPERVISOR_HEARTBEAT_FILE": HEARTBEAT_FILE,
        "WHISPER_TRITON_ENGINE__ENGINE": group.serving_engine,
        **engine_env(config, group),
        # Triton's HTTP and gRPC on the pod's loopback only (the gateway is their one client; no
        # probe uses them), its metrics on the pod IP for the scraper (NetworkPolicy metrics-ingress)
        "WHISPER_TRITON_HOST": "127.0.0.1",
        "WHISPER_TRITON_METRICS_HOST": "0.0.0.0",  # noqa: S104
        "WHISPER_TRITON_HTTP_PORT": serving.triton_http_port,
        "WHISPER_TRITON_GRPC_PORT": serving.triton_grpc_port,
        "WHISPER_TRITON_METRICS_PORT": serving.triton_metrics_port,
        "WHISPER_TRITON_EXIT_TIMEOUT_S": TRITON_STOP_SECONDS - 2,
        "WHISPER_MODEL_REPOSITORY_FILE": MODEL_REPOSITORY_FILE,
        "WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S": gateway_stop_seconds(config),
        "WHISPER_SUPERVISOR_TRITON_STOP_TIMEOUT_S": TRITON_STOP_SECONDS,
        "WHISPER_SUPERVISOR_HEARTBEAT_FILE": HEARTBEAT_FILE,
        "HOME": "/tmp",  # read-only root filesystem: caches go to the /tmp emptyDir
    }


def preflight_command(
    config: DeploymentConfig, bucket_name: str, model_dir: str, repository_file: str, mig_profile: str | None
) -> list[str]:
    """``python -m whisper_build.podstart.preflight`` with what every serving pod passes.

    The mount, the model, the bucket and its region (for messages), the MIG profile of its slice and the file it
    writes the resolved model repository to.
    """
    return [
        "python3", "-m", "whisper_build.podstart.preflight",
        "--model-dir", model_dir,
        "--model", config.model.name,
        "--bucket", bucket_name,
        "--region", config.region,
        *(["--mig-profile", mig_profile] if mig_profile else []),
        "--write-model-repository", repository_file,
    ]  # fmt: skip


def preflight_args(config: DeploymentConfig, group: GpuGroup, bucket_name: str) -> list[str]:
    """Command line of the preflight init container: :func:`preflight_command` plus the group.

    ``--build-command`` is the engine-build Job's exact argv for the group's architecture
    (:func:`whisper_build.release.invocations.engine_build_command`), so a failing pod names the command to run;
    a ``torch`` group builds no engine and gets none.
    """
    build = []
    if group.builds_engine:
        build = ["--build-command", shlex.join(engine_build_command(config, group.engine_target, bucket_name))]
    return [
        *preflight_command(config, bucket_name, MODEL_MOUNT_PATH, MODEL_REPOSITORY_FILE, group.mig_profile),
        "--engine", group.serving_engine,
        "--gpu-group", group.name,
        "--gpu-arch", group.arch,
        *build,
    ]  # fmt: skip


def _prestop(config: DeploymentConfig) -> k8s.Lifecycle:
    # The sleep action needs Kubernetes >= 1.30 (PodLifecycleSleepAction, beta and on by default).
    major, minor = (int(part) for part in config.cluster.kubernetes_version.split("."))
    if (major, minor) >= (1, 30):
        handler = k8s.LifecycleHandler(sleep=k8s.SleepAction(seconds=PRESTOP_SLEEP_SECONDS))
    else:
        handler = k8s.LifecycleHandler(exec=k8s.ExecAction(command=["sleep", str(PRESTOP_SLEEP_SECONDS)]))
    return k8s.Lifecycle(pre_stop=handler)


def preflight_container(config: DeploymentConfig, group: GpuGroup, image: str, bucket_name: str) -> k8s.Container:
    """Init container ``preflight`` of a pod running Triton on ``group`` (:func:`preflight_args`).

    It runs nvidia-smi on the pod's GPU (or MIG slice), which the kubelet hands on to the main container.
    """
    resources = quantities(PREFLIGHT_RESOURCES) | {group.gpu_resource: k8s.Quantity.from_number(1)}
    return k8s.Container(
        name="preflight",
        image=image,
        command=preflight_args(config, group, bucket_name),
        env=_env({"HOME": "/tmp"}),
        resources=k8s.ResourceRequirements(requests=resources, limits=resources),
        security_context=security.container_security_context(),
        volume_mounts=serving_mounts(shm=False),
        termination_message_policy=TERMINATION_MESSAGE_POLICY,
    )


class GpuGroupWorkload(Construct):
    """Deployment + PodDisruptionBudget of one GPU group.

    Args:
        config: The deployment config.
        group: The GPU group served.
        image: Serving image reference (``repository:tag``).
        bucket_name: Model bucket (for the preflight's messages).
        claim_name: PersistentVolumeClaim of the group's architecture, or of the checkpoint for ``torch``
            (:class:`k8s_charts.storage.ModelVolume`).
        replicas: Fixed pod count, or ``None`` when an autoscaler (KEDA) owns it.
        service_account_name: The pods' ServiceAccount (EKS Pod Identity for the API keys secret).
        api_keys_secret_arn: Secret the gateway reads its API keys from (``endpoint.auth: api_key``).

    Attributes:
        name: Deployment name (the ScaledObject's target).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: DeploymentConfig,
        group: GpuGroup,
        image: str,
        bucket_name: str,
        claim_name: str,
        replicas: int | None = None,
        service_account_name: str | None = None,
        api_keys_secret_arn: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.name = naming.workload_name(group)
        namespace = config.serving.namespace
        pod_labels = naming.group_labels(group)
        size = pod_resources(group.instance, group.pods_per_node)
        serving = config.serving
        # one GPU, or one MIG slice of the group's profile (mixed strategy: nvidia.com/mig-<profile>)
        gpu = {group.gpu_resource: k8s.Quantity.from_number(1)}
        main_resources = quantities({"cpu": size.cpu, "memory": size.memory}) | gpu
        preflight = preflight_container(config, group, image, bucket_name)
        container = k8s.Container(
            name="serving",
            image=image,
            ports=[
                k8s.ContainerPort(name=PORT_GATEWAY, container_port=serving.gateway_port, protocol="TCP"),
                k8s.ContainerPort(
                    name=PORT_GATEWAY_METRICS, container_port=serving.gateway_metrics_port, protocol="TCP"
                ),
                # Triton's HTTP/gRPC ports are not declared: they listen on the pod's loopback only
                k8s.ContainerPort(name=PORT_TRITON_METRICS, container_port=serving.triton_metrics_port, protocol="TCP"),
            ],
            env=_env(serving_env(config, group, api_keys_secret_arn)),
            resources=k8s.ResourceRequirements(requests=main_resources, limits=main_resources),
            startup_probe=probes.startup_probe(PORT_GATEWAY),
            readiness_probe=probes.readiness_probe(PORT_GATEWAY),
            liveness_probe=probes.liveness_probe(PORT_GATEWAY),
            termination_message_policy=TERMINATION_MESSAGE_POLICY,
            lifecycle=_prestop(config),
            security_context=security.container_security_context(),
            volume_mounts=serving_mounts(shm=True),
        )
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=serving_image_metadata(self.name, namespace, pod_labels),
            spec=k8s.DeploymentSpec(
                # with KEDA no `replicas`: its HPA owns the count and re-applying must not reset it
                replicas=replicas,
                selector=k8s.LabelSelector(match_labels=pod_labels),
                # a surge pod needs a free GPU that a fixed-size instance group rarely has; the other
                # groups keep serving the one endpoint while this group rolls one pod at a time
                strategy=one_pod_at_a_time(),
                progress_deadline_seconds=probes.ENGINE_LOAD_BUDGET_SECONDS + 600,
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=pod_labels),
                    spec=k8s.PodSpec(
                        init_containers=[preflight],
                        containers=[container],
                        volumes=serving_volumes(claim_name, size.shm),
                        affinity=affinity(group),
                        tolerations=gpu_tolerations(),
                        topology_spread_constraints=topology_spread(pod_labels),
                        security_context=security.pod_security_context(),
                        termination_grace_period_seconds=termination_grace_seconds(config),
                        service_account_name=service_account_name,
                        # EKS Pod Identity injects its own projected token; the pods never call the Kubernetes API
                        automount_service_account_token=False,
                        enable_service_links=False,
                    ),
                ),
            ),
        )
        k8s.KubePodDisruptionBudget(
            self,
            "Budget",
            metadata=k8s.ObjectMeta(name=self.name, namespace=namespace, labels=pod_labels),
            spec=k8s.PodDisruptionBudgetSpec(
                selector=k8s.LabelSelector(match_labels=pod_labels),
                max_unavailable=k8s.IntOrString.from_number(1),
                # a crash-looping pod must not block HyperPod from draining and replacing a node
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
        )
