"""The cdk8s charts of the deployment, built from the typed config.

Five charts, because the cluster stack must order them after different things: ``whisper-serving``
(namespace, NetworkPolicies, ServiceAccount, model volumes, a Deployment + PDB per group; needs the
Mountpoint CSI driver), ``whisper-endpoint`` (Service or Service + Ingress; needs the Load Balancer
Controller), ``whisper-autoscaling`` (KEDA; needs its CRDs), ``whisper-node-autoscaling`` (with
``cluster.node_autoscaling``: Karpenter NodeClass + NodePool) and ``whisper-gpu-metrics`` (with
observability: DCGM exporters). With ``serving.target: inference_operator`` ``whisper-serving`` holds
one ``InferenceEndpointConfig`` per resource shape instead and there is no endpoint or autoscaling
chart. Entry point: :func:`build_charts`; :mod:`k8s_charts.synth` writes them as YAML.
Docs: docs/kubernetes.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, security
from k8s_charts.autoscaling import KedaScaling
from k8s_charts.bulk import BulkChart
from k8s_charts.endpoint import ServingEndpoint
from k8s_charts.gpu_metrics import GpuMetricsExporter
from k8s_charts.inference_endpoint import WhisperInferenceEndpoint, resource_shapes
from k8s_charts.inputs import ChartInputs
from k8s_charts.network_policy import ScrapeOnlyNetworkPolicies, ServingNetworkPolicies
from k8s_charts.node_autoscaling import GpuNodeAutoscaling
from k8s_charts.pod_ranker import PodRanker, ranked_groups
from k8s_charts.storage import ModelVolume, hf_checkpoint_volume
from k8s_charts.timeouts import check_timeouts
from k8s_charts.workload import GpuGroupWorkload
from observability.scrape_config import DCGM_EXPORTER_PORT
from settings import storage
from settings.fleet import spot_groups, spot_instance_types
from settings.schema import DeploymentConfig

READINESS_GATE_INJECT_LABEL = "elbv2.k8s.aws/pod-readiness-gate-inject"


class ServingChart(cdk8s.Chart):
    """Namespace, NetworkPolicies, ServiceAccount, model volumes, one workload per GPU group.

    One model volume per engine target.
    An engine target is a GPU architecture, or architecture + MIG profile (``GpuGroup.engine_target``).
    ``serving_engine: torch`` groups share the volume of the Hugging Face checkpoint instead
    (:func:`k8s_charts.storage.hf_checkpoint_volume`); an architecture they alone serve gets no volume.

    Attributes:
        workloads: GPU group name → its :class:`GpuGroupWorkload`.
    """

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, inputs: ChartInputs) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        _serving_namespace(self, config, readiness_gate=True)
        namespace = config.serving.namespace
        ServingNetworkPolicies(
            self,
            "NetworkPolicies",
            config=config,
            metrics_ports=[config.serving.gateway_metrics_port, config.serving.triton_metrics_port],
            scraper_cidrs=inputs.scraper_cidrs,
        )
        k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=k8s.ObjectMeta(
                name=naming.SERVING_SERVICE_ACCOUNT, namespace=namespace, labels=naming.app_labels()
            ),
            automount_service_account_token=False,
        )
        volumes = {
            target: ModelVolume(
                self, f"models-{target}", config=config, gpu_arch=target, bucket_name=inputs.bucket_name
            )
            for target in config.engine_targets
        }
        if config.serves_hf_checkpoint:
            volumes[storage.HF_CHECKPOINT_DIR] = hf_checkpoint_volume(self, config, inputs.bucket_name)
        self.claims = {key: volume.claim_name for key, volume in volumes.items()}
        """Model volume key (``GpuGroup.model_volume_key``) → its PersistentVolumeClaim (the bulk workers mount them too)."""
        self.workloads = {
            group.name: GpuGroupWorkload(
                self,
                group.name,
                config=config,
                group=group,
                image=inputs.image(config.serving.image_tag),
                bucket_name=inputs.bucket_name,
                claim_name=volumes[group.model_volume_key].claim_name,
                replicas=None if inputs.amp_workspace_id is not None else group.baseline_replicas,
                service_account_name=naming.SERVING_SERVICE_ACCOUNT,
                api_keys_secret_arn=inputs.api_keys_secret_arn,
            )
            for group in config.gpu_groups
        }
        if ranked_groups(config):
            PodRanker(self, "pod-ranker", config=config, image=inputs.image(config.serving.image_tag))


def _serving_namespace(chart: cdk8s.Chart, config: DeploymentConfig, *, readiness_gate: bool) -> k8s.KubeNamespace:
    """The serving namespace, enforcing the "restricted" Pod Security Standard.

    With ``readiness_gate`` (this project's load balancer controller and Deployments) the AWS Load
    Balancer Controller injects a readiness gate into pods created here: a pod counts as Ready only once
    its IP target is Healthy in the target group, so a rollout cannot outpace target registration ("Pod
    readiness gate", works with target-type ip, which both endpoint kinds use:
    https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/deploy/pod_readiness_gate/).
    The inference operator target leaves its pods to the operator.
    """
    labels = {
        **naming.app_labels(),
        # Pod Security Admission: reject pods that are not "restricted"
        security.POD_SECURITY_ENFORCE_LABEL: "restricted",
    }
    if readiness_gate:
        labels[READINESS_GATE_INJECT_LABEL] = "enabled"
    return k8s.KubeNamespace(chart, "Namespace", metadata=k8s.ObjectMeta(name=config.serving.namespace, labels=labels))


class InferenceOperatorChart(cdk8s.Chart):
    """Namespace and one HyperPod ``InferenceEndpointConfig`` per resource shape.

    The ``whisper-serving`` chart of ``serving.target: inference_operator``.

    Attributes:
        endpoints: ``InferenceEndpointConfig`` name → its :class:`WhisperInferenceEndpoint`.
    """

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, inputs: ChartInputs) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        _serving_namespace(self, config, readiness_gate=False)
        endpoints = [
            WhisperInferenceEndpoint(self, f"endpoint{index}", config=config, shape=shape, inputs=inputs)
            for index, shape in enumerate(resource_shapes(config))
        ]
        self.endpoints = {endpoint.name: endpoint for endpoint in endpoints}


class EndpointChart(cdk8s.Chart):
    """The one load-balanced endpoint over every group (``endpoint.kind``)."""

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        ServingEndpoint(self, "Endpoint", config=config)


class AutoscalingChart(cdk8s.Chart):
    """KEDA objects scaling every group's Deployment on its AMP utilization query."""

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, amp_workspace_id: str) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        KedaScaling(self, "Keda", config=config, amp_workspace_id=amp_workspace_id)


