"""Probes of the serving container, matched to Triton's health semantics.

* startup: Triton's ``/v2/health/live``, which answers only once the server has started, i.e.
  after the model repository (TensorRT-LLM engines) is loaded. Budget :data:`ENGINE_LOAD_BUDGET_SECONDS`.
* readiness: the gateway's ``/ping`` (200 when Triton is live and the model ready, 503 while
  draining): the load balancer and the Service only send requests to pods that can serve them.
* liveness: Triton's ``/v2/health/live``, never ``/v2/health/ready``: readiness drops while a
  model (re)loads, and restarting the container then would only make the load start over
  (KServe v2 inference protocol, which Triton implements: "live" = the server can receive and
  respond to requests, "ready" = the models are ready for inferencing).
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

LIVE_PATH = "/v2/health/live"
PING_PATH = "/ping"
STARTUP_PERIOD_SECONDS = 10
ENGINE_LOAD_BUDGET_SECONDS = 20 * 60
"""Longest engine load allowed before the kubelet restarts the container: Triton loads the encoder
and decoder engines of large-v3 (several GB, read through Mountpoint for S3) in minutes; 20 min
leaves room for a cold S3 read on a fresh node."""


def http_get(path: str, port: str) -> k8s.HttpGetAction:
    """Plain-HTTP GET of ``path`` on the container port named ``port``."""
    return k8s.HttpGetAction(path=path, port=k8s.IntOrString.from_string(port), scheme="HTTP")


def startup_probe(triton_http_port_name: str) -> k8s.Probe:
    """Startup on Triton live: ``failureThreshold × periodSeconds`` = :data:`ENGINE_LOAD_BUDGET_SECONDS`."""
    return k8s.Probe(
        http_get=http_get(LIVE_PATH, triton_http_port_name),
        period_seconds=STARTUP_PERIOD_SECONDS,
        failure_threshold=ENGINE_LOAD_BUDGET_SECONDS // STARTUP_PERIOD_SECONDS,
        timeout_seconds=5,
    )


def readiness_probe(gateway_port_name: str) -> k8s.Probe:
    """Readiness on the gateway's ``/ping``; two failures (10 s) take the pod out of rotation."""
    return k8s.Probe(
        http_get=http_get(PING_PATH, gateway_port_name),
        period_seconds=5,
        failure_threshold=2,
        success_threshold=1,
        timeout_seconds=3,
    )


def liveness_probe(triton_http_port_name: str) -> k8s.Probe:
    """Liveness on Triton's ``/v2/health/live``: restart after 6 failures (1 min)."""
    return k8s.Probe(
        http_get=http_get(LIVE_PATH, triton_http_port_name),
        period_seconds=10,
        failure_threshold=6,
        timeout_seconds=5,
    )
