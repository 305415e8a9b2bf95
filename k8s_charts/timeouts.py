"""Rules between the load balancer's, the gateway's and the pod's timeouts, checked at synthesis.

Each rule raises :class:`ValueError` naming the config fields (or chart constants) and the reason,
so ``make synth`` fails instead of deploying an endpoint that cuts requests:

* :func:`check_idle_timeout` — the LB idle timeout exceeds the queue wait + the request timeout (a
  request's connection is silent while it waits for a slot and while it runs).
* :func:`check_tls_idle_timeout` — an NLB TLS listener (``endpoint.certificate_arn``) has a fixed
  350 s idle timeout, so ``endpoint.idle_timeout_seconds`` must say 350 there.
* :func:`check_keep_alive` — with ``endpoint.kind: alb`` the gateway's keep-alive exceeds the ALB
  idle timeout (else the gateway closes connections the ALB is about to reuse: sporadic 502s).
* :func:`check_websocket_ping` / :func:`check_deregistration_delay` — the LB idle timeout exceeds the
  gateway's WebSocket ping interval (quiet live sessions stay open); the deregistration delay ≤ 3600 s.
* :func:`check_prestop` — the preStop sleep covers the AWS Load Balancer Controller's deregistration of
  a terminating pod's IP target and its reaching the load balancer. Docs: docs/kubernetes.md, "Idle timeout".
"""

from __future__ import annotations

from settings.schema import DeploymentConfig

DEREGISTRATION_PROPAGATION_SECONDS = 30
"""Time from a pod's deletion until its IP target stops receiving new requests: the controller sees
the endpoint change, calls ``DeregisterTargets``, and the ELB applies it on every load balancer
node. The AWS Load Balancer Controller maintainers break this down as "controller process time +
ELB API propagation time + HTTP req/resp RTT + kube-proxy's iptable update time" and size the
preStop sleep on it (kubernetes-sigs/aws-load-balancer-controller#1719, #2106); the controller's
pod readiness gate doc covers the start of a pod's life, not its end
(https://kubernetes-sigs.github.io/aws-load-balancer-controller/latest/deploy/pod_readiness_gate/).
The EKS best-practices guide ("Gracefully handle the client requests") recommends a preStop sleep
for the same propagation: https://docs.aws.amazon.com/eks/latest/best-practices/load-balancing.html."""


def check_idle_timeout(config: DeploymentConfig) -> None:
    """LB idle timeout > queue wait + request timeout.

    Raises:
        ValueError: it is not; the message names the three fields.
    """
    idle, serving = config.endpoint.idle_timeout_seconds, config.serving
    longest = serving.queue_timeout_seconds + serving.request_timeout_seconds
    if idle <= longest:
        raise ValueError(
            f"endpoint.idle_timeout_seconds ({idle}) must be greater than serving.queue_timeout_seconds "
            f"({serving.queue_timeout_seconds}) + serving.request_timeout_seconds ({serving.request_timeout_seconds})"
            f" = {longest}: the load balancer would cut a queued long transcription whose connection is silent "
            "while it waits and the GPU works"
        )


NLB_TLS_IDLE_TIMEOUT_SECONDS = 350
"""Fixed idle timeout of NLB TLS listeners: "The connection idle timeout for TLS listeners is 350
seconds and can't be modified" (AWS ELB docs, "Update the TCP idle timeout for your Network Load
Balancer listener")."""


def check_tls_idle_timeout(config: DeploymentConfig) -> None:
    """With an NLB and a certificate: ``endpoint.idle_timeout_seconds`` is the TLS listener's fixed 350 s.

    Raises:
        ValueError: it is another value.
    """
    endpoint = config.endpoint
    if endpoint.kind == "nlb" and endpoint.tls and endpoint.idle_timeout_seconds != NLB_TLS_IDLE_TIMEOUT_SECONDS:
        raise ValueError(
            f"endpoint.idle_timeout_seconds ({endpoint.idle_timeout_seconds}) cannot apply with "
            f"endpoint.certificate_arn on an NLB: TLS listeners have a fixed {NLB_TLS_IDLE_TIMEOUT_SECONDS} s "
            "idle timeout; set 350, or use endpoint.kind: alb"
        )


