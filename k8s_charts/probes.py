"""Probes of the serving container; all of them target the gateway, none a Triton port.

Triton's health endpoints stay 200 when the python stub is dead, so the gateway judges the model by
a canary inference, and the probes split the two questions: readiness is the gateway's ``/ping``
(200 only while the model serves; the load balancer checks the same path); liveness is ``/live``
(the event loop and the supervisor's heartbeat — a dead or hung Triton is repaired inside the
running container, not by a restart); startup is ``/live`` with a short budget (the model load is
readiness' business). Triton's ports are probed by nothing, so they bind the pod's loopback.
Entry points: :func:`startup_probe`, :func:`readiness_probe`, :func:`liveness_probe`.
Docs: docs/gateway.md, "`GET /ping` (readiness): the health rules".
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s

PING_PATH = "/ping"
LIVE_PATH = "/live"
STARTUP_PERIOD_SECONDS = 5
STARTUP_BUDGET_SECONDS = 120
"""The gateway imports its libraries and binds within seconds; 2 min allows a slow, busy node."""
ENGINE_LOAD_BUDGET_SECONDS = 20 * 60
"""Longest engine load expected before a rollout is reported as stuck: Triton loads the encoder and
decoder engines of large-v3 (several GB, read through Mountpoint for S3) in minutes; 20 min leaves
room for a cold S3 read on a fresh node. Used for the Deployment's ``progressDeadlineSeconds``."""


def http_get(path: str, port: str) -> k8s.HttpGetAction:
    """Plain-HTTP GET of ``path`` on the container port named ``port``."""
    return k8s.HttpGetAction(path=path, port=k8s.IntOrString.from_string(port), scheme="HTTP")


def startup_probe(gateway_port_name: str) -> k8s.Probe:
    """Startup on the gateway's ``/live``: ``failureThreshold × periodSeconds`` = :data:`STARTUP_BUDGET_SECONDS`."""
    return k8s.Probe(
        http_get=http_get(LIVE_PATH, gateway_port_name),
        period_seconds=STARTUP_PERIOD_SECONDS,
        failure_threshold=STARTUP_BUDGET_SECONDS // STARTUP_PERIOD_SECONDS,
        timeout_seconds=3,
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


def liveness_probe(gateway_port_name: str) -> k8s.Probe:
    """Liveness on the gateway's ``/live``: restart after 3 failures 10 s apart (30 s)."""
    return k8s.Probe(
        http_get=http_get(LIVE_PATH, gateway_port_name),
        period_seconds=10,
        failure_threshold=3,
        timeout_seconds=5,
    )
