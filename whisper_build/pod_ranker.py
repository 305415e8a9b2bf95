"""The pod ranker: ``python -m whisper_build.pod_ranker`` marks GPU pods with their node's instance type and rank.

A pod cannot read its node's labels, so after scheduling this small loop (one replica, RBAC: ``get``/``list``
nodes, ``list``/``patch`` pods in the serving namespace; ``k8s_charts/pod_ranker.py``) writes on every pod of a
group with a priority list (``gpu_groups[].instance_types``):

* label ``whisper-hyperpod.io/instance-type``: the node's ``node.kubernetes.io/instance-type`` (the scrape
  config copies it into the ``instance_type`` metric label);
* annotation ``controller.kubernetes.io/pod-deletion-cost``: ``-rank`` of that type in the group's list (0 for the
  first type, -1 for the next, …), so a ReplicaSet scale-in removes pods on fallback types first and
  ``WhenEmpty`` consolidation then releases those nodes (Kubernetes "ReplicaSet", pod deletion cost).

Settings (environment): ``WHISPER_RANKER_NAMESPACE``, ``WHISPER_RANKER_GROUPS`` (JSON: group → ordered type list),
``WHISPER_RANKER_INTERVAL_SECONDS`` (default 30). docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from settings.labels import GPU_GROUP_LABEL, INSTANCE_TYPE_LABEL, POD_INSTANCE_TYPE_LABEL

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
log = logging.getLogger("pod_ranker")


def pod_patch(pod: Mapping[str, Any], node_type: str, types: Sequence[str]) -> dict[str, Any] | None:
    """The merge patch that marks ``pod`` as running on ``node_type``, or ``None`` when it already is.

    Args:
        pod: The pod object (``metadata.labels``/``annotations`` read).
        node_type: The node's ``node.kubernetes.io/instance-type``, e.g. ``ml.g5.4xlarge``.
        types: The group's priority list; a type not in it ranks after the last.
    """
    rank = types.index(node_type) if node_type in types else len(types)
    metadata = pod.get("metadata", {})
    label, cost = node_type, str(-rank)
    if metadata.get("labels", {}).get(POD_INSTANCE_TYPE_LABEL) == label and (
        metadata.get("annotations", {}).get(DELETION_COST) == cost
    ):
        return None
    return {"metadata": {"labels": {POD_INSTANCE_TYPE_LABEL: label}, "annotations": {DELETION_COST: cost}}}


class KubeApi(Protocol):
    """The three calls the ranker makes (each one an RBAC verb it is granted)."""

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...  # noqa: D102
    def get_node(self, name: str) -> dict[str, Any]: ...  # noqa: D102
    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None: ...  # noqa: D102


def rank_once(api: KubeApi, namespace: str, groups: Mapping[str, Sequence[str]]) -> int:
    """Patch every scheduled pod of ``groups`` whose marks are missing or stale; returns the pods patched."""
    patched = 0
    node_types: dict[str, str] = {}
    selector = f"{GPU_GROUP_LABEL} in ({','.join(sorted(groups))})"
    for pod in api.list_pods(namespace, selector):
        node = pod.get("spec", {}).get("nodeName")
        group = pod.get("metadata", {}).get("labels", {}).get(GPU_GROUP_LABEL)
        if not node or group not in groups:
            continue  # not scheduled yet
        if node not in node_types:
            node_types[node] = api.get_node(node).get("metadata", {}).get("labels", {}).get(INSTANCE_TYPE_LABEL, "")
        patch = pod_patch(pod, node_types[node], groups[group]) if node_types[node] else None
        if patch is not None:
            api.patch_pod(namespace, pod["metadata"]["name"], patch)
            patched += 1
    return patched


class InClusterApi:
    """:class:`KubeApi` over the API server with the pod's service-account token (stdlib HTTP only)."""

    def __init__(self) -> None:
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        self.base = f"https://{host}:{port}"
        with open(f"{SERVICE_ACCOUNT_DIR}/token", encoding="utf-8") as token:
            self.token = token.read().strip()
        self.tls = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT_DIR}/ca.crt")

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, context=self.tls, timeout=30) as response:
            return dict(json.loads(response.read()))

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:  # noqa: D102
        query = urllib.parse.urlencode({"labelSelector": label_selector})
        return list(self._call("GET", f"/api/v1/namespaces/{namespace}/pods?{query}").get("items", []))

    def get_node(self, name: str) -> dict[str, Any]:  # noqa: D102
        return self._call("GET", f"/api/v1/nodes/{name}")

    def patch_pod(self, namespace: str, name: str, patch: dict[str, Any]) -> None:  # noqa: D102
        self._call("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch)


def main() -> None:
    """Rank pods every ``WHISPER_RANKER_INTERVAL_SECONDS`` until stopped; an API error is logged and retried."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    namespace = os.environ["WHISPER_RANKER_NAMESPACE"]
    groups = json.loads(os.environ["WHISPER_RANKER_GROUPS"])
    interval = float(os.environ.get("WHISPER_RANKER_INTERVAL_SECONDS", "30"))
    api = InClusterApi()
    while True:
        try:
            patched = rank_once(api, namespace, groups)
            if patched:
                log.info("ranked %d pod(s)", patched)
        except OSError as err:  # urllib's HTTP and connection errors
            log.warning("ranking failed, retrying in %.0f s: %s", interval, err)
        time.sleep(interval)


if __name__ == "__main__":
    main()
