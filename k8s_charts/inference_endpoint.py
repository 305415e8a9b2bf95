"""The ``inference_operator`` serving target: one HyperPod ``InferenceEndpointConfig`` per resource shape.

With ``serving.target: inference_operator`` the HyperPod inference operator (EKS add-on
``amazon-sagemaker-hyperpod-inference``, :mod:`stacks.inference_operator`) runs the serving pods
instead of this project's Deployments, Service and KEDA objects. Entry points:
:class:`WhisperInferenceEndpoint` (what each config gets, in its docstring), :func:`resource_shapes`
(whole-GPU groups share one shape, sized to the smallest; each MIG profile gets its own).
``instanceTypes`` lists every type of its GPU groups in ``capacity.group_priority`` order.
Docs: docs/serving-targets.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, probes
from k8s_charts.autoscaling import amp_server_address
from k8s_charts.imports.com.amazon.aws.sagemaker import inference as iec
from k8s_charts.inputs import ChartInputs
from k8s_charts.sizing import pod_resources
from k8s_charts.workload import preflight_command, serving_env
from observability.queries import endpoint_utilization_query
from settings import names, storage
from settings.schema import DeploymentConfig, GpuGroup

MODEL_MOUNT_PATH = "/opt/ml/model"
"""Where the operator mounts ``modelSourceConfig`` (CRD ``worker.modelVolumeMount.mountPath`` default)."""
MODEL_VOLUME_NAME = "model-weights"
MODEL_REPOSITORY_FILE = "/tmp/whisper-model-repository"
"""The preflight writes the selected engine's Triton model repository here; the supervisor reads it."""
INVOCATION_PATH = "invocations"
"""``invocationEndpoint``: the path after ``http://<host>:<port>/`` (CRD description)."""
TLS_CERTIFICATE_PREFIX = "inference-operator-certificates/"
TRIGGER_NAME = "utilization"
PORT_NAME = "http"
"""``worker.modelInvocationPort.name`` (the CRD allows ``http`` or ``grpc``)."""


@dataclass(frozen=True)
class ResourceShape:
    """GPU groups served by one ``InferenceEndpointConfig``.

    Attributes:
        mig_profile: ``None`` for whole GPUs, else the MIG profile every group of the shape uses.
        groups: The groups, in ``gpu_groups`` order.
    """

    mig_profile: str | None
    groups: tuple[GpuGroup, ...]

    @property
    def suffix(self) -> str:
        """``""`` for whole GPUs, ``-mig-1g-10gb`` for a MIG profile (no dots: Kubernetes and SageMaker names)."""
        return f"-mig-{storage.kubernetes_name(self.mig_profile)}" if self.mig_profile else ""

    @property
    def smallest(self) -> GpuGroup:
        """The group whose pods get the least CPU, memory and capacity: the shape is sized to it."""
        return min(
            self.groups,
            key=lambda g: (pod_resources(g.instance, g.pods_per_node).memory_mib, g.effective_capacity),
        )


def resource_shapes(config: DeploymentConfig) -> list[ResourceShape]:
    """One shape for the whole-GPU groups (if any), then one per MIG profile, in ``gpu_groups`` order."""
    shapes: dict[str | None, list[GpuGroup]] = {}
    for group in config.gpu_groups:
        shapes.setdefault(group.mig_profile, []).append(group)
    return [ResourceShape(profile, tuple(groups)) for profile, groups in shapes.items()]


def shape_instance_types(config: DeploymentConfig, shape: ResourceShape) -> list[str]:
    """``spec.instanceTypes`` of a shape, e.g. ``["ml.g6e.2xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge"]``.

    Its groups by ``capacity.group_priority`` (unlisted groups after, in config order), each group's
    ``instance_types`` in order, without repeats.
    """
    rank = {name: index for index, name in enumerate(config.capacity.group_priority or [])}
    groups = sorted(shape.groups, key=lambda group: rank.get(group.name, len(rank)))
    return list(dict.fromkeys(instance_type for group in groups for instance_type in group.instance_types))


def endpoint_config_name(shape: ResourceShape) -> str:
    """Kubernetes name of a shape's ``InferenceEndpointConfig``, e.g. ``whisper``, ``whisper-mig-1g-10gb``."""
    return f"{naming.app_labels()['app.kubernetes.io/name']}{shape.suffix}"


