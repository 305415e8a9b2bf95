"""The ``whisper-bulk`` chart: bulk workers per GPU group, scaled from zero by KEDA on the job queue's length.

Entry point: :class:`BulkWorkers` (the details, in its docstring). Docs: docs/bulk.md.
"""

from __future__ import annotations

import json

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, security
from k8s_charts.imports.sh import keda
from k8s_charts.inputs import ChartInputs
from k8s_charts.network_policy import (
    DNS_PORT,
    HTTPS_PORT,
    KUBE_DNS_LABELS,
    KUBE_SYSTEM,
    NAMESPACE_NAME_LABEL,
    POD_IDENTITY_AGENT_CIDR,
    POD_IDENTITY_AGENT_PORT,
)
from k8s_charts.placement import affinity, gpu_tolerations
from k8s_charts.pod_spec import empty_dir, one_pod_at_a_time, serving_image_metadata, serving_mounts, serving_volumes
from k8s_charts.sizing import pod_resources, quantities
from k8s_charts.workload import (
    PORT_TRITON_METRICS,
    TERMINATION_MESSAGE_POLICY,
    TRITON_STOP_SECONDS,
    preflight_container,
    serving_env,
)
from settings import labels, throughput
from settings.bulk import SQS_MAX_WAIT_SECONDS, WORKER_SERVICE_ACCOUNT, files_in_flight, worker_groups, worker_name
from settings.schema import DeploymentConfig, GpuGroup

APP = labels.BULK_APP_NAME
"""``app.kubernetes.io/name`` of bulk pods: not the serving Service's ``whisper``, so no request reaches them."""
TRIGGER_AUTH_NAME = "whisper-bulk-sqs"
WORKER_COMMAND = ["python3", "-m", "whisper_build.bulk.worker"]
SCRATCH_PATH = "/scratch"
"""Where a worker streams the input object to (an ``emptyDir`` of ``bulk.max_file_gb``)."""
PORT_WORKER = "worker-http"
STOP_MARGIN_SECONDS = 10
DO_NOT_DISRUPT = "karpenter.sh/do-not-disrupt"


def best_batch(config: DeploymentConfig, group: GpuGroup) -> float:
    """The batch (windows) at which the group's GPU, engine and model transcribe fastest, within ``max_batch_size``.

    From :mod:`settings.throughput` (each figure measured or estimated, with its source): the figure
    with the most windows per second among those at batches ≤ ``model.max_batch_size``. A GPU, engine
    or model the table does not know falls back to ``model.max_batch_size``.
    """
    try:
        device = throughput.device_for_instance_type(group.instance_type)
        figures = throughput.figures_for(device, group.serving_engine, config.model.name)
    except throughput.UnknownThroughput:
        figures = []
    within = [f for f in figures if f.batch <= config.model.max_batch_size]
    if not within:
        return float(config.model.max_batch_size)
    return max(within, key=lambda f: f.windows_per_second).batch


def trigger_metadata(config: DeploymentConfig, group: GpuGroup, queue_url: str) -> dict[str, str]:
    """``aws-sqs-queue`` trigger metadata of one group's workers (all strings, as the CRD requires)."""
    return {
        "queueURL": queue_url,
        "queueLength": str(files_in_flight(best_batch(config, group), config.bulk.window_group_size)),
        "activationQueueLength": "0",
        "awsRegion": config.region,
        "scaleOnInFlight": "true",
    }


def worker_stop_seconds(config: DeploymentConfig) -> int:
    """How long the supervisor waits for the worker after SIGTERM: the drain + margin.

    The drain lasts ``bulk.drain_seconds`` or, if longer, the long poll out at SIGTERM (the worker returns
    what it brings at once); a kill before that would hide those messages for a visibility timeout.
    """
    return max(config.bulk.drain_seconds, SQS_MAX_WAIT_SECONDS) + STOP_MARGIN_SECONDS


def worker_grace_seconds(config: DeploymentConfig) -> int:
    """``terminationGracePeriodSeconds``: worker drain + Triton stop + margin."""
    return worker_stop_seconds(config) + TRITON_STOP_SECONDS + STOP_MARGIN_SECONDS


