"""The Grafana provisioner Lambda against a local HTTP server standing in for the Grafana API
(127.0.0.1, free port) and a botocore-stubbed ``grafana`` client (moto 5.2 has no Amazon Managed
Grafana backend, so the AWS calls are checked with botocore's Stubber against the real API model)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.stub import ANY, Stubber
from cdk_assembly import CONFIGS

from observability import dashboard
from observability.grafana_provisioner import handler
from settings import DEFAULT_CONFIG_PATH, load_config
from stacks.observability_stack import cloudwatch_datasource_properties

WORKSPACE = "g-abc1234567"
TOKEN = "glsa_test_token"


class FakeGrafana(ThreadingHTTPServer):
    """Records requests; knows data sources by uid; answers like Grafana's HTTP API."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[tuple[str, str, str, object]] = []
        self.datasources: dict[str, dict] = {}
        self.fail_dashboard = False


class _Handler(BaseHTTPRequestHandler):
    server: FakeGrafana

    def log_message(self, *args) -> None:  # keep pytest output clean
        pass

    def _body(self) -> object:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _answer(self, status: int, payload: object) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self, method: str) -> None:
        body = self._body() if method in ("POST", "PUT") else None
        self.server.requests.append((method, self.path, self.headers.get("Authorization", ""), body))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._answer(401, {"message": "invalid API key"})
        if self.path.startswith("/api/datasources/uid/"):
            uid = self.path.rsplit("/", 1)[1]
            if uid not in self.server.datasources:
                return self._answer(404, {"message": "Data source not found"})
            if method == "DELETE":
                del self.server.datasources[uid]
                return self._answer(200, {"message": "Data source deleted"})
            if method == "PUT":
                self.server.datasources[uid] = body
            return self._answer(200, self.server.datasources[uid])
        if self.path == "/api/datasources" and method == "POST":
            self.server.datasources[body["uid"]] = body
            return self._answer(200, {"message": "Datasource added", "id": 1})
        if self.path == "/api/dashboards/db" and method == "POST":
            if self.server.fail_dashboard:
                return self._answer(412, {"message": "version-mismatch"})
            uid = body["dashboard"]["uid"]
            return self._answer(200, {"status": "success", "uid": uid, "url": f"/d/{uid}/whisper"})
        return self._answer(404, {"message": "not found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


@pytest.fixture()
def grafana_api() -> Iterator[FakeGrafana]:
    server = FakeGrafana()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def props() -> dict[str, str]:
    return {
        "WorkspaceId": WORKSPACE,
        "WorkspaceEndpoint": f"{WORKSPACE}.grafana-workspace.us-east-1.amazonaws.com",
        "PrometheusUrl": "https://aps-workspaces.us-east-1.amazonaws.com/workspaces/ws-1234",
        "Region": "us-east-1",
        "DatasourceUid": dashboard.DATASOURCE_UID,
        "DatasourceName": dashboard.DATASOURCE_NAME,
        "DashboardJson": dashboard.dashboard_json(load_config(DEFAULT_CONFIG_PATH)),
    }


@pytest.fixture(scope="module")
def bulk_props(props) -> dict[str, str]:
    """The properties the stack gives the provisioner for config/examples/bulk.yaml."""
    config = load_config(CONFIGS["bulk"])
    return {**props, "DashboardJson": dashboard.dashboard_json(config), **cloudwatch_datasource_properties(config)}


def _stubbed_client(delete_expected: bool = True):
    client = boto3.client("grafana", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stub = Stubber(client)
    stub.add_response(
        "create_workspace_service_account",
        {"id": "sa-7", "name": "n", "grafanaRole": "ADMIN", "workspaceId": WORKSPACE},
        {"workspaceId": WORKSPACE, "name": ANY, "grafanaRole": "ADMIN"},
    )
    stub.add_response(
        "create_workspace_service_account_token",
        {
            "serviceAccountToken": {"id": "tok-1", "name": "n", "key": TOKEN},
            "serviceAccountId": "sa-7",
            "workspaceId": WORKSPACE,
        },
        {
            "workspaceId": WORKSPACE,
            "serviceAccountId": "sa-7",
            "name": ANY,
            "secondsToLive": handler.TOKEN_SECONDS_TO_LIVE,
        },
    )
    if delete_expected:
        stub.add_response(
            "delete_workspace_service_account_token",
            {"tokenId": "tok-1", "serviceAccountId": "sa-7", "workspaceId": WORKSPACE},
            {"workspaceId": WORKSPACE, "serviceAccountId": "sa-7", "tokenId": "tok-1"},
        )
        stub.add_response(
            "delete_workspace_service_account",
            {"serviceAccountId": "sa-7", "workspaceId": WORKSPACE},
            {"workspaceId": WORKSPACE, "serviceAccountId": "sa-7"},
        )
    stub.activate()
    return client, stub


def _local(server: FakeGrafana):
    host, port = server.server_address[:2]
    return lambda _base_url, token: handler.GrafanaApi(f"http://{host}:{port}", token, timeout=10)


def test_provision_creates_datasource_posts_dashboard_and_deletes_the_token(grafana_api, props):
    client, stub = _stubbed_client()
    data = handler.provision(props, client, api_factory=_local(grafana_api))
    stub.assert_no_pending_responses()  # token and service account were deleted
    assert data["Datasource"] == "created"
    assert data["CloudWatchDatasource"] == "none"  # default config: bulk off, no CloudWatch data source
    assert data["DashboardUid"] == dashboard.DASHBOARD_UID
    assert data["DashboardUrl"].startswith(f"https://{props['WorkspaceEndpoint']}/d/")
    methods = [(m, p) for m, p, _, _ in grafana_api.requests]
    assert methods == [
        ("GET", f"/api/datasources/uid/{dashboard.DATASOURCE_UID}"),
        ("POST", "/api/datasources"),
        ("POST", "/api/dashboards/db"),
    ]
    ds = grafana_api.datasources[dashboard.DATASOURCE_UID]
    assert ds["url"] == props["PrometheusUrl"] and ds["type"] == "prometheus"
    assert ds["jsonData"] == {
        "httpMethod": "POST",
        "sigV4Auth": True,
        "sigV4AuthType": "ec2_iam_role",
        "sigV4Region": "us-east-1",
    }
    posted = grafana_api.requests[-1][3]
    assert posted["overwrite"] is True and posted["dashboard"]["id"] is None
    assert posted["dashboard"]["panels"] == json.loads(props["DashboardJson"])["panels"]


def test_second_run_updates_the_existing_datasource(grafana_api, props):
    grafana_api.datasources[dashboard.DATASOURCE_UID] = {"uid": dashboard.DATASOURCE_UID, "url": "old"}
    client, stub = _stubbed_client()
    assert handler.provision(props, client, api_factory=_local(grafana_api))["Datasource"] == "updated"
    assert grafana_api.datasources[dashboard.DATASOURCE_UID]["url"] == props["PrometheusUrl"]
    assert ("PUT", f"/api/datasources/uid/{dashboard.DATASOURCE_UID}") in [
        (m, p) for m, p, _, _ in grafana_api.requests
    ]


def test_grafana_error_fails_with_its_message_and_still_deletes_the_token(grafana_api, props):
    grafana_api.fail_dashboard = True
    client, stub = _stubbed_client()
    with pytest.raises(handler.ProvisioningError, match="412.*version-mismatch"):
        handler.provision(props, client, api_factory=_local(grafana_api))
    stub.assert_no_pending_responses()


def test_missing_properties_are_named_before_any_aws_call(props):
    client, stub = _stubbed_client(delete_expected=False)
    broken = {k: v for k, v in props.items() if k not in ("PrometheusUrl", "Region")}
    with pytest.raises(handler.ProvisioningError, match="PrometheusUrl, Region"):
        handler.provision(broken, client)
    with pytest.raises(AssertionError):  # both create_* responses are still queued: nothing was called
        stub.assert_no_pending_responses()


def test_unreachable_grafana_is_a_clear_error():
    api = handler.GrafanaApi("http://127.0.0.1:9", "t", timeout=2)  # discard port: refused
    with pytest.raises(handler.ProvisioningError, match="unreachable"):
        api.request("GET", "/api/health")


def test_delete_event_does_nothing_and_keeps_the_physical_id():
    event = {"RequestType": "Delete", "PhysicalResourceId": "g-1-dashboard", "ResourceProperties": {}}
    assert handler.on_event(event, None) == {"PhysicalResourceId": "g-1-dashboard"}


def test_dashboard_json_without_uid_is_rejected(grafana_api):
    api = _local(grafana_api)("", TOKEN)
    with pytest.raises(handler.ProvisioningError, match="uid"):
        handler.post_dashboard(api, json.dumps({"title": "x"}))


def _cloudwatch_uids(dashboard_json: str) -> set[str]:
    return {
        target["datasource"]["uid"]
        for panel in json.loads(dashboard_json)["panels"]
        for target in panel.get("targets", [])
        if target["datasource"]["type"] == "cloudwatch"
    }


def test_bulk_config_creates_the_cloudwatch_datasource_its_panels_use(grafana_api, bulk_props):
    client, stub = _stubbed_client()
    data = handler.provision(bulk_props, client, api_factory=_local(grafana_api))
    stub.assert_no_pending_responses()
    assert data["Datasource"] == "created" and data["CloudWatchDatasource"] == "created"
    cloudwatch = grafana_api.datasources[dashboard.CLOUDWATCH_DATASOURCE_UID]
    assert cloudwatch["type"] == "cloudwatch" and cloudwatch["isDefault"] is False
    assert cloudwatch["jsonData"] == {"authType": "ec2_iam_role", "defaultRegion": bulk_props["Region"]}
    assert grafana_api.datasources[dashboard.DATASOURCE_UID]["isDefault"] is True
    posted = grafana_api.requests[-1][3]["dashboard"]
    assert (
        _cloudwatch_uids(json.dumps(posted))
        == {dashboard.CLOUDWATCH_DATASOURCE_UID}
        == set(grafana_api.datasources) - {dashboard.DATASOURCE_UID}
    )


def test_second_bulk_run_updates_the_cloudwatch_datasource(grafana_api, bulk_props):
    grafana_api.datasources[dashboard.CLOUDWATCH_DATASOURCE_UID] = {"uid": dashboard.CLOUDWATCH_DATASOURCE_UID}
    client, _ = _stubbed_client()
    data = handler.provision(bulk_props, client, api_factory=_local(grafana_api), old_props=bulk_props)
    assert data["CloudWatchDatasource"] == "updated"
    assert grafana_api.datasources[dashboard.CLOUDWATCH_DATASOURCE_UID]["jsonData"]["authType"] == "ec2_iam_role"


def test_turning_bulk_off_deletes_the_cloudwatch_datasource(grafana_api, props, bulk_props):
    grafana_api.datasources[dashboard.CLOUDWATCH_DATASOURCE_UID] = {"uid": dashboard.CLOUDWATCH_DATASOURCE_UID}
    client, stub = _stubbed_client()
    data = handler.provision(props, client, api_factory=_local(grafana_api), old_props=bulk_props)
    stub.assert_no_pending_responses()
    assert data["CloudWatchDatasource"] == "deleted"
    assert dashboard.CLOUDWATCH_DATASOURCE_UID not in grafana_api.datasources
    assert ("DELETE", f"/api/datasources/uid/{dashboard.CLOUDWATCH_DATASOURCE_UID}") in [
        (m, p) for m, p, _, _ in grafana_api.requests
    ]
    assert not _cloudwatch_uids(json.dumps(grafana_api.requests[-1][3]["dashboard"]))


def test_on_event_passes_the_old_properties_of_an_update(monkeypatch, props, bulk_props):
    seen = {}
    monkeypatch.setattr(handler, "provision", lambda p, c, old_props=None: seen.update(old=old_props) or {})
    monkeypatch.setattr("boto3.client", lambda *a, **k: None)
    event = {"RequestType": "Update", "ResourceProperties": props, "OldResourceProperties": bulk_props}
    handler.on_event(event, None)
    assert seen["old"] is bulk_props
