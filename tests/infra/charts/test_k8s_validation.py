"""Every synthesized manifest validates: core objects against the Kubernetes schema of the cluster's
version (kubernetes-validate, strict), custom resources against their CRD's own openAPIV3Schema."""

from __future__ import annotations

import copy

import jsonschema
import kubernetes_validate
import pytest
from k8s_support import PUBLIC_TLS_ENDPOINT, THREE_GROUPS, config_with, crd_schemas, synth, three_groups, validate

CONFIGS = {
    "default": lambda: config_with(),
    "three-groups": three_groups,
    "alb": lambda: config_with(THREE_GROUPS, endpoint={"kind": "alb", **PUBLIC_TLS_ENDPOINT}),
    "nlb-tls": lambda: config_with(endpoint=PUBLIC_TLS_ENDPOINT),
    "node-autoscaling": lambda: config_with(THREE_GROUPS, cluster={"node_autoscaling": True}),
    "k8s-1.29": lambda: config_with(cluster={"kubernetes_version": "1.29"}),
}


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def config_and_manifests(request):
    config = CONFIGS[request.param]()
    return config, synth(config)


def test_every_manifest_validates_for_the_cluster_version(config_and_manifests) -> None:
    config, manifests = config_and_manifests
    # GIVEN the manifests of one config WHEN each is validated THEN none fails, core objects
    # against the schema of the configured version (the closest one kubernetes-validate ships)
    results = {
        f"{m['kind']}/{m['metadata']['name']}": validate(m, config.cluster.kubernetes_version) for m in manifests
    }
    core = [r for r in results.values() if r.startswith("k8s:")]
    assert core and set(core) == {f"k8s:{config.cluster.kubernetes_version}"}


def test_custom_resources_are_checked_against_their_crds(config_and_manifests) -> None:
    config, manifests = config_and_manifests
    validated = {
        validate(m, config.cluster.kubernetes_version)
        for m in manifests
        if (m["apiVersion"], m["kind"]) in crd_schemas()
    }
    expected = {"crd:keda.sh/v1alpha1/ScaledObject", "crd:keda.sh/v1alpha1/TriggerAuthentication"}
    if config.cluster.node_autoscaling:
        expected |= {"crd:karpenter.sh/v1/NodePool", "crd:karpenter.sagemaker.amazonaws.com/v1/HyperpodNodeClass"}
    assert validated == expected


def _first(manifests, kind):
    return copy.deepcopy(next(m for m in manifests if m["kind"] == kind))


def test_validation_rejects_unknown_and_wrong_fields() -> None:
    # the checks above could pass vacuously if the validator accepted anything: prove they fail
    manifests = synth(config_with(THREE_GROUPS, cluster={"node_autoscaling": True}))
    deployment = _first(manifests, "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment, "1.33")

    scaled = _first(manifests, "ScaledObject")
    scaled["spec"]["fallback"] = {"replicas": 2}  # failureThreshold is required by the CRD
    with pytest.raises(jsonschema.ValidationError, match="failureThreshold"):
        validate(scaled, "1.33")
    scaled = _first(manifests, "ScaledObject")
    scaled["spec"]["minReplicas"] = 1  # HPA spelling, unknown to KEDA
    with pytest.raises(jsonschema.ValidationError, match="minReplicas"):
        validate(scaled, "1.33")

    daemonset = _first(manifests, "DaemonSet")
    daemonset["spec"]["replicas"] = 1  # a Deployment field, unknown to DaemonSetSpec
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(daemonset, "1.33")

    pool = _first(manifests, "NodePool")
    pool["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Equals"
    with pytest.raises(jsonschema.ValidationError):
        validate(pool, "1.33")

    node_class = _first(manifests, "HyperpodNodeClass")
    node_class["spec"]["instanceGroups"] = [f"ig{i}" for i in range(11)]
    with pytest.raises(jsonschema.ValidationError, match="too long"):
        validate(node_class, "1.33")


def test_synth_cli_validates_what_it_writes(tmp_path, capsys) -> None:
    from k8s_charts import synth as synth_cli
    from k8s_charts.validation import validate_files

    out = tmp_path / "k8s"
    args = ["--config", str(THREE_GROUPS), "--out", str(out), "--validate"]
    assert synth_cli.main(args) == 0
    assert "validated 4 files against Kubernetes 1.33" in capsys.readouterr().out

    broken = out / "0001-whisper-endpoint.k8s.yaml"
    broken.write_text(broken.read_text().replace("targetPort: http", "targetPort: http\n      nodePortt: 1"))
    assert validate_files([broken], "1.33") == [
        f"{broken}: Service/whisper: Additional properties are not allowed ('nodePortt' was unexpected)"
    ]
