"""Pod autoscaling per GPU group with KEDA on Amazon Managed Prometheus (AMP).

Each group gets a ScaledObject whose ``prometheus`` trigger reads the group's capacity-weighted
utilization (in-flight requests ÷ the capacity of its Ready pods, plus open live sessions ÷
``serving.realtime_max_sessions`` per Ready pod; ``observability.queries.scaling_utilization_query``)
with ``metricType: Value`` and ``threshold: autoscaling.target_utilization``: the HPA then sets
``replicas = ceil(current × utilization / target)``, so the signal means the same on an A10G as on an
L40S, whose pods declare different capacities.

Entry point: :class:`KedaScaling` (the details, in its docstring).
Docs: docs/kubernetes.md, "Autoscaling".
"""

from __future__ import annotations

from constructs import Construct

from k8s_charts import naming
from k8s_charts.imports.sh import keda
from observability.queries import scaling_utilization_query
from settings.schema import DeploymentConfig, GpuGroup

TRIGGER_AUTH_NAME = "whisper-amp-sigv4"
FALLBACK_FAILURE_THRESHOLD = 3
KEDA_MIN_VERSION_FOR_VALUE_FALLBACK = "2.18"


def amp_server_address(region: str, workspace_id: str) -> str:
    """AMP query endpoint for KEDA: ``https://aps-workspaces.<region>.amazonaws.com/workspaces/<id>``."""
    return f"https://aps-workspaces.{region}.amazonaws.com/workspaces/{workspace_id}"


def trigger_metadata(config: DeploymentConfig, group: GpuGroup, workspace_id: str) -> dict[str, str]:
    """``prometheus`` trigger metadata of one group (all values strings, as the CRD requires)."""
    return {
        "serverAddress": amp_server_address(config.region, workspace_id),
        "awsRegion": config.region,
        "query": scaling_utilization_query(group.name, config.serving.realtime_max_sessions),
        "threshold": str(config.autoscaling.target_utilization),
        "ignoreNullValues": "false",
    }


class KedaScaling(Construct):
    """TriggerAuthentication (AMP SigV4 through the operator's identity) + one ScaledObject per group.

    Args:
        config: The deployment config (groups, replica bounds, target utilization, region).
        amp_workspace_id: AMP workspace id (``ws-...``); a CDK token is fine.

    AMP is queried with SigV4: ``awsRegion`` in the trigger metadata plus a TriggerAuthentication with
    ``podIdentity.provider: aws``, i.e. the KEDA operator's own role, given to it through EKS Pod
    Identity by the cluster stack (keda-docs 2.18 ``scalers/prometheus.md``, AMP example;
    ``authentication-providers/aws.md``). ``serverAddress`` is the workspace URL without ``/api/v1``.

    An empty result (no Ready pod scraped, scraper broken) must not read as 0 and scale a busy group
    down: ``ignoreNullValues: "false"`` turns it into a scaler error, and after
    :data:`FALLBACK_FAILURE_THRESHOLD` errors ``fallback`` holds at least ``fallback.replicas`` and keeps
    the current count when higher (``behavior: currentReplicasIfHigher``). KEDA supports fallback on
    ``Value`` triggers from 2.18 (earlier only ``AverageValue``; keda-docs 2.17 vs 2.18
    ``reference/scaledobject-spec.md``), hence the pinned chart version in the cluster stack.
    """

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, amp_workspace_id: str) -> None:
        super().__init__(scope, id)
        namespace = config.serving.namespace
        keda.TriggerAuthentication(
            self,
            "Auth",
            metadata={"name": TRIGGER_AUTH_NAME, "namespace": namespace, "labels": naming.app_labels()},
            spec=keda.TriggerAuthenticationSpec(
                pod_identity=keda.TriggerAuthenticationSpecPodIdentity(
                    provider=keda.TriggerAuthenticationSpecPodIdentityProvider.AWS
                )
            ),
        )
        scaling = config.autoscaling
        for group in config.gpu_groups:
            name = naming.workload_name(group)
            keda.ScaledObject(
                self,
                group.name,
                metadata={"name": name, "namespace": namespace, "labels": naming.group_labels(group)},
                spec=keda.ScaledObjectSpec(
                    scale_target_ref=keda.ScaledObjectSpecScaleTargetRef(name=name),
                    min_replica_count=group.min_replicas,
                    max_replica_count=group.max_replicas,
                    polling_interval=scaling.polling_interval_seconds,
                    fallback=keda.ScaledObjectSpecFallback(
                        failure_threshold=FALLBACK_FAILURE_THRESHOLD,
                        replicas=group.baseline_replicas,
                        behavior=keda.ScaledObjectSpecFallbackBehavior.CURRENT_REPLICAS_IF_HIGHER,
                    ),
                    advanced=keda.ScaledObjectSpecAdvanced(
                        horizontal_pod_autoscaler_config=keda.ScaledObjectSpecAdvancedHorizontalPodAutoscalerConfig(
                            behavior=keda.ScaledObjectSpecAdvancedHorizontalPodAutoscalerConfigBehavior(
                                scale_down=keda.ScaledObjectSpecAdvancedHorizontalPodAutoscalerConfigBehaviorScaleDown(
                                    stabilization_window_seconds=scaling.scale_down_stabilization_seconds
                                )
                            )
                        )
                    ),
                    triggers=[
                        keda.ScaledObjectSpecTriggers(
                            type="prometheus",
                            name="utilization",
                            metric_type="Value",
                            metadata=trigger_metadata(config, group, amp_workspace_id),
                            authentication_ref=keda.ScaledObjectSpecTriggersAuthenticationRef(name=TRIGGER_AUTH_NAME),
                        )
                    ],
                ),
            )
