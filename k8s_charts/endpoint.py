"""The one endpoint in front of every GPU group, provisioned by the AWS Load Balancer Controller.

``endpoint.kind: nlb`` (default): a Service of type LoadBalancer with the controller's NLB
annotations (:func:`nlb_annotations`); ``alb``: a ClusterIP Service plus an Ingress whose target
group uses ``least_outstanding_requests`` (:func:`alb_annotations`). Both select the app label only,
so every group's pods are targets. Entry point: :class:`ServingEndpoint` (idle timeout, TLS, source
ranges and tags in its docstring). Docs: docs/deploy.md, "Security"; docs/kubernetes.md.
"""

from __future__ import annotations

from cdk8s_plus_33 import k8s
from constructs import Construct

from k8s_charts import naming, probes, workload
from settings import names
from settings.schema import DeploymentConfig

SERVICE_NAME = names.ENDPOINT_SERVICE_NAME
HTTP_PORT = names.ENDPOINT_SERVICE_PORT
TLS_PORT = names.ENDPOINT_TLS_PORT
TLS_POLICY = "ELBSecurityPolicy-TLS13-1-2-2021-06"
"""TLS 1.3 + 1.2 with forward-secret ciphers only: the policy Elastic Load Balancing recommends and
uses by default for new TLS/HTTPS listeners (ELB "Security policies" docs)."""
HEALTH_CHECK_INTERVAL_SECONDS = 10
NLB = "service.beta.kubernetes.io/aws-load-balancer-"
SOURCE_RANGES = "service.beta.kubernetes.io/load-balancer-source-ranges"
ALB = "alb.ingress.kubernetes.io/"


def project_tags(config: DeploymentConfig) -> str:
    """``project=<project_name>``: the tag every resource of the deployment carries (docs/deploy.md, cost tracking).

    The controller makes the load balancer, its target groups and security groups itself, so no
    CloudFormation tag reaches them; it applies the Service's ``additional-resource-tags`` /
    the Ingress's ``tags`` annotation (``key=value`` pairs) to each of them (aws-load-balancer-controller
    ``docs/guide/service/annotations.md`` and ``docs/guide/ingress/annotations.md``, "Resource tags").
    """
    return f"{names.PROJECT_TAG}={config.project_name}"


def service_port(config: DeploymentConfig) -> int:
    """The load balancer's (and Service's) port: 443 with a certificate, else 80."""
    return TLS_PORT if config.endpoint.tls else HTTP_PORT


def deregistration_delay_seconds(config: DeploymentConfig) -> int:
    """Target group deregistration delay, s: from the pod's deletion until its gateway has exited.

    preStop sleep + the gateway's stop (drain window, then the longest request): a live session stays
    open through the preStop sleep and the drain window, a request admitted just before SIGTERM runs up
    to the request timeout after it, and the load balancer must not cut either first. Range 0–3600 s
    (AWS ELB "Target groups for your Network Load Balancers", "Deregistration delay"; checked by
    :func:`k8s_charts.timeouts.check_deregistration_delay`).
    """
    return workload.PRESTOP_SLEEP_SECONDS + workload.gateway_stop_seconds(config)


def nlb_target_group_attributes(config: DeploymentConfig) -> str:
    """The NLB target group's attributes (``key=value,…``, the controller's annotation format).

    ``target_health_state.unhealthy.connection_termination.enabled=false``: by default an NLB closes
    every connection to a target that fails its health check, which would cut every live session of a
    pod whose ``/ping`` fails once; off, the target goes ``unhealthy.draining`` instead — no new
    connections, established ones kept for ``target_health_state.unhealthy.draining_interval_seconds``
    (0–360000; set to the deregistration delay), and if it recovers it is ``healthy`` again (AWS's
    "unhealthy.draining" launch note on repost.aws, pointing to
    https://docs.aws.amazon.com/elasticloadbalancing/latest/network/target-group-health.html#unhealthy-target-connection-termination;
    annotation: aws-load-balancer-controller ``docs/guide/service/annotations.md``,
    ``aws-load-balancer-target-group-attributes``). TCP and TLS target groups only, which the NLB's are.
    """
    delay = deregistration_delay_seconds(config)
    return (
        f"deregistration_delay.timeout_seconds={delay},"
        "preserve_client_ip.enabled=false,"
        "target_health_state.unhealthy.connection_termination.enabled=false,"
        f"target_health_state.unhealthy.draining_interval_seconds={delay}"
    )


