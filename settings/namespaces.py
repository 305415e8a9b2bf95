"""Kubernetes namespaces the serving namespace must not be: one constant for the schema and the stacks.

``serving.namespace`` gets a PSA ``restricted`` Namespace and a default-deny NetworkPolicy
(``k8s_charts.charts``, ``k8s_charts.network_policy``); applied to ``kube-system`` they would stop
CoreDNS, the VPC CNI and the controllers. :data:`RESERVED_NAMESPACES` is Kubernetes' own namespaces
plus every namespace this product's add-ons and controllers run in; the stacks take their add-on
namespaces from here, and ``tests/infra/synthesis/test_namespaces.py`` checks that the synthesized templates
use no namespace outside it (besides the serving namespace and those derived from it).
Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

KUBE_SYSTEM = "kube-system"
"""CoreDNS, VPC CNI, kube-proxy, Pod Identity agent, Mountpoint CSI driver, AWS Load Balancer
Controller (aws-cdk-lib ``AlbController`` default) and the HyperPod dependency chart's release."""
KUBERNETES_NAMESPACES = (KUBE_SYSTEM, "kube-public", "kube-node-lease", "default")
"""The namespaces every cluster starts with (Kubernetes docs, "Namespaces": "Initial namespaces")."""

KEDA = "keda"
"""The KEDA Helm release (``stacks/workloads_stack.py``)."""
HYPERPOD_CHART = "aws-hyperpod"
"""Created by the HyperPod dependency chart (aws/sagemaker-hyperpod-cli ``helm_chart/HyperPodHelmChart``)
for its health-monitoring agent; not visible in this project's templates, the chart creates it."""
INFERENCE_OPERATOR = "hyperpod-inference-system"
"""The HyperPod inference operator add-on's service accounts (``stacks/inference_operator.py``)."""
ADDON_NAMESPACES = (KEDA, HYPERPOD_CHART, INFERENCE_OPERATOR)

RESERVED_NAMESPACES = frozenset((*KUBERNETES_NAMESPACES, *ADDON_NAMESPACES))
RESERVED_PREFIX = "kube-"
"""Kubernetes reserves the ``kube-`` prefix for system namespaces (Kubernetes docs, "Namespaces")."""


def check_serving_namespace(value: str) -> str:
    """Return ``value`` unless it is reserved.

    Raises:
        ValueError: one of :data:`RESERVED_NAMESPACES` or ``kube-…``; the message names what runs there.
    """
    if value in RESERVED_NAMESPACES or value.startswith(RESERVED_PREFIX):
        owner = "this deployment's add-ons" if value in ADDON_NAMESPACES else "Kubernetes system components"
        raise ValueError(
            f"'{value}' is reserved for {owner} ({', '.join(sorted(RESERVED_NAMESPACES))} and kube-*): the serving "
            "namespace gets a restricted Pod Security label and a default-deny NetworkPolicy that would break "
            "them; choose a namespace of its own, e.g. whisper"
        )
    return value
