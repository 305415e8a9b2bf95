"""Settings that avoid cluster-side faults other users of the same components reported.

Each test names its report; docs/deploy.md ("Field reports") lists them with their answers.
"""

from __future__ import annotations

import pytest
from cdk_assembly import CONFIGS, synthesized
from k8s_support import PUBLIC_TLS_ENDPOINT, config_with, of_kind, synth, three_groups

from k8s_charts.charts import READINESS_GATE_INJECT_LABEL
from settings.namespaces import KEDA, KUBE_SYSTEM

NLB = "service.beta.kubernetes.io/aws-load-balancer-"
KUBE_DNS = {"k8s-app": "kube-dns"}


@pytest.fixture(scope="module")
def manifests() -> list[dict]:
    return synth(three_groups())


def test_every_egress_allowing_namespace_reaches_cluster_dns_on_udp_and_tcp(manifests) -> None:
    """aws/aws-network-policy-agent#326: a port-53 rule without a peer still blocked DNS; ours names CoreDNS."""
    policies = of_kind(manifests, "NetworkPolicy").values()
    egress_namespaces = {p["metadata"]["namespace"] for p in policies if p["spec"].get("egress")}
    assert egress_namespaces == {"whisper"}
    for namespace in egress_namespaces:
        rules = [r for p in policies if p["metadata"]["namespace"] == namespace for r in p["spec"].get("egress", [])]
        dns = [
            r for r in rules if {(q["port"], q["protocol"]) for q in r.get("ports", [])} == {(53, "UDP"), (53, "TCP")}
        ]
        assert len(dns) == 1, rules
        [peer] = dns[0]["to"]
        assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": KUBE_SYSTEM}
        assert peer["podSelector"]["matchLabels"] == KUBE_DNS


def test_readiness_gate_label_is_on_the_namespace_before_any_pod(manifests) -> None:
    """aws-load-balancer-controller#4034: a pod created before the label (or the webhook) gets no gate."""
    kinds = [(m["kind"], m["metadata"].get("name")) for m in manifests]
    namespace_index = kinds.index(("Namespace", "whisper"))
    assert manifests[namespace_index]["metadata"]["labels"][READINESS_GATE_INJECT_LABEL] == "enabled"
    pod_kinds = {"Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"}
    first_pod = min(
        i for i, m in enumerate(manifests) if m["kind"] in pod_kinds and m["metadata"].get("namespace") == "whisper"
    )
    assert namespace_index < first_pod


@pytest.mark.slow
def test_serving_pods_are_created_after_the_load_balancer_controller() -> None:
    """#4034, the webhook half: the serving manifest waits for the controller that injects the gates."""
    template = synthesized(CONFIGS["default"]).template_json("WhisperHyperpodWorkloads")
    resources = template["Resources"]
    [serving] = [r for k, r in resources.items() if k.startswith("whisperserving")]  # the chart's manifest
    controller = {
        k for k, r in resources.items() if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and "AlbController" in k
    }
    assert controller and controller <= set(serving["DependsOn"])


def test_tls_nlb_listens_on_a_port_the_service_has_and_nowhere_else() -> None:
    """aws-load-balancer-controller#3414: a certificate on a Service without the ssl-ports port gave a port-80 listener."""
    (service,) = of_kind(synth(config_with(endpoint=PUBLIC_TLS_ENDPOINT)), "Service").values()
    annotations = service["metadata"]["annotations"]
    ports = service["spec"]["ports"]
    assert [(p["name"], p["port"]) for p in ports] == [("https", 443)]
    ssl_ports = annotations[NLB + "ssl-ports"].split(",")
    assert set(ssl_ports) <= {p["name"] for p in ports} | {str(p["port"]) for p in ports}
    assert annotations[NLB + "ssl-cert"] and annotations[NLB + "backend-protocol"] == "tcp"


def test_mountpoint_volumes_use_no_local_cache_that_could_be_evicted(manifests) -> None:
    """awslabs/mountpoint-s3-csi-driver#575: a Mountpoint pod evicted for its cache size is never recreated."""
    volumes = of_kind(manifests, "PersistentVolume").values()
    assert volumes
    for volume in volumes:
        attributes = volume["spec"]["csi"].get("volumeAttributes", {})
        assert not {key for key in attributes if key.lower().startswith("cache")}
        assert not [
            o for o in volume["spec"]["mountOptions"] if o.split()[0].split("=")[0] in {"cache", "max-cache-size"}
        ]


OPERATOR_IDENTITY = ({"provider": "aws"}, {"provider": "aws", "identityOwner": "keda"})
"""The KEDA operator's own identity: the ``aws`` provider's default owner, or that owner named (keda-docs 2.18)."""


@pytest.mark.slow
@pytest.mark.parametrize("config_id", ["default", "bulk"])
def test_keda_authenticates_as_its_operator_with_its_own_pod_identity(config_id: str) -> None:
    """kedacore/keda#6418: identityOwner workload demands IRSA; the operator's own identity works with Pod Identity.

    Every TriggerAuthentication of the config (the AMP query's and, with ``bulk:``, the SQS queue's).
    """
    result = synthesized(CONFIGS[config_id])
    auths = of_kind(synth(result.config), "TriggerAuthentication").values()
    assert auths
    for auth in auths:
        assert auth["spec"]["podIdentity"] in OPERATOR_IDENTITY, auth  # never identityOwner: workload or a roleArn
    template = result.template_json("WhisperHyperpodWorkloads")
    associations = [
        r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::EKS::PodIdentityAssociation"
    ]
    assert {(a["Namespace"], a["ServiceAccount"]) for a in associations} >= {(KEDA, "keda-operator")}