def nlb_annotations(config: DeploymentConfig) -> dict[str, str]:
    """Annotations of the LoadBalancer Service (all values are strings, as the controller requires)."""
    endpoint = config.endpoint
    port = service_port(config)
    annotations = {
        f"{NLB}type": "external",
        f"{NLB}nlb-target-type": "ip",
        f"{NLB}scheme": endpoint.scheme,
        f"{NLB}healthcheck-protocol": "http",
        f"{NLB}healthcheck-path": probes.PING_PATH,
        f"{NLB}healthcheck-port": "traffic-port",
        f"{NLB}healthcheck-interval": str(HEALTH_CHECK_INTERVAL_SECONDS),
        f"{NLB}healthcheck-healthy-threshold": "2",
        f"{NLB}healthcheck-unhealthy-threshold": "2",
        f"{NLB}healthcheck-success-codes": "200",
        f"{NLB}target-group-attributes": nlb_target_group_attributes(config),
        f"{NLB}attributes": "load_balancing.cross_zone.enabled=true",
        f"{NLB}additional-resource-tags": project_tags(config),
        SOURCE_RANGES: ",".join(config.endpoint_source_cidrs),
    }
    if endpoint.certificate_arn is not None:
        annotations |= {
            f"{NLB}ssl-cert": endpoint.certificate_arn,
            f"{NLB}ssl-ports": str(port),
            f"{NLB}ssl-negotiation-policy": TLS_POLICY,
            f"{NLB}backend-protocol": "tcp",  # TLS ends at the load balancer; pods speak HTTP in the VPC
        }
    else:
        annotations[f"{NLB}listener-attributes.TCP-{port}"] = (
            f"tcp.idle_timeout.seconds={endpoint.idle_timeout_seconds}"
        )
    return annotations


def alb_annotations(config: DeploymentConfig) -> dict[str, str]:
    """Annotations of the ALB Ingress."""
    endpoint = config.endpoint
    protocol = "HTTPS" if endpoint.tls else "HTTP"
    annotations = {
        f"{ALB}scheme": endpoint.scheme,
        f"{ALB}target-type": "ip",
        f"{ALB}listen-ports": f'[{{"{protocol}": {service_port(config)}}}]',
        f"{ALB}inbound-cidrs": ",".join(config.endpoint_source_cidrs),
        f"{ALB}target-group-attributes": (
            "load_balancing.algorithm.type=least_outstanding_requests,"
            f"deregistration_delay.timeout_seconds={deregistration_delay_seconds(config)}"
        ),
        f"{ALB}load-balancer-attributes": (
            f"idle_timeout.timeout_seconds={endpoint.idle_timeout_seconds},"
            "routing.http.drop_invalid_header_fields.enabled=true"
        ),
        f"{ALB}healthcheck-path": probes.PING_PATH,
        f"{ALB}healthcheck-port": "traffic-port",
        f"{ALB}healthcheck-interval-seconds": str(HEALTH_CHECK_INTERVAL_SECONDS),
        f"{ALB}healthy-threshold-count": "2",
        f"{ALB}unhealthy-threshold-count": "2",
        f"{ALB}success-codes": "200",
        f"{ALB}tags": project_tags(config),
    }
    if endpoint.certificate_arn is not None:
        annotations |= {f"{ALB}certificate-arn": endpoint.certificate_arn, f"{ALB}ssl-policy": TLS_POLICY}
    return annotations


