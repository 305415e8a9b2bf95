"""Real check of every PromQL expression: real Triton (CPU whisper) + real gateway + real
Prometheus (Debian ``prometheus``) scraping them with the project's job names and labels, loading
the project's rules file; two short bursts of transcriptions (sequential); then every expression of
observability/queries.py is evaluated through Prometheus's HTTP API and must return data with the
expected labels.

GPU metrics cannot exist on this CPU machine: the ``dcgm-exporter`` job scrapes a static page in
dcgm-exporter's text format (tests/data/observability/dcgm_exporter_a10g.prom, a labelled fixture),
so the GPU expressions are checked for syntax, joins and labels, not for real GPU behaviour.
"""

from __future__ import annotations

import base64
import math
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import speech_samples as samples
from gateway_server import running_gateway
from prometheus_server import PROMETHEUS, running_prometheus, serving_text

from observability import queries, rules, scrape_config
from settings import DEFAULT_CONFIG_PATH, load_config
from whisper_build.serving import contract
from whisper_build.serving.gateway.settings import GatewaySettings

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs the prometheus binary (make system-deps)"),
    pytest.mark.skipif(not samples.speech_tools_available(), reason="needs espeak-ng and sox (make system-deps)"),
]

CONFIG = load_config(DEFAULT_CONFIG_PATH)
GROUP, MISSING_GROUP = (group.name for group in CONFIG.gpu_groups[:2])
"""GROUP: the local processes stand in for one of its pods (the DCGM fixture is its A10G).
MISSING_GROUP: a configured group with no pods here: its NoReadyPods alert must fire, GROUP's must not."""
_GROUP = CONFIG.gpu_groups[0]
POD = f"whisper-{GROUP}-0"
UNREADY_POD = f"whisper-{GROUP}-unready"
"""A second gateway target whose pod is not Ready: the gateway job's relabel rules must drop it."""
EXPECTED_LABELS = {
    "gpu_group": GROUP,
    "gpu_arch": _GROUP.gpu_arch,
    "instance_type": _GROUP.instance_type,
    "pod": POD,
    "namespace": CONFIG.serving.namespace,
}
"""What the production relabel rules must make of the pods' discovery labels."""
SCRAPE_SECONDS = 1.0
REQUESTS_PER_BURST = 3
WAIT_SECONDS = 120.0
DCGM_FIXTURE = Path(__file__).parents[1] / "data" / "observability" / "dcgm_exporter_a10g.prom"
DCGM_MIG_FIXTURE = DCGM_FIXTURE.with_name("dcgm_exporter_h100_mig.prom")
"""A MIG node's page (per-slice profiling gauge), served as a second exporter pod of the group."""
SENTENCE = "Operators watch the queue time and the request rate of every GPU group."


def _query(prometheus: str, expr: str) -> list[dict]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert answer["status"] == "success", (expr, answer)
    return answer["data"]["result"]


def _burst(gateway: str, wav: bytes) -> list[int]:
    """REQUESTS_PER_BURST transcriptions over both routes, one after another; returns HTTP statuses.

    Not concurrent: a request that misses another's batch waits in the model's scheduler for that
    whole decode, which on a CPU shared with other work passes WhisperHighQueueTime's 2 s (an alert this
    module checks stays quiet)."""

    def one(i: int) -> int:
        with httpx.Client(base_url=gateway, timeout=120) as client:
            if i % 2:
                r = client.post("/v1/audio/transcriptions", files={"file": ("s.wav", wav, "audio/wav")})
            else:
                r = client.post("/invocations", json={"audio_data": base64.b64encode(wav).decode()})
            return r.status_code

    return [one(i) for i in range(REQUESTS_PER_BURST)]


