"""The pod ranker (``whisper_build/pod_ranker.py``) for GPU groups with a priority list of instance types.

One replica on a system node, its own ServiceAccount and the least RBAC it needs: a ClusterRole with ``get`` and
``list`` on nodes (it reads each node's instance type) and a Role in the serving namespace with ``list`` and
``patch`` on pods (it writes the instance-type label and ``controller.kubernetes.io/pod-deletion-cost``).
Egress: DNS and HTTPS inside the VPC (the EKS API server's private endpoint). Rendered only when a group lists
more than one type. docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

import json

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, security
from k8s_charts.network_policy import DNS_PORT, HTTPS_PORT, KUBE_DNS_LABELS, KUBE_SYSTEM, NAMESPACE_NAME_LABEL
from k8s_charts.sizing import quantities
from settings.schema import DeploymentConfig

NAME = "whisper-pod-ranker"
RULES_NODES = k8s.PolicyRule(api_groups=[""], resources=["nodes"], verbs=["get", "list"])
RULES_PODS = k8s.PolicyRule(api_groups=[""], resources=["pods"], verbs=["list", "patch"])
"""Everything the ranker may do; tests run it against a fake API server that enforces exactly these."""
CHECKOV_SKIPS = {
    **security.SERVING_IMAGE_SKIPS,
    "CKV_K8S_8": "a loop that serves nothing: a crash restarts the container, a stall only delays the marks",
    "CKV_K8S_9": "no traffic is routed to the ranker, so there is nothing for readiness to gate",
    "CKV_K8S_38": "the ranker calls the Kubernetes API with its own token (RBAC: get/list nodes, list/patch pods)",
}


def ranked_groups(config: DeploymentConfig) -> dict[str, list[str]]:
    """GPU group → its priority list, for the groups that list more than one type."""
    return {group.name: list(group.instance_types) for group in config.gpu_groups if group.flexible}


class PodRanker(Construct):
    """ServiceAccount, ClusterRole(+Binding), Role(+Binding), NetworkPolicy and Deployment of the pod ranker."""

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig, image: str) -> None:
        super().__init__(scope, id)
        namespace = config.serving.namespace
        labels = {**naming.app_labels(), "app.kubernetes.io/component": "pod-ranker"}
        meta = k8s.ObjectMeta(name=NAME, namespace=namespace, labels=labels)
        k8s.KubeServiceAccount(self, "ServiceAccount", metadata=meta)
        subject = k8s.Subject(kind="ServiceAccount", name=NAME, namespace=namespace)
        k8s.KubeClusterRole(self, "Nodes", metadata=k8s.ObjectMeta(name=NAME, labels=labels), rules=[RULES_NODES])
        k8s.KubeClusterRoleBinding(
            self,
            "NodesBinding",
            metadata=k8s.ObjectMeta(name=NAME, labels=labels),
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=NAME),
            subjects=[subject],
        )
        k8s.KubeRole(self, "Pods", metadata=meta, rules=[RULES_PODS])
        k8s.KubeRoleBinding(
            self,
            "PodsBinding",
            metadata=meta,
            role_ref=k8s.RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=NAME),
            subjects=[subject],
        )
        dns = k8s.NetworkPolicyPeer(
            namespace_selector=k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: KUBE_SYSTEM}),
            pod_selector=k8s.LabelSelector(match_labels=KUBE_DNS_LABELS),
        )
        k8s.KubeNetworkPolicy(
            self,
            "Egress",
            metadata=meta,
            spec=k8s.NetworkPolicySpec(
                pod_selector=k8s.LabelSelector(match_labels=labels),
                policy_types=["Egress"],
                egress=[
                    k8s.NetworkPolicyEgressRule(
                        to=[dns],
                        ports=[
                            k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(DNS_PORT), protocol=protocol)
                            for protocol in ("UDP", "TCP")
                        ],
                    ),
                    k8s.NetworkPolicyEgressRule(
                        to=[k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=config.network.vpc_cidr))],
                        ports=[k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(HTTPS_PORT), protocol="TCP")],
                    ),
                ],
            ),
        )
        env = {
            "WHISPER_RANKER_NAMESPACE": namespace,
            "WHISPER_RANKER_GROUPS": json.dumps(ranked_groups(config), separators=(",", ":")),
        }
        resources = quantities({"cpu": "100m", "memory": "128Mi"})
        k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(
                name=NAME,
                namespace=namespace,
                labels=labels,
                annotations=security.checkov_skip_annotations(CHECKOV_SKIPS),
            ),
            spec=k8s.DeploymentSpec(
                replicas=1,
                selector=k8s.LabelSelector(match_labels=labels),
                template=k8s.PodTemplateSpec(
                    metadata=k8s.ObjectMeta(labels=labels),
                    spec=k8s.PodSpec(
                        service_account_name=NAME,
                        security_context=security.pod_security_context(),
                        containers=[
                            k8s.Container(
                                name="ranker",
                                image=image,
                                command=["python", "-m", "whisper_build.pod_ranker"],
                                env=[k8s.EnvVar(name=key, value=value) for key, value in env.items()],
                                resources=k8s.ResourceRequirements(requests=resources, limits=resources),
                                security_context=security.container_security_context(),
                            )
                        ],
                    ),
                ),
            ),
        )