def worker_tolerations(config: DeploymentConfig) -> list[k8s.Toleration]:
    """The GPU taint; with ``capacity.bulk_spot`` also the Spot taint, which only bulk workers tolerate.

    A Spot node's two-minute notice is best-effort: the grace (:func:`worker_grace_seconds`, at most 90 s with
    Spot, ``settings.capacity.SPOT_MAX_DRAIN_SECONDS``) covers the window group in flight, its checkpoint and
    the message's return.
    """
    return gpu_tolerations(spot_nodes=config.capacity.bulk_spot)


def worker_env(config: DeploymentConfig, group: GpuGroup, inputs: ChartInputs) -> dict[str, object]:
    """The serving container's Triton/supervisor settings with the worker as the supervised process.

    ``WHISPER_BULK_*`` are :class:`whisper_build.bulk.settings.WorkerSettings`.
    """
    bulk = config.bulk
    served = serving_env(config, group, inputs.api_keys_secret_arn or "unused")
    triton = {k: v for k, v in served.items() if not k.startswith("WHISPER_GATEWAY_")}
    return {
        **triton,
        "WHISPER_SUPERVISOR_GATEWAY_COMMAND": json.dumps(WORKER_COMMAND),
        "WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S": worker_stop_seconds(config),
        "WHISPER_BULK_QUEUE_URL": inputs.bulk_queue_url,
        "WHISPER_BULK_BUCKET": inputs.bulk_bucket_name,
        "WHISPER_BULK_REGION": config.region,
        "WHISPER_BULK_INPUT_PREFIX": bulk.input_prefix,
        "WHISPER_BULK_OUTPUT_PREFIX": bulk.output_prefix,
        "WHISPER_BULK_TRITON_URL": f"127.0.0.1:{config.serving.triton_grpc_port}",
        "WHISPER_BULK_FILES_IN_FLIGHT": files_in_flight(best_batch(config, group), bulk.window_group_size),
        "WHISPER_BULK_WINDOW_GROUP_SIZE": bulk.window_group_size,
        "WHISPER_BULK_CHECKPOINT_EVERY_GROUPS": bulk.checkpoint_every_groups,
        "WHISPER_BULK_VISIBILITY_TIMEOUT_SECONDS": bulk.visibility_timeout_seconds,
        "WHISPER_BULK_HEARTBEAT_SECONDS": bulk.heartbeat_seconds,
        "WHISPER_BULK_MAX_FILE_BYTES": bulk.max_file_gb * 1024**3,
        "WHISPER_BULK_DRAIN_SECONDS": bulk.drain_seconds,
        "WHISPER_BULK_SCRATCH_DIR": SCRATCH_PATH,
        "WHISPER_BULK_MODEL": config.model.name,
        "WHISPER_BULK_ENGINE": group.serving_engine,
        "WHISPER_BULK_HTTP_HOST": "0.0.0.0",  # noqa: S104 (pod IP: kubelet probes, scraper)
        "WHISPER_BULK_HTTP_PORT": config.serving.gateway_metrics_port,
    }


def _probe(path: str, period: int, failures: int) -> k8s.Probe:
    return k8s.Probe(
        http_get=k8s.HttpGetAction(path=path, port=k8s.IntOrString.from_string(PORT_WORKER)),
        period_seconds=period,
        failure_threshold=failures,
        timeout_seconds=5,
    )