WS_PING_INTERVAL_SECONDS = 20.0
"""The gateway's WebSocket ping interval: uvicorn's ``ws_ping_interval`` default (20.0 s in uvicorn
0.54.0 ``config.py``), which ``build_server`` in ``whisper_build/serving/gateway/serve.py`` leaves
unset (a test holds the two equal). Each ping frame is traffic, so it resets an NLB's TCP idle timer and
an ALB's connection idle timeout."""


def check_websocket_ping(config: DeploymentConfig) -> None:
    """LB idle timeout > :data:`WS_PING_INTERVAL_SECONDS` (with TLS on an NLB the fixed 350 s is).

    Raises:
        ValueError: it is not; the message names the field.
    """
    idle = config.endpoint.idle_timeout_seconds
    if idle <= WS_PING_INTERVAL_SECONDS:
        raise ValueError(
            f"endpoint.idle_timeout_seconds ({idle}) must be greater than the gateway's WebSocket ping interval "
            f"({WS_PING_INTERVAL_SECONDS:g} s): the load balancer would cut live sessions between pings"
        )


MAX_DEREGISTRATION_DELAY_SECONDS = 3600
"""Largest target group ``deregistration_delay.timeout_seconds`` (0–3600 s; AWS ELB target group attributes)."""


def check_deregistration_delay(delay_seconds: int) -> None:
    """The deregistration delay (:func:`k8s_charts.endpoint.deregistration_delay_seconds`) is ≤ 3600 s.

    Raises:
        ValueError: it is longer; the message names the field that drives it.
    """
    if delay_seconds > MAX_DEREGISTRATION_DELAY_SECONDS:
        raise ValueError(
            f"the target group's deregistration delay ({delay_seconds} s = preStop + drain + "
            "serving.request_timeout_seconds + margins) exceeds ELB's "
            f"{MAX_DEREGISTRATION_DELAY_SECONDS} s maximum: lower serving.request_timeout_seconds"
        )


def check_keep_alive(config: DeploymentConfig, keep_alive_seconds: int) -> None:
    """With ``endpoint.kind: alb``: the gateway's keep-alive > the ALB idle timeout.

    Raises:
        ValueError: it is not.
    """
    if config.endpoint.kind == "alb" and keep_alive_seconds <= config.endpoint.idle_timeout_seconds:
        raise ValueError(
            f"the gateway's keep-alive (WHISPER_GATEWAY_KEEP_ALIVE_SECONDS={keep_alive_seconds}) must be greater than "
            f"endpoint.idle_timeout_seconds ({config.endpoint.idle_timeout_seconds}) with endpoint.kind: alb: "
            "the gateway would close idle connections the ALB reuses (502)"
        )


def check_prestop(prestop_seconds: int, termination_grace_seconds: int) -> None:
    """The preStop sleep is ≥ :data:`DEREGISTRATION_PROPAGATION_SECONDS` and shorter than the grace period.

    Raises:
        ValueError: it is not.
    """
    if prestop_seconds < DEREGISTRATION_PROPAGATION_SECONDS:
        raise ValueError(
            f"the preStop sleep ({prestop_seconds} s) must be at least {DEREGISTRATION_PROPAGATION_SECONDS} s: "
            "the load balancer keeps sending new requests until the controller's deregistration reaches it"
        )
    if prestop_seconds >= termination_grace_seconds:
        raise ValueError(
            f"the preStop sleep ({prestop_seconds} s) must be shorter than terminationGracePeriodSeconds "
            f"({termination_grace_seconds} s)"
        )


def check_timeouts(config: DeploymentConfig) -> None:
    """All rules, with the values the charts render.

    Raises:
        ValueError: the first rule broken.
    """
    from k8s_charts import endpoint, workload

    check_idle_timeout(config)
    check_tls_idle_timeout(config)
    check_websocket_ping(config)
    check_deregistration_delay(endpoint.deregistration_delay_seconds(config))
    check_keep_alive(config, workload.gateway_keep_alive_seconds(config))
    check_prestop(workload.PRESTOP_SLEEP_SECONDS, workload.termination_grace_seconds(config))
