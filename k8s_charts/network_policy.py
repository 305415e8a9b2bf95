"""NetworkPolicies of the serving namespace: deny everything, then allow what a serving pod needs.

Enforced by the Amazon VPC CNI's network policy agent, which the cluster stack turns on
(``enableNetworkPolicy`` in the ``vpc-cni`` add-on configuration, EKS user guide "Restrict pod
traffic with Kubernetes network policies"); without an enforcing agent NetworkPolicies are inert.

Entry point: :class:`ServingNetworkPolicies` (the details, in its docstring).
Docs: docs/deploy.md, "Security".
"""

from __future__ import annotations

from collections.abc import Sequence

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming
from settings.namespaces import KUBE_SYSTEM
from settings.schema import DeploymentConfig

POD_IDENTITY_AGENT_CIDR = "169.254.170.23/32"
"""Link-local address of the EKS Pod Identity agent (EKS user guide, "Set up the Amazon EKS Pod Identity Agent")."""
POD_IDENTITY_AGENT_PORT = 80
DNS_PORT = 53
HTTPS_PORT = 443
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""Label the API server sets on every namespace (Kubernetes >= 1.22)."""
KUBE_DNS_LABELS = {"k8s-app": "kube-dns"}
"""Pod labels of CoreDNS in the EKS ``coredns`` add-on."""


def _port(number: int, protocol: str = "TCP") -> k8s.NetworkPolicyPort:
    return k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(number), protocol=protocol)


def _from_cidrs(cidrs: Sequence[str]) -> list[k8s.NetworkPolicyPeer]:
    return [k8s.NetworkPolicyPeer(ip_block=k8s.IpBlock(cidr=cidr)) for cidr in cidrs]


class ServingNetworkPolicies(Construct):
    """Default-deny plus the explicit allows of the serving namespace (module docstring).

    Args:
        config: The deployment config (namespace, ports, VPC CIDR).
        metrics_ports: Container ports scraped for metrics (gateway metrics, Triton metrics).
        scraper_cidrs: CIDRs the metrics scraper connects from; default: the VPC CIDR.

    Attributes:
        names: Names of the NetworkPolicies, in creation order.

    * ``default-deny``: every pod of the namespace, ingress and egress.
    * ``gateway-ingress``: the gateway port of the serving pods from the load balancer's source
      addresses. NLB client-IP preservation is off (:mod:`k8s_charts.endpoint`) and an ALB always
      proxies, so requests arrive from the load balancer's private addresses inside the VPC: the
      VPC CIDR is admitted, never the clients' CIDRs (those are enforced by the load balancer's
      security group from ``endpoint.allowed_cidrs``). The kubelet's probes come from the node, also
      inside the VPC. Turning client-IP preservation on would require the client CIDRs here.
    * ``metrics-ingress``: the gateway metrics port and Triton's metrics port from the scraper's
      subnets (the AMP managed scraper's network interfaces sit in the cluster's private subnets).
      Triton's HTTP and gRPC ports get no rule: they listen on the pod's loopback only.
    * ``serving-egress``: DNS to CoreDNS (``kube-system``, ``k8s-app: kube-dns``, UDP/TCP 53); the EKS
      Pod Identity agent (``169.254.170.23:80``, EKS user guide "Pod Identity agent"); HTTPS to
      addresses in the VPC (interface VPC endpoints such as Secrets Manager's, which the network stack
      creates with private DNS). Nothing else leaves the pod: model files are read by the Mountpoint
      for S3 driver on the node, not by the pod.
    """

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: DeploymentConfig,
        metrics_ports: Sequence[int],
        scraper_cidrs: Sequence[str] | None = None,
    ) -> None:
        super().__init__(scope, id)
        namespace = config.serving.namespace
        vpc = [config.network.vpc_cidr]
        serving_pods = k8s.LabelSelector(match_labels=naming.app_labels())
        self.names: list[str] = []

        def policy(name: str, spec: k8s.NetworkPolicySpec) -> None:
            k8s.KubeNetworkPolicy(
                self,
                name,
                metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=naming.app_labels()),
                spec=spec,
            )
            self.names.append(name)

        policy(
            "default-deny", k8s.NetworkPolicySpec(pod_selector=k8s.LabelSelector(), policy_types=["Ingress", "Egress"])
        )
        policy(
            "gateway-ingress",
            k8s.NetworkPolicySpec(
                pod_selector=serving_pods,
                policy_types=["Ingress"],
                ingress=[
                    k8s.NetworkPolicyIngressRule(from_=_from_cidrs(vpc), ports=[_port(config.serving.gateway_port)])
                ],
            ),
        )
        policy(
            "metrics-ingress",
            k8s.NetworkPolicySpec(
                pod_selector=serving_pods,
                policy_types=["Ingress"],
                ingress=[
                    k8s.NetworkPolicyIngressRule(
                        from_=_from_cidrs(scraper_cidrs or vpc), ports=[_port(port) for port in metrics_ports]
                    )
                ],
            ),
        )
        dns = k8s.NetworkPolicyPeer(
            namespace_selector=k8s.LabelSelector(match_labels={NAMESPACE_NAME_LABEL: KUBE_SYSTEM}),
            pod_selector=k8s.LabelSelector(match_labels=KUBE_DNS_LABELS),
        )
        policy(
            "serving-egress",
            k8s.NetworkPolicySpec(
                pod_selector=serving_pods,
                policy_types=["Egress"],
                egress=[
                    k8s.NetworkPolicyEgressRule(to=[dns], ports=[_port(DNS_PORT, "UDP"), _port(DNS_PORT, "TCP")]),
                    k8s.NetworkPolicyEgressRule(
                        to=_from_cidrs([POD_IDENTITY_AGENT_CIDR]), ports=[_port(POD_IDENTITY_AGENT_PORT)]
                    ),
                    k8s.NetworkPolicyEgressRule(to=_from_cidrs(vpc), ports=[_port(HTTPS_PORT)]),
                ],
            ),
        )


class ScrapeOnlyNetworkPolicies(Construct):
    """Default-deny plus scrape-port ingress for every pod of ``namespace`` (the GPU metrics exporters).

    The exporters only answer the scraper and call nothing over the network (DCGM reads the node's GPUs
    through the driver), so no egress is allowed.

    Args:
        namespace: The namespace.
        ports: Container ports the scraper reads.
        scraper_cidrs: CIDRs the scraper connects from.
    """

    def __init__(
        self, scope: Construct, id: str, *, namespace: str, ports: Sequence[int], scraper_cidrs: Sequence[str]
    ) -> None:
        super().__init__(scope, id)
        every_pod = k8s.LabelSelector()
        for name, spec in (
            ("default-deny", k8s.NetworkPolicySpec(pod_selector=every_pod, policy_types=["Ingress", "Egress"])),
            (
                "metrics-ingress",
                k8s.NetworkPolicySpec(
                    pod_selector=every_pod,
                    policy_types=["Ingress"],
                    ingress=[
                        k8s.NetworkPolicyIngressRule(from_=_from_cidrs(scraper_cidrs), ports=[_port(p) for p in ports])
                    ],
                ),
            ),
        ):
            k8s.KubeNetworkPolicy(self, name, metadata=k8s.ObjectMeta(name=name, namespace=namespace), spec=spec)