def _wait_until(prometheus: str, expr: str, minimum: float) -> None:
    """Poll until the first series of ``expr`` is ≥ ``minimum`` (bounded by WAIT_SECONDS)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        result = _query(prometheus, expr)
        if result and float(result[0]["value"][1]) >= minimum:
            return
        time.sleep(SCRAPE_SECONDS)
    pytest.fail(f"{expr} did not reach {minimum} within {WAIT_SECONDS} s")


def _wait_model_idle(metrics_url: str, timeout_s: float = 180.0) -> None:
    """Until the shared Triton's scheduler has nothing queued or decoding, twice in a row (else fail).

    The session's Triton serves other modules first; work they left (cancelled requests whose batch still
    runs) would wait in this module's scheduler series and pass WhisperHighQueueTime's 2 s on a busy CPU.
    """
    deadline, idle = time.monotonic() + timeout_s, 0
    while idle < 2:
        assert time.monotonic() < deadline, f"the model still had work {timeout_s:g} s after the module started"
        text = httpx.get(metrics_url, timeout=10).text
        busy = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith((contract.SCHEDULER_QUEUED, contract.SCHEDULER_ACTIVE_ROWS))
        )
        idle = idle + 1 if busy == 0 else 0
        time.sleep(0.5)


@pytest.fixture(scope="module")
def prometheus(triton_server, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """Gateway + DCGM fixture page + Prometheus with the project's job names and rules file."""
    _wait_model_idle(triton_server.settings.metrics_url)
    workdir = tmp_path_factory.mktemp("prometheus")
    rules_path = workdir / "rules.yml"
    rules_path.write_text(rules.rules_yaml([GROUP, MISSING_GROUP], 1))
    settings = GatewaySettings(triton_url=triton_server.settings.grpc_url, capacity=4, queue_size=16)
    with (
        running_gateway(settings) as gateway,
        serving_text(DCGM_FIXTURE.read_text()) as dcgm,
        serving_text(DCGM_MIG_FIXTURE.read_text()) as dcgm_mig,
    ):
        triton = f"{triton_server.settings.host}:{triton_server.settings.metrics_port}"

        def pod(address: str, name: str = POD, ready: bool = True) -> scrape_config.LocalPod:
            return scrape_config.LocalPod(address, name, CONFIG.serving.namespace, GROUP, _GROUP.gpu_arch, ready)

        gateway_address = gateway.metrics.removeprefix("http://")  # the metrics port, not the traffic port
        config = scrape_config.local_scrape_config(
            CONFIG,
            {
                queries.JOB_TRITON: [pod(triton)],
                queries.JOB_GATEWAY: [pod(gateway_address), pod(gateway_address, UNREADY_POD, ready=False)],
                queries.JOB_DCGM: [pod(dcgm, f"dcgm-exporter-{GROUP}-0"), pod(dcgm_mig, f"dcgm-exporter-{GROUP}-1")],
            },
            SCRAPE_SECONDS,
            [str(rules_path)],
        )
        with running_prometheus(config, workdir) as url:
            yield url, gateway


@pytest.fixture(scope="module")
def after_traffic(prometheus, tmp_path_factory) -> str:
    """Two bursts, scraped in between and after, so every rate sees a positive increase.

    Returns the Prometheus base URL."""
    url, gateway = prometheus
    wav = samples.speak(SENTENCE, tmp_path_factory.mktemp("speech") / "s.wav").read_bytes()
    assert _burst(gateway, wav) == [200] * REQUESTS_PER_BURST
    # two raw samples of the series the first burst created: a later increase is a positive rate
    _wait_until(url, 'max(count_over_time(whisper_gateway_requests_total{route="/invocations"}[1m]))', 2)
    assert _burst(gateway, wav) == [200] * REQUESTS_PER_BURST
    sent = 2 * REQUESTS_PER_BURST
    _wait_until(url, f'sum(whisper_gateway_requests_total{{route=~"{"|".join(queries.TRANSCRIBE_ROUTES)}"}})', sent)
    _wait_until(url, f'sum(nv_inference_request_success{{model="{queries.TRITON_MODEL}"}})', sent)
    # recording rules run every SCRAPE_SECONDS: wait until one has evaluated over scraped traffic
    _wait_until(url, queries.RECORDING_RULES[0].record, 1e-9)
    return url


EVERY_QUERY = queries.all_queries([GROUP])


@pytest.mark.parametrize("query", EVERY_QUERY, ids=[q.key for q in EVERY_QUERY])
def test_every_expression_returns_data_with_the_expected_labels(after_traffic, query):
    result = _query(after_traffic, query.expr)
    assert result, f"{query.key} returned no data: {query.expr}"
    for series in result:
        labels = series["metric"]
        assert set(query.labels) <= set(labels), (query.key, labels)
        for name in query.labels:
            if name in EXPECTED_LABELS:
                assert labels[name] == EXPECTED_LABELS[name], (query.key, labels)