class NodeAutoscalingChart(cdk8s.Chart):
    """HyperPod Karpenter NodeClass + NodePool per group."""

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        GpuNodeAutoscaling(self, "Nodes", config=config)


class GpuMetricsChart(cdk8s.Chart):
    """Namespace of the GPU metrics exporters and one DCGM exporter DaemonSet per GPU group.

    The namespace enforces the ``privileged`` Pod Security Standard: the exporter needs
    ``CAP_SYS_ADMIN`` (:func:`k8s_charts.security.gpu_metrics_security_context`), which ``baseline``
    forbids; the serving namespace stays ``restricted``.

    Attributes:
        namespace_name: The namespace name (``cdk8s.Chart.namespace`` is taken).
        exporters: GPU group name → its :class:`GpuMetricsExporter`; ``<group>/<type>`` → one per listed type of
            a group with a priority list; ``…/spot`` → the one on the Spot nodes of a group with a Spot group.
    """

    def __init__(
        self, scope: Construct, id: str, *, config: DeploymentConfig, scraper_cidrs: Sequence[str] | None = None
    ) -> None:
        super().__init__(scope, id, disable_resource_name_hashes=True)
        self.namespace_name = naming.gpu_metrics_namespace(config.serving.namespace)
        k8s.KubeNamespace(
            self,
            "Namespace",
            metadata=k8s.ObjectMeta(
                name=self.namespace_name, labels={security.POD_SECURITY_ENFORCE_LABEL: "privileged"}
            ),
        )
        ScrapeOnlyNetworkPolicies(
            self,
            "NetworkPolicies",
            namespace=self.namespace_name,
            ports=[DCGM_EXPORTER_PORT],
            scraper_cidrs=scraper_cidrs or [config.network.vpc_cidr],
        )
        self.exporters = {}
        with_spot = {group.name for group in spot_groups(config)}
        for group in config.gpu_groups:
            # a group with a Spot instance group: one exporter set for its On-Demand nodes, one for its Spot nodes
            for spot in (False, True) if group.name in with_spot else (None,):
                suffix = "/spot" if spot else ""
                if not group.flexible:
                    self.exporters[group.name + suffix] = GpuMetricsExporter(
                        self, group.name + suffix, namespace=self.namespace_name, group=group, spot=spot
                    )
                    continue
                for instance_type in spot_instance_types(group) if spot else group.instance_types:
                    self.exporters[f"{group.name}/{instance_type}{suffix}"] = GpuMetricsExporter(
                        self,
                        f"{group.name}-{instance_type}{suffix}",
                        namespace=self.namespace_name,
                        group=group,
                        instance_type=instance_type,
                        spot=spot,
                    )