def sagemaker_endpoint_name(config: DeploymentConfig, shape: ResourceShape) -> str:
    """``endpointName`` (the SageMaker endpoint callers invoke), e.g. ``whisper-hyperpod``.

    :func:`settings.names.sagemaker_endpoint_name` of the shape's MIG profile (``make destroy``'s
    billing check uses the same names).

    Raises:
        ValueError: longer than SageMaker's 63 characters (shorten ``project_name``).
    """
    return names.sagemaker_endpoint_name(config, shape.mig_profile)


def worker_command(config: DeploymentConfig, shape: ResourceShape, bucket_name: str) -> list[str]:
    """The worker's command: the preflight selects this GPU's engine, then ``exec``s the supervisor."""
    return [
        *preflight_command(config, bucket_name, MODEL_MOUNT_PATH, MODEL_REPOSITORY_FILE, shape.mig_profile),
        "--select-engine",
        "--exec",
        "python3",
        "-m",
        "whisper_build.serving.supervisor",
    ]


def worker_env(config: DeploymentConfig, shape: ResourceShape) -> dict[str, object]:
    """Serving environment of the smallest group (its capacity) with the operator's paths.

    Gateway authentication hook: callers of this target are authenticated by IAM (SageMaker
    ``InvokeEndpoint`` is SigV4-signed and carries no API key), so the gateway's API-key check stays
    off here — this environment must never name an API-key secret (docs/serving-targets.md).
    """
    env = serving_env(config, shape.smallest)
    env["WHISPER_MODEL_REPOSITORY_FILE"] = MODEL_REPOSITORY_FILE
    return env


def _probes(config: DeploymentConfig) -> iec.InferenceEndpointConfigSpecWorkerProbes:
    """The Deployments target's probes, on the worker's port number.

    Same paths and timings as :mod:`k8s_charts.probes`: startup and liveness on the gateway's ``/live``,
    readiness on ``/ping``.
    """
    port = config.serving.gateway_port
    startup, readiness, liveness = (
        probe(PORT_NAME) for probe in (probes.startup_probe, probes.readiness_probe, probes.liveness_probe)
    )
    return iec.InferenceEndpointConfigSpecWorkerProbes(
        startup_probe=iec.InferenceEndpointConfigSpecWorkerProbesStartupProbe(
            http_get=iec.InferenceEndpointConfigSpecWorkerProbesStartupProbeHttpGet(
                path=_path(startup),
                port=iec.InferenceEndpointConfigSpecWorkerProbesStartupProbeHttpGetPort.from_number(port),
                scheme="HTTP",
            ),
            period_seconds=startup.period_seconds,
            failure_threshold=startup.failure_threshold,
            timeout_seconds=startup.timeout_seconds,
        ),
        readiness_probe=iec.InferenceEndpointConfigSpecWorkerProbesReadinessProbe(
            http_get=iec.InferenceEndpointConfigSpecWorkerProbesReadinessProbeHttpGet(
                path=_path(readiness),
                port=iec.InferenceEndpointConfigSpecWorkerProbesReadinessProbeHttpGetPort.from_number(port),
                scheme="HTTP",
            ),
            period_seconds=readiness.period_seconds,
            failure_threshold=readiness.failure_threshold,
            timeout_seconds=readiness.timeout_seconds,
        ),
        liveness_probe=iec.InferenceEndpointConfigSpecWorkerProbesLivenessProbe(
            http_get=iec.InferenceEndpointConfigSpecWorkerProbesLivenessProbeHttpGet(
                path=_path(liveness),
                port=iec.InferenceEndpointConfigSpecWorkerProbesLivenessProbeHttpGetPort.from_number(port),
                scheme="HTTP",
            ),
            period_seconds=liveness.period_seconds,
            failure_threshold=liveness.failure_threshold,
            timeout_seconds=liveness.timeout_seconds,
        ),
    )


def _path(probe: k8s.Probe) -> str:
    assert probe.http_get is not None and probe.http_get.path is not None
    return probe.http_get.path


