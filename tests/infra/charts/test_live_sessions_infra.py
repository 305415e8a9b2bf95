"""Live sessions (/v1/realtime WebSockets) through the rendered load balancer, pod and KEDA objects.

docs/kubernetes.md, "Idle timeout" and "Autoscaling"; k8s_charts/endpoint.py, k8s_charts/timeouts.py.
"""

from __future__ import annotations

import pytest
from k8s_support import PUBLIC_TLS_ENDPOINT, THREE_GROUPS, config_with, of_kind, synth

from k8s_charts import timeouts
from k8s_charts.workload import serving_env
from settings import ConfigError

NLB = "service.beta.kubernetes.io/aws-load-balancer-"
ALB = "alb.ingress.kubernetes.io/"


def _attributes(text: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in text.split(","))


def _pod_stop_seconds(manifests) -> tuple[float, float, float]:
    """(preStop sleep, drain window, gateway stop timeout) of the first serving pod, seconds."""
    deployment = next(iter(of_kind(manifests, "Deployment").values()))
    (serving,) = (c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "serving")
    env = {e["name"]: e.get("value") for e in serving["env"]}
    prestop = serving["lifecycle"]["preStop"]["sleep"]["seconds"]
    return prestop, float(env["WHISPER_GATEWAY_DRAIN_SECONDS"]), float(env["WHISPER_SUPERVISOR_GATEWAY_STOP_TIMEOUT_S"])


def test_nlb_keeps_sessions_through_a_failed_health_check_and_until_the_gateway_exits() -> None:
    manifests = synth(config_with())
    (service,) = of_kind(manifests, "Service").values()
    attributes = _attributes(service["metadata"]["annotations"][NLB + "target-group-attributes"])
    assert attributes["target_health_state.unhealthy.connection_termination.enabled"] == "false"
    delay = int(attributes["deregistration_delay.timeout_seconds"])
    assert int(attributes["target_health_state.unhealthy.draining_interval_seconds"]) == delay
    prestop, drain, gateway_stop = _pod_stop_seconds(manifests)
    # sessions stay open through the preStop sleep and the drain window; requests until the gateway exits
    assert prestop + drain < prestop + gateway_stop <= delay <= timeouts.MAX_DEREGISTRATION_DELAY_SECONDS


def test_alb_idle_timeout_outlasts_the_gateway_websocket_pings_and_the_drain() -> None:
    manifests = synth(config_with(THREE_GROUPS, endpoint={"kind": "alb", **PUBLIC_TLS_ENDPOINT}))
    (ingress,) = of_kind(manifests, "Ingress").values()
    annotations = ingress["metadata"]["annotations"]
    idle = int(_attributes(annotations[ALB + "load-balancer-attributes"])["idle_timeout.timeout_seconds"])
    assert idle > timeouts.WS_PING_INTERVAL_SECONDS
    delay = int(_attributes(annotations[ALB + "target-group-attributes"])["deregistration_delay.timeout_seconds"])
    prestop, _, gateway_stop = _pod_stop_seconds(manifests)
    assert prestop + gateway_stop <= delay


def test_the_chart_ping_interval_is_the_gateway_uvicorn_one() -> None:
    from whisper_build.serving.gateway.serve import build_server
    from whisper_build.serving.gateway.settings import GatewaySettings

    server, _ = build_server(GatewaySettings())
    assert server.config.ws_ping_interval == timeouts.WS_PING_INTERVAL_SECONDS


def test_a_ping_interval_at_the_idle_timeout_fails_synthesis(monkeypatch: pytest.MonkeyPatch) -> None:
    # the schema keeps the idle timeout >= 60 s; a gateway pinging that seldom would lose quiet sessions
    monkeypatch.setattr(timeouts, "WS_PING_INTERVAL_SECONDS", 60.0)
    config = config_with(
        endpoint={"kind": "alb", "idle_timeout_seconds": 60},
        serving={"request_timeout_seconds": 20, "queue_timeout_seconds": 5},
    )
    with pytest.raises(ValueError, match=r"endpoint.idle_timeout_seconds \(60\) must be greater than .* ping interval"):
        synth(config)


def test_a_deregistration_delay_beyond_elb_maximum_fails_synthesis() -> None:
    config = config_with(endpoint={"idle_timeout_seconds": 3700}, serving={"request_timeout_seconds": 3600})
    with pytest.raises(ValueError, match=r"deregistration delay \(3660 s.*3600 s maximum.*request_timeout_seconds"):
        synth(config)


def test_keda_counts_open_sessions_against_the_configured_session_capacity() -> None:
    (scaled, *_) = of_kind(synth(config_with(serving={"realtime_max_sessions": 48})), "ScaledObject").values()
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert "whisper_realtime_sessions_active" in query and "(48 * count(" in query
    (off, *_) = of_kind(synth(config_with(serving={"realtime_max_sessions": 0})), "ScaledObject").values()
    assert "whisper_realtime_sessions_active" not in off["spec"]["triggers"][0]["metadata"]["query"]


def test_the_gateway_limits_sessions_to_the_session_capacity_keda_assumes() -> None:
    from whisper_build.serving.gateway.settings import GatewaySettings

    config = config_with(serving={"realtime_max_sessions": 48})
    env = serving_env(config, config.gpu_groups[0], "arn:aws:secretsmanager:us-east-1:111122223333:secret:keys")
    assert env["WHISPER_GATEWAY_REALTIME_MAX_SESSIONS"] == 48
    gateway = GatewaySettings(
        **{k.removeprefix("WHISPER_GATEWAY_").lower(): v for k, v in env.items() if k.startswith("WHISPER_GATEWAY_")}
    )
    assert gateway.live.realtime_max_sessions == 48


@pytest.mark.parametrize("bad", [-1, 1025])
def test_a_session_capacity_out_of_range_names_the_field(bad: int) -> None:
    with pytest.raises(ConfigError, match=r"serving.realtime_max_sessions: Input should be"):
        config_with(serving={"realtime_max_sessions": bad})