@dataclass(frozen=True)
class WhisperCharts:
    """The charts of one deployment.

    ``endpoint`` is ``None`` on the inference operator target; ``autoscaling`` is ``None`` without an
    AMP workspace or on the inference operator target, ``node_autoscaling`` when
    ``cluster.node_autoscaling`` is off, ``gpu_metrics`` when ``observability.enabled`` is off.
    """

    serving: ServingChart | InferenceOperatorChart
    endpoint: EndpointChart | None
    autoscaling: AutoscalingChart | None
    node_autoscaling: NodeAutoscalingChart | None
    gpu_metrics: GpuMetricsChart | None = None
    bulk: BulkChart | None = None

    def all(self) -> list[cdk8s.Chart]:
        """The charts that exist."""
        charts = [self.node_autoscaling, self.serving, self.endpoint, self.autoscaling, self.gpu_metrics, self.bulk]
        return [chart for chart in charts if chart is not None]


def build_charts(app: cdk8s.App, config: DeploymentConfig, inputs: ChartInputs) -> WhisperCharts:
    """Add the deployment's charts to ``app`` (a ``cdk8s.App``).

    The endpoint and autoscaling charts depend on the serving chart (namespace, Deployments), so
    cdk8s orders them after it in one-file output and in ``kubectl apply`` of the folder.

    Raises:
        ValueError: a config combination the charts cannot express (e.g. an idle timeout shorter
            than the queue wait + the request timeout, :mod:`k8s_charts.timeouts`); the message names
            the fields.
    """
    check_timeouts(config)
    serving: ServingChart | InferenceOperatorChart
    endpoint = None
    autoscaling = None
    if config.serving.target == "inference_operator":
        serving = InferenceOperatorChart(app, "whisper-serving", config=config, inputs=inputs)
    else:
        serving = ServingChart(app, "whisper-serving", config=config, inputs=inputs)
        endpoint = EndpointChart(app, "whisper-endpoint", config=config)
        endpoint.add_dependency(serving)
    if inputs.amp_workspace_id is not None and config.serving.target == "deployments":
        autoscaling = AutoscalingChart(
            app, "whisper-autoscaling", config=config, amp_workspace_id=inputs.amp_workspace_id
        )
        autoscaling.add_dependency(serving)
    nodes = None
    if config.cluster.node_autoscaling:
        nodes = NodeAutoscalingChart(app, "whisper-node-autoscaling", config=config)
        serving.add_dependency(nodes)
    gpu_metrics = (
        GpuMetricsChart(app, "whisper-gpu-metrics", config=config, scraper_cidrs=inputs.scraper_cidrs)
        if config.observability.enabled
        else None
    )
    bulk = None
    if config.bulk.enabled and isinstance(serving, ServingChart):
        bulk = BulkChart(app, "whisper-bulk", config=config, inputs=inputs, claims=serving.claims)
        bulk.add_dependency(serving)
    return WhisperCharts(serving, endpoint, autoscaling, nodes, gpu_metrics, bulk)
