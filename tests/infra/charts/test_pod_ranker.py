"""The pod ranker and the cross-group priority: RBAC as narrow as the ranker's calls (checked by running it against
an API that grants exactly the rendered rules), pod-deletion-cost by rank, and the inference operator's
``spec.instanceTypes`` in priority order, validated against the vendored CRDs (copies of ../shared/crds)."""

from __future__ import annotations

from typing import Any

import pytest
from capacity_support import G5_LIST, config, default_data, spot_data, with_groups
from cdk_assembly import REPO_ROOT
from k8s_support import of_kind, synth

from k8s_charts import validation
from settings import load_config
from settings.labels import POD_INSTANCE_TYPE_LABEL
from whisper_build.pod_ranker import DELETION_COST, pod_patch, rank_once

SHARED_CRDS = REPO_ROOT.parent / "shared" / "crds"


class RbacApi:
    """A Kubernetes API that answers only the verbs the rendered Role/ClusterRole grant (else 403)."""

    def __init__(self, rules: list[dict[str, Any]], pods: list[dict[str, Any]], nodes: dict[str, str]) -> None:
        self.allowed = {(resource, verb) for rule in rules for resource in rule["resources"] for verb in rule["verbs"]}
        self.pods, self.nodes, self.calls = pods, nodes, []

    def _check(self, resource: str, verb: str) -> None:
        self.calls.append((resource, verb))
        if (resource, verb) not in self.allowed:
            raise PermissionError(f"403: {verb} {resource} is not granted")

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self._check("pods", "list")
        return self.pods

    def get_node(self, name: str) -> dict[str, Any]:
        self._check("nodes", "get")
        return {"metadata": {"labels": {"node.kubernetes.io/instance-type": self.nodes[name]}}}

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._check("pods", "patch")
        pod = next(p for p in self.pods if p["metadata"]["name"] == name)
        for key in ("labels", "annotations"):
            pod["metadata"].setdefault(key, {}).update(patch["metadata"][key])


def _pod(name: str, node: str | None, group: str = "g5") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"whisper-hyperpod.io/gpu-group": group}}, "spec": {"nodeName": node}}


@pytest.fixture(scope="module")
def manifests() -> list[dict[str, Any]]:
    return synth(config(with_groups(default_data(), instance_types=G5_LIST)))


def test_the_ranker_runs_on_exactly_the_rbac_it_is_given(manifests) -> None:
    rules = [
        rule for kind in ("ClusterRole", "Role") for rule in of_kind(manifests, kind)["whisper-pod-ranker"]["rules"]
    ]
    assert sorted((tuple(r["resources"]), tuple(r["verbs"])) for r in rules) == [
        (("nodes",), ("get", "list")),
        (("pods",), ("list", "patch")),
    ]
    pods = [_pod("a", "n1"), _pod("b", "n2"), _pod("pending", None)]
    api = RbacApi(rules, pods, {"n1": "ml.g5.2xlarge", "n2": "ml.g5.8xlarge"})
    assert rank_once(api, "whisper", {"g5": G5_LIST}) == 2
    marks = {p["metadata"]["name"]: p["metadata"].get("annotations", {}).get(DELETION_COST) for p in pods}
    assert marks == {"a": "0", "b": "-2", "pending": None}  # the fallback pod goes first on scale-in
    assert pods[1]["metadata"]["labels"][POD_INSTANCE_TYPE_LABEL] == "ml.g5.8xlarge"
    assert rank_once(api, "whisper", {"g5": G5_LIST}) == 0  # marked pods are not patched again
    narrower = RbacApi([r for r in rules if "pods" in r["resources"]], [_pod("a", "n1")], {"n1": "ml.g5.2xlarge"})
    with pytest.raises(PermissionError):  # the node read is needed: the grant is not wider than the use
        rank_once(narrower, "whisper", {"g5": G5_LIST})


def test_an_unlisted_type_ranks_last_and_a_correct_mark_is_left_alone() -> None:
    assert pod_patch({}, "ml.g5.48xlarge", G5_LIST) == {
        "metadata": {"labels": {POD_INSTANCE_TYPE_LABEL: "ml.g5.48xlarge"}, "annotations": {DELETION_COST: "-3"}}
    }
    marked = {"metadata": {"labels": {POD_INSTANCE_TYPE_LABEL: "ml.g5.4xlarge"}, "annotations": {DELETION_COST: "-1"}}}
    assert pod_patch(marked, "ml.g5.4xlarge", G5_LIST) is None


def test_the_ranker_is_rendered_only_for_priority_lists(manifests) -> None:
    assert "whisper-pod-ranker" in of_kind(manifests, "Deployment")
    assert "whisper-pod-ranker" not in of_kind(synth(config(default_data())), "Deployment")


def test_operator_instance_types_follow_group_priority_then_each_list_and_match_the_crd() -> None:
    data = with_groups(default_data(), instance_types=G5_LIST)
    data["serving"]["target"] = "inference_operator"
    data["capacity"] = {"group_priority": ["g6e", "g5"]}
    manifests = synth(config(data))
    (endpoint,) = of_kind(manifests, "InferenceEndpointConfig").values()
    assert endpoint["spec"]["instanceTypes"] == ["ml.g6e.2xlarge", *G5_LIST]
    for manifest in [endpoint, *of_kind(synth(config(spot_data())), "NodePool").values()]:
        assert validation.validate(manifest, "1.33").startswith("crd:")


@pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="../shared/crds is not beside this checkout")
@pytest.mark.parametrize(
    "name", ["karpenter.sh_nodepools.yaml", "inference.sagemaker.aws.amazon.com_inferenceendpointconfigs.yaml"]
)
def test_the_vendored_crds_are_the_shared_ones(name: str) -> None:
    assert (validation.CRD_DIR / name).read_bytes() == (SHARED_CRDS / name).read_bytes()


def test_every_manifest_of_the_capacity_example_validates() -> None:
    cfg = load_config(REPO_ROOT / "config" / "examples" / "capacity.yaml")
    checked = {validation.validate(m, cfg.cluster.kubernetes_version) for m in synth(cfg)}
    assert {"crd:karpenter.sh/v1/NodePool", "crd:karpenter.sagemaker.amazonaws.com/v1/HyperpodNodeClass"} <= checked