def _worker(
    config: DeploymentConfig, shape: ResourceShape, inputs: ChartInputs
) -> iec.InferenceEndpointConfigSpecWorker:
    """The worker container: image, command, environment, invocation port, model mount, resources, probes."""
    serving = config.serving
    return iec.InferenceEndpointConfigSpecWorker(
        image=inputs.image(serving.image_tag),
        command=worker_command(config, shape, inputs.bucket_name),
        environment_variables=[
            iec.InferenceEndpointConfigSpecWorkerEnvironmentVariables(name=key, value=str(value))
            for key, value in worker_env(config, shape).items()
        ],
        model_invocation_port=iec.InferenceEndpointConfigSpecWorkerModelInvocationPort(
            container_port=serving.gateway_port, name=PORT_NAME
        ),
        model_volume_mount=iec.InferenceEndpointConfigSpecWorkerModelVolumeMount(
            name=MODEL_VOLUME_NAME, mount_path=MODEL_MOUNT_PATH
        ),
        resources=_resources(shape),
        probes=_probes(config),
    )


def _resources(shape: ResourceShape) -> iec.InferenceEndpointConfigSpecWorkerResources:
    group = shape.smallest
    size = pod_resources(group.instance, group.pods_per_node)
    values = {
        "cpu": iec.InferenceEndpointConfigSpecWorkerResourcesRequests.from_string(size.cpu),
        "memory": iec.InferenceEndpointConfigSpecWorkerResourcesRequests.from_string(size.memory),
        group.gpu_resource: iec.InferenceEndpointConfigSpecWorkerResourcesRequests.from_number(1),
    }
    limits = {
        key: iec.InferenceEndpointConfigSpecWorkerResourcesLimits.from_string(size.cpu)
        if key == "cpu"
        else iec.InferenceEndpointConfigSpecWorkerResourcesLimits.from_string(size.memory)
        if key == "memory"
        else iec.InferenceEndpointConfigSpecWorkerResourcesLimits.from_number(1)
        for key in values
    }
    return iec.InferenceEndpointConfigSpecWorkerResources(requests=values, limits=limits)


def _tls(config: DeploymentConfig, inputs: ChartInputs) -> iec.InferenceEndpointConfigSpecTlsConfig:
    endpoint = config.endpoint
    if endpoint.certificate_arn and endpoint.domain_name:
        return iec.InferenceEndpointConfigSpecTlsConfig(
            custom_certificate_config=iec.InferenceEndpointConfigSpecTlsConfigCustomCertificateConfig(
                acm_arn=endpoint.certificate_arn, domain_name=endpoint.domain_name
            )
        )
    return iec.InferenceEndpointConfigSpecTlsConfig(
        tls_certificate_output_s3_uri=f"s3://{inputs.tls_bucket_name}/{TLS_CERTIFICATE_PREFIX}"
    )


def _autoscaling(
    config: DeploymentConfig, shape: ResourceShape, name: str, workspace_id: str
) -> iec.InferenceEndpointConfigSpecAutoScalingSpec:
    scaling = config.autoscaling
    return iec.InferenceEndpointConfigSpecAutoScalingSpec(
        min_replica_count=sum(group.min_replicas for group in shape.groups),
        max_replica_count=sum(group.max_replicas for group in shape.groups),
        polling_interval=scaling.polling_interval_seconds,
        scale_down_stabilization_time=scaling.scale_down_stabilization_seconds,
        prometheus_trigger=iec.InferenceEndpointConfigSpecAutoScalingSpecPrometheusTrigger(
            name=TRIGGER_NAME,
            server_address=amp_server_address(config.region, workspace_id),
            query=endpoint_utilization_query(config.serving.namespace, name, config.serving.realtime_max_sessions),
            target_value=scaling.target_utilization,
            metric_type=iec.InferenceEndpointConfigSpecAutoScalingSpecPrometheusTriggerMetricType.VALUE,
        ),
    )