RATES_THAT_MUST_BE_POSITIVE = (
    queries.Triton.SUCCESS_RATE,
    queries.Triton.REQUEST_RATE,
    queries.Triton.FINISHED_THROUGHPUT,
    queries.Triton.STEP_THROUGHPUT,
    queries.Triton.LATENCY_TOTAL_MS,
    queries.Triton.LATENCY_COMPUTE_MS,
    queries.Gateway.AUDIO_SECONDS_PER_SECOND,
    queries.Gateway.REAL_TIME_FACTOR,
    queries.Gateway.LATENCY_P50,
)


@pytest.mark.parametrize("query", RATES_THAT_MUST_BE_POSITIVE, ids=[q.key for q in RATES_THAT_MUST_BE_POSITIVE])
def test_traffic_shows_up_as_positive_values(after_traffic, query):
    values = [float(s["value"][1]) for s in _query(after_traffic, query.expr)]
    assert values and all(v > 0 and math.isfinite(v) for v in values), (query.key, values)


def test_no_failures_and_a_keda_utilization_between_zero_and_one(after_traffic):
    ratio = _query(after_traffic, queries.Triton.FAILURE_RATIO.expr)
    assert [float(s["value"][1]) for s in ratio] == [0.0]
    (keda,) = _query(after_traffic, queries.scaling_utilization_query(GROUP, CONFIG.serving.realtime_max_sessions))
    assert 0.0 <= float(keda["value"][1]) <= 1.0
    assert (
        _query(after_traffic, queries.scaling_utilization_query(MISSING_GROUP, CONFIG.serving.realtime_max_sessions))
        == []
    )


def _queue_wait_too_long(prometheus: str) -> bool:
    """The recorded scheduler wait of the group passes WhisperHighQueueTime's bound (a slow, shared CPU)."""
    record = next(r.record for r in queries.RECORDING_RULES if r.query.key == queries.Triton.LATENCY_QUEUE_MS.key)
    values = [float(s["value"][1]) for s in _query(prometheus, record)]
    return any(v > queries.QUEUE_MS_ALERT for v in values)


def test_alert_conditions_evaluate_and_only_the_missing_group_has_no_ready_pods(after_traffic):
    for alert in queries.alert_rules([GROUP, MISSING_GROUP]):
        result = _query(after_traffic, alert.expr)  # asserts the expression evaluates
        if alert.alert == "WhisperNoReadyPods" and dict(alert.labels)["gpu_group"] == MISSING_GROUP:
            assert len(result) == 1, alert.expr
        elif alert.alert == "WhisperGpuMemoryNearFull":
            assert result == []  # the fixture GPU uses 78 % of its memory
        elif alert.alert == "WhisperHighQueueTime":
            # how long windows wait depends on this CPU's speed (canaries queue behind a decode that takes
            # seconds on a shared CPU): the alert holds exactly when the recorded wait passes its bound
            assert bool(result) == _queue_wait_too_long(after_traffic), (alert.expr, result)
        else:
            assert result == [], (alert.alert, alert.expr, result)


def test_rules_file_loads_and_every_rule_evaluates_cleanly(after_traffic):
    groups = httpx.get(f"{after_traffic}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = {r.get("name") for g in groups for r in g["rules"]}
    assert {r.record for r in queries.RECORDING_RULES} <= loaded
    unhealthy = [(r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert unhealthy == []
    alerts = httpx.get(f"{after_traffic}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    active = {(a["labels"]["alertname"], a["labels"].get("gpu_group")) for a in alerts}
    slow_cpu = {("WhisperHighQueueTime", GROUP)} if _queue_wait_too_long(after_traffic) else set()
    assert active == {("WhisperNoReadyPods", MISSING_GROUP)} | slow_cpu


def test_relabel_rules_keep_ready_pods_only_and_map_discovery_labels(prometheus):
    """The production relabel rules ran: the unready pod's gateway target is dropped, the kept
    targets carry the labels the rules derive from the pods' discovery labels."""
    url, _ = prometheus
    targets = httpx.get(f"{url}/api/v1/targets", params={"state": "any"}, timeout=10).json()["data"]
    dropped = [t["discoveredLabels"] for t in targets["droppedTargets"]]
    assert [(d["job"], d["__meta_kubernetes_pod_name"]) for d in dropped] == [(queries.JOB_GATEWAY, UNREADY_POD)]
    gateway = [t["labels"] for t in targets["activeTargets"] if t["labels"]["job"] == queries.JOB_GATEWAY]
    assert [{k: t[k] for k in EXPECTED_LABELS} for t in gateway] == [EXPECTED_LABELS]