class ServingEndpoint(Construct):
    """Service (and, for ``alb``, Ingress) selecting the serving pods of all GPU groups.

    The timeouts it sets are checked against the gateway's by :mod:`k8s_charts.timeouts`.

    Idle timeout: a transcription request can keep its connection silent while it waits for a slot
    (``serving.queue_timeout_seconds``) and then for up to ``serving.request_timeout_seconds`` while the
    GPU works, so the load balancer's idle timeout must be longer (:mod:`k8s_charts.timeouts`). NLB: the listener attribute ``tcp.idle_timeout.seconds`` (default 350 s, 60–6000 s; AWS
    ELB "Network Load Balancer listeners" docs), set with the controller's
    ``aws-load-balancer-listener-attributes.TCP-<port>`` annotation. ALB: the load balancer attribute
    ``idle_timeout.timeout_seconds`` (default 60 s, 1–4000 s). Both come from
    ``endpoint.idle_timeout_seconds``. Annotation names: aws-load-balancer-controller
    ``docs/guide/service/annotations.md`` and ``docs/guide/ingress/annotations.md``.

    Live sessions (``/v1/realtime`` WebSockets) ride the same listener: the NLB passes TCP through and the
    ALB upgrades HTTP/1.1 connections natively (AWS ELB "Listeners for your Application Load Balancers",
    WebSockets); the gateway's WebSocket pings (uvicorn ``ws_ping_interval``) keep a quiet session
    under either idle timeout (:func:`k8s_charts.timeouts.check_websocket_ping`), and the NLB keeps
    them through a failed health check (:func:`nlb_target_group_attributes`).

    Every AWS resource the controller creates for it carries the ``project`` tag (:func:`project_tags`).

    TLS and exposure (docs/deploy.md, Security): with ``endpoint.certificate_arn`` the load balancer
    listens on 443 only (NLB: a TLS listener, ``ssl-cert``/``ssl-ports``; ALB: an HTTPS listener) with
    :data:`TLS_POLICY`; without it, on 80 (refused for ``internet-facing`` by the config schema). An NLB
    TLS listener's idle timeout is fixed at 350 s and cannot be changed (AWS ELB "Update the TCP idle
    timeout" docs), so ``endpoint.idle_timeout_seconds`` must stay 350 there. The load balancer only
    accepts ``DeploymentConfig.endpoint_source_cidrs`` (``load-balancer-source-ranges`` / ALB
    ``inbound-cidrs``). NLB client-IP preservation is off explicitly
    (``preserve_client_ip.enabled=false``, the default for ``ip`` targets): pods see the load
    balancer's private VPC addresses, which is what the serving NetworkPolicy admits
    (:mod:`k8s_charts.network_policy`).
    """

    def __init__(self, scope: Construct, id: str, *, config: DeploymentConfig) -> None:
        super().__init__(scope, id)
        namespace = config.serving.namespace
        nlb = config.endpoint.kind == "nlb"
        k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(
                name=SERVICE_NAME,
                namespace=namespace,
                labels=naming.app_labels(),
                annotations=nlb_annotations(config) if nlb else None,
            ),
            spec=k8s.ServiceSpec(
                type="LoadBalancer" if nlb else "ClusterIP",
                selector=naming.app_labels(),
                ports=[
                    k8s.ServicePort(
                        name="https" if config.endpoint.tls else "http",
                        port=service_port(config),
                        target_port=k8s.IntOrString.from_string(workload.PORT_GATEWAY),
                        protocol="TCP",
                    )
                ],
            ),
        )
        if nlb:
            return
        k8s.KubeIngress(
            self,
            "Ingress",
            metadata=k8s.ObjectMeta(
                name=SERVICE_NAME, namespace=namespace, labels=naming.app_labels(), annotations=alb_annotations(config)
            ),
            spec=k8s.IngressSpec(
                ingress_class_name="alb",
                rules=[
                    k8s.IngressRule(
                        http=k8s.HttpIngressRuleValue(
                            paths=[
                                k8s.HttpIngressPath(
                                    path="/",
                                    path_type="Prefix",
                                    backend=k8s.IngressBackend(
                                        service=k8s.IngressServiceBackend(
                                            name=SERVICE_NAME, port=k8s.ServiceBackendPort(number=service_port(config))
                                        )
                                    ),
                                )
                            ]
                        )
                    )
                ],
            ),
        )