class WhisperInferenceEndpoint(Construct):
    """The ``InferenceEndpointConfig`` of one resource shape.

    Args:
        config: The deployment config.
        shape: The GPU groups it serves (:func:`resource_shapes`).
        inputs: Bucket, image, AMP workspace (``None``: fixed ``replicas``, no autoscaling) and TLS bucket.

    Attributes:
        name: The object's name (:func:`endpoint_config_name`).
        endpoint_name: The SageMaker endpoint it registers (:func:`sagemaker_endpoint_name`).

    With ``serving.target: inference_operator`` the HyperPod inference operator (EKS add-on
    ``amazon-sagemaker-hyperpod-inference``, :mod:`stacks.inference_operator`) runs the serving pods
    instead of this project's Deployments, Service and KEDA objects. Each ``InferenceEndpointConfig``
    (CRD ``inference.sagemaker.aws.amazon.com/v1``, schema vendored in ``tests/data/crds/``) gets:

    * ``endpointName``: the operator registers a SageMaker endpoint of that name, so callers use
      ``sagemaker-runtime invoke-endpoint`` with IAM (SigV4) authentication;
    * ``instanceTypes``: the instance types of its GPU groups in ``gpu_groups`` order (the operator
      places pods on the first type that has room: CRD ``instanceTypes`` description);
    * ``modelSourceConfig``: S3, the model's root prefix ``models/<model>/`` (every architecture), mounted
      at :data:`MODEL_MOUNT_PATH`; the container's preflight selects the ``<gpu_arch>/`` (or
      ``<gpu_arch>-<mig profile>/``) engine of the GPU it landed on and then starts the supervisor
      (``whisper_build.podstart.preflight --select-engine --exec …``);
    * ``/ping`` health checks and ``/invocations`` on the gateway port (``loadBalancer.healthCheckPath``,
      ``invocationEndpoint``, ``worker.modelInvocationPort``);
    * TLS: ``customCertificateConfig`` when ``endpoint.certificate_arn`` and ``endpoint.domain_name`` are
      set, else the operator's self-signed certificate written to ``tlsCertificateOutputS3Uri``;
    * autoscaling: the CRD's Prometheus trigger on AMP (``serverAddress`` in the pattern the CRD requires,
      ``https://aps-workspaces.<region>.amazonaws.com/workspaces/ws-…``) with the same capacity-weighted
      in-flight signal KEDA uses for Deployments (:func:`observability.queries.endpoint_utilization_query`).

    Resource shapes: whole-GPU groups share one config, sized to the smallest of them (CPU, memory and
    capacity, so a pod fits whichever instance type it lands on); each MIG profile gets its own (a pod
    requests ``nvidia.com/mig-<profile>: 1``, which only nodes of that profile advertise).
    """

    def __init__(
        self, scope: Construct, id: str, *, config: DeploymentConfig, shape: ResourceShape, inputs: ChartInputs
    ) -> None:
        super().__init__(scope, id)
        self.name = endpoint_config_name(shape)
        self.endpoint_name = sagemaker_endpoint_name(config, shape)
        serving = config.serving
        iec.InferenceEndpointConfig(
            self,
            "Resource",
            metadata={"name": self.name, "namespace": serving.namespace, "labels": naming.app_labels()},
            spec=iec.InferenceEndpointConfigSpec(
                model_name=f"{config.project_name}{shape.suffix}",
                endpoint_name=self.endpoint_name,
                instance_types=shape_instance_types(config, shape),
                replicas=sum(group.baseline_replicas for group in shape.groups),
                model_source_config=iec.InferenceEndpointConfigSpecModelSourceConfig(
                    model_source_type=iec.InferenceEndpointConfigSpecModelSourceConfigModelSourceType.S3,
                    s3_storage=iec.InferenceEndpointConfigSpecModelSourceConfigS3Storage(
                        bucket_name=inputs.bucket_name, region=config.region
                    ),
                    model_location=f"{storage.MODELS_ROOT}{config.model.name}/",
                ),
                worker=_worker(config, shape, inputs),
                invocation_endpoint=INVOCATION_PATH,
                load_balancer=iec.InferenceEndpointConfigSpecLoadBalancer(
                    health_check_path=probes.PING_PATH,
                    routing_algorithm=iec.InferenceEndpointConfigSpecLoadBalancerRoutingAlgorithm.LEAST_UNDERSCORE_OUTSTANDING_UNDERSCORE_REQUESTS,
                ),
                metrics=iec.InferenceEndpointConfigSpecMetrics(
                    enabled=True,
                    metrics_scrape_interval_seconds=min(config.observability.scrape_interval_seconds, 300),
                    model_metrics=iec.InferenceEndpointConfigSpecMetricsModelMetrics(
                        path="/metrics", port=serving.gateway_port
                    ),
                ),
                tls_config=_tls(config, inputs),
                auto_scaling_spec=(
                    _autoscaling(config, shape, self.name, inputs.amp_workspace_id)
                    if inputs.amp_workspace_id is not None
                    else None
                ),
                # as the Deployments' progress deadline: the engine load budget plus scheduling and image pull
                max_deploy_time_in_seconds=probes.ENGINE_LOAD_BUDGET_SECONDS + 600,
            ),
        )