class BulkWorkers(Construct):
    """Deployment + ScaledObject of one GPU group's bulk workers (module docstring).

    Only with ``bulk.enabled`` (docs/bulk.md). Per GPU group of ``bulk.gpu_groups``:

    * a **Deployment** ``whisper-bulk-<group>``: the serving image's supervisor runs Triton and, in place of
      the gateway, the bulk worker (``python3 -m whisper_build.bulk.worker``), which reads the queue and
      sends windows to that pod's own Triton. A Deployment of its own (not a sidecar of the serving pods)
      so it can go to zero pods, and its nodes to zero, while serving keeps its floor. No ``replicas``:
      KEDA's HPA owns the count. ``terminationGracePeriodSeconds`` covers the drain (``bulk.drain_seconds``:
      finish the window group in flight, checkpoint, return the message with visibility 0) plus Triton's
      stop; Karpenter is told not to consolidate a node under a working pod (``karpenter.sh/do-not-disrupt``,
      Karpenter docs "Disruption", pod-level controls).
    * a **ScaledObject** with one ``aws-sqs-queue`` trigger: ``queueLength`` = files one worker keeps in flight
      (:func:`settings.bulk.files_in_flight`), ``activationQueueLength: 0`` (the first message brings one pod
      up), ``scaleOnInFlight: true`` (messages being worked on count, so KEDA does not scale a busy group to
      zero: kedacore/keda#1663), ``minReplicaCount: 0``. Authentication: the KEDA operator's own identity
      (``podIdentity.provider: aws`` with ``identityOwner: keda``) — with EKS Pod Identity the operator's
      credentials are the path that works (kedacore/keda#6418); the workloads stack lets its role call
      ``sqs:GetQueueAttributes`` on the queue. Keys per keda-docs 2.18 ``scalers/aws-sqs.md``.

    Also the ServiceAccount ``whisper-bulk`` (the bulk stack's Pod Identity role) and the workers'
    NetworkPolicies (metrics and probes from the VPC; egress: DNS, the Pod Identity agent, HTTPS to S3 and
    SQS, which leave the VPC through the S3 gateway endpoint's public ranges and the NAT gateway).
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: DeploymentConfig,
        group: GpuGroup,
        inputs: ChartInputs,
        claim_name: str,
    ) -> None:
        super().__init__(scope, id)
        self.name = worker_name(group.name)
        namespace = config.serving.namespace
        pod_labels = naming.group_labels(group, app=APP)
        size = pod_resources(group.instance, group.pods_per_node)
        gpu = {group.gpu_resource: k8s.Quantity.from_number(1)}
        resources = quantities({"cpu": size.cpu, "memory": size.memory}) | gpu
        scratch = f"{config.bulk.max_file_gb + 1}Gi"
        image = inputs.image(config.serving.image_tag)
        preflight = preflight_container(config, group, image, inputs.bucket_name)
        worker = k8s.Container(
            name="worker",
            image=image,
            ports=[
                k8s.ContainerPort(name=PORT_WORKER, container_port=config.serving.gateway_metrics_port, protocol="TCP"),
                # declared so that pod discovery finds Triton's metrics (scrape job whisper-bulk-triton)
                k8s.ContainerPort(
                    name=PORT_TRITON_METRICS, container_port=config.serving.triton_metrics_port, protocol="TCP"
                ),
            ],
            env=[k8s.EnvVar(name=k, value=str(v)) for k, v in worker_env(config, group, inputs).items()],
            resources=k8s.ResourceRequirements(
                requests=resources | {"ephemeral-storage": k8s.Quantity.from_string(scratch)},
                limits=resources | {"ephemeral-storage": k8s.Quantity.from_string(scratch)},
            ),
            startup_probe=_probe("/ready", 10, 90),  # engine load: up to 15 min
            readiness_probe=_probe("/ready", 10, 3),
            liveness_probe=_probe("/live", 20, 3),
            termination_message_policy=TERMINATION_MESSAGE_POLICY,
            security_context=security.container_security_context(),
            volume_mounts=[*serving_mounts(shm=True), k8s.VolumeMount(name="scratch", mount_path=SCRATCH_PATH)],
        )
        scratch_volume = empty_dir("scratch", scratch)
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=serving_image_metadata(self.name, namespace, pod_labels),
            spec=k8s.DeploymentSpec(
                selector=k8s.LabelSelector(match_labels=pod_labels),
                strategy=one_pod_at_a_time(),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=pod_labels, annotations={DO_NOT_DISRUPT: "true"}),
                    spec=k8s.PodSpec(
                        init_containers=[preflight],
                        containers=[worker],
                        volumes=[*serving_volumes(claim_name, size.shm), scratch_volume],
                        affinity=affinity(group),
                        tolerations=worker_tolerations(config),
                        security_context=security.pod_security_context(),
                        termination_grace_period_seconds=worker_grace_seconds(config),
                        service_account_name=WORKER_SERVICE_ACCOUNT,
                        automount_service_account_token=False,
                        enable_service_links=False,
                    ),
                ),
            ),
        )
        bulk = config.bulk
        keda.ScaledObject(
            self,
            "Scaling",
            metadata={"name": self.name, "namespace": namespace, "labels": pod_labels},
            spec=keda.ScaledObjectSpec(
                scale_target_ref=keda.ScaledObjectSpecScaleTargetRef(name=self.name),
                min_replica_count=0,
                max_replica_count=bulk.max_replicas,
                polling_interval=bulk.polling_interval_seconds,
                cooldown_period=bulk.cooldown_seconds,
                triggers=[
                    keda.ScaledObjectSpecTriggers(
                        type="aws-sqs-queue",
                        name="queue",
                        metadata=trigger_metadata(config, group, inputs.bulk_queue_url),
                        authentication_ref=keda.ScaledObjectSpecTriggersAuthenticationRef(name=TRIGGER_AUTH_NAME),
                    )
                ],
            ),
        )


def _network_policies(chart: Construct, config: DeploymentConfig) -> None:
    namespace = config.serving.namespace
    workers = k8s.LabelSelector(match_labels={labels.APP_NAME_LABEL: APP})
    dns = k8s.NetworkPolicyPeer(
        namespace_selector=k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: KUBE_SYSTEM}),
        pod_selector=k8s.LabelSelector(match_labels=KUBE_DNS_LABELS),
    )

    def port(number: int, protocol: str = "TCP") -> k8s.NetworkPolicyPort:
        return k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(number), protocol=protocol)

    def cidr(block: str) -> k8s.NetworkPolicyPeer:
        return k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=block))

    app_label = {labels.APP_NAME_LABEL: APP}
    k8s.KubeNetworkPolicy(
        chart,
        "bulk-ingress",
        metadata=k8s.ObjectMeta(name="bulk-ingress", namespace=namespace, labels=app_label),
        spec=k8s.NetworkPolicySpec(
            pod_selector=workers,
            policy_types=["Ingress"],
            ingress=[
                k8s.NetworkPolicyIngressRule(
                    from_=[cidr(config.network.vpc_cidr)],
                    ports=[port(config.serving.gateway_metrics_port), port(config.serving.triton_metrics_port)],
                )
            ],
        ),
    )
    k8s.KubeNetworkPolicy(
        chart,
        "bulk-egress",
        metadata=k8s.ObjectMeta(name="bulk-egress", namespace=namespace, labels=app_label),
        spec=k8s.NetworkPolicySpec(
            pod_selector=workers,
            policy_types=["Egress"],
            egress=[
                k8s.NetworkPolicyEgressRule(to=[dns], ports=[port(DNS_PORT, "UDP"), port(DNS_PORT, "TCP")]),
                k8s.NetworkPolicyEgressRule(to=[cidr(POD_IDENTITY_AGENT_CIDR)], ports=[port(POD_IDENTITY_AGENT_PORT)]),
                # S3 (gateway endpoint: S3's public ranges) and SQS (through NAT): HTTPS only
                k8s.NetworkPolicyEgressRule(to=[cidr("0.0.0.0/0")], ports=[port(HTTPS_PORT)]),
            ],
        ),
    )


class BulkChart(cdk8s.Chart):
    """ServiceAccount, TriggerAuthentication, NetworkPolicies and :class:`BulkWorkers` per bulk GPU group.

    Args:
        claims: model volume key (``GpuGroup.model_volume_key``) → PersistentVolumeClaim of the serving chart.

    Attributes:
        workers: GPU group name → its :class:`BulkWorkers`.
    """

    def __init__(
        self, scope: Construct, id: str, *, config: DeploymentConfig, inputs: ChartInputs, claims: dict[str, str]
    ) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        namespace = config.serving.namespace
        k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=k8s.ObjectMeta(
                name=WORKER_SERVICE_ACCOUNT, namespace=namespace, labels={labels.APP_NAME_LABEL: APP}
            ),
            automount_service_account_token=False,
        )
        keda.TriggerAuthentication(
            self,
            "Auth",
            metadata={"name": TRIGGER_AUTH_NAME, "namespace": namespace, "labels": {labels.APP_NAME_LABEL: APP}},
            spec=keda.TriggerAuthenticationSpec(
                pod_identity=keda.TriggerAuthenticationSpecPodIdentity(
                    provider=keda.TriggerAuthenticationSpecPodIdentityProvider.AWS,
                    identity_owner=keda.TriggerAuthenticationSpecPodIdentityIdentityOwner.KEDA,
                )
            ),
        )
        _network_policies(self, config)
        self.workers = {
            group.name: BulkWorkers(
                self,
                group.name,
                config=config,
                group=group,
                inputs=inputs,
                claim_name=claims[group.model_volume_key],
            )
            for group in worker_groups(config.bulk, config.gpu_groups)
        }
