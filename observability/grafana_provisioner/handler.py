"""CloudFormation custom resource: the AMP and CloudWatch data sources and the dashboard in Amazon Managed Grafana.

CloudFormation has no resource for Grafana data sources or dashboards (CDK ``aws_grafana`` has only
``CfnWorkspace``), so this Lambda (behind CDK's ``custom_resources.Provider``) calls the Grafana HTTP
API with a temporary service-account token, deleted again at the end. Standard library and boto3
only. Entry points: :func:`on_event` (the resource properties), :func:`provision` (the steps, in its
docstring). Docs: docs/observability.md.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from typing import Any

LOG = logging.getLogger(__name__)
LOG.setLevel(logging.INFO)

TOKEN_SECONDS_TO_LIVE = 300
"""Lifetime of the provisioning token; the API accepts 60 s to 30 days (AMG API reference,
``CreateWorkspaceServiceAccountToken.secondsToLive``)."""

HTTP_TIMEOUT_SECONDS = 30
REQUIRED_PROPERTIES = (
    "WorkspaceId",
    "WorkspaceEndpoint",
    "PrometheusUrl",
    "Region",
    "DatasourceUid",
    "DatasourceName",
    "DashboardJson",
)


class ProvisioningError(Exception):
    """Provisioning failed; the message names the step and the Grafana answer."""


class GrafanaApi:
    """Minimal Grafana HTTP API client with a bearer token.

    Args:
        base_url: ``https://<workspace endpoint>`` (tests pass ``http://127.0.0.1:<port>``).
        token: service-account token.
        timeout: seconds per request.
    """

    def __init__(self, base_url: str, token: str, timeout: float = HTTP_TIMEOUT_SECONDS) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Send one request; return ``(status, decoded JSON or None)``.

        Raises:
            ProvisioningError: status ≥ 400 other than 404, or the server cannot be reached.
        """
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.base_url}{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - https URL from the stack
                return resp.status, _json_or_none(resp.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return 404, _json_or_none(err.read())
            raise ProvisioningError(
                f"Grafana {method} {path} answered {err.code}: {err.read()[:500].decode(errors='replace')}"
            ) from err
        except urllib.error.URLError as err:
            raise ProvisioningError(f"Grafana {method} {path} unreachable: {err.reason}") from err


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def datasource_body(props: Mapping[str, str]) -> dict[str, Any]:
    """Grafana data source for AMP: Prometheus type, SigV4 signed with the workspace role.

    ``sigV4AuthType: ec2_iam_role`` makes AMG sign with the workspace's IAM role (AWS
    HyperPod cluster-setup ``grafana-lambda-function``; AMG user guide, "Use AWS data source
    configuration to add Amazon Managed Service for Prometheus as a data source").
    """
    return {
        "uid": props["DatasourceUid"],
        "name": props["DatasourceName"],
        "type": "prometheus",
        "access": "proxy",
        "url": props["PrometheusUrl"],
        "isDefault": True,
        "jsonData": {
            "httpMethod": "POST",
            "sigV4Auth": True,
            "sigV4AuthType": "ec2_iam_role",
            "sigV4Region": props["Region"],
        },
    }


CLOUDWATCH_UID = "CloudWatchDatasourceUid"


def cloudwatch_datasource_body(props: Mapping[str, str]) -> dict[str, Any]:
    """Grafana data source for CloudWatch metrics, signed with the workspace's IAM role.

    ``authType: ec2_iam_role`` is the "Workspace IAM role" provider, on by default only in Amazon Managed
    Grafana (Grafana docs, "Configure AWS authentication",
    https://grafana.com/docs/grafana/latest/datasources/aws-cloudwatch/aws-authentication/; the value as
    grafana/grafana-aws-sdk ``pkg/awsds/settings.go`` parses it); ``defaultRegion`` is the region of
    queries set to ``default`` (Grafana docs, "Configure the Amazon CloudWatch data source", Provision the
    data source, https://grafana.com/docs/grafana/latest/datasources/aws-cloudwatch/configure/).
    """
    return {
        "uid": props[CLOUDWATCH_UID],
        "name": props.get("CloudWatchDatasourceName") or "Amazon CloudWatch",
        "type": "cloudwatch",
        "access": "proxy",
        "isDefault": False,
        "jsonData": {"authType": "ec2_iam_role", "defaultRegion": props["Region"]},
    }


def upsert_datasource(api: GrafanaApi, body: Mapping[str, Any]) -> str:
    """Create the data source ``body``, or update it in place when its uid exists. Returns ``created``/``updated``."""
    uid = body["uid"]
    status, _ = api.request("GET", f"/api/datasources/uid/{uid}")
    if status == 404:
        api.request("POST", "/api/datasources", body)
        return "created"
    api.request("PUT", f"/api/datasources/uid/{uid}", body)
    return "updated"


def reconcile_cloudwatch(api: GrafanaApi, props: Mapping[str, str], old_props: Mapping[str, str]) -> str:
    """Step 3 of the module docstring.

    Returns ``created``/``updated`` with a CloudWatch uid, ``deleted`` when only the old properties had one
    (a 404 counts: it is gone either way), else ``none``.
    """
    if props.get(CLOUDWATCH_UID):
        return upsert_datasource(api, cloudwatch_datasource_body(props))
    old_uid = old_props.get(CLOUDWATCH_UID)
    if not old_uid:
        return "none"
    api.request("DELETE", f"/api/datasources/uid/{old_uid}")
    return "deleted"


def post_dashboard(api: GrafanaApi, dashboard_json: str) -> dict[str, Any]:
    """POST the dashboard (overwriting one with the same uid); returns Grafana's answer.

    Raises:
        ProvisioningError: the JSON is not a dashboard object with a ``uid``.
    """
    try:
        dashboard = json.loads(dashboard_json)
    except ValueError as err:
        raise ProvisioningError(f"DashboardJson is not JSON: {err}") from err
    if not isinstance(dashboard, dict) or not dashboard.get("uid"):
        raise ProvisioningError("DashboardJson must be a dashboard object with a 'uid'")
    dashboard["id"] = None  # Grafana matches on uid; a stale numeric id would make it fail
    _, answer = api.request(
        "POST",
        "/api/dashboards/db",
        {"dashboard": dashboard, "overwrite": True, "message": "provisioned by CloudFormation"},
    )
    return answer or {}


def provision(
    props: Mapping[str, str],
    grafana_client: Any,
    api_factory: Callable[[str, str], GrafanaApi] = GrafanaApi,
    old_props: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Run steps 1-5 of the module docstring.

    Args:
        props: the resource properties (see module docstring).
        grafana_client: a boto3 ``grafana`` client.
        api_factory: builds the HTTP client from ``(base_url, token)``; tests point it at 127.0.0.1.
        old_props: an Update's ``OldResourceProperties`` (``None`` on Create).

    Returns:
        ``{"DashboardUid", "DashboardUrl", "Datasource", "CloudWatchDatasource"}`` for the custom resource's
        ``Data`` (data source outcomes: ``created``, ``updated``, ``deleted`` or ``none``).

    Raises:
        ProvisioningError: a property is missing or a Grafana call failed (the token and the
            service account are deleted in every case).

    1. creates a temporary ADMIN service account and a token living :data:`TOKEN_SECONDS_TO_LIVE`
       seconds (``grafana:CreateWorkspaceServiceAccount`` / ``CreateWorkspaceServiceAccountToken``,
       Amazon Managed Grafana API reference);
    2. creates or updates the Prometheus data source (SigV4 with the workspace's IAM role, AMP query
       URL without ``/api/v1``) through the Grafana HTTP API (``/api/datasources``; Grafana docs, "Data source
       HTTP API", https://grafana.com/docs/grafana/latest/developers/http_api/data_source/);
    3. with ``CloudWatchDatasourceUid`` (the bulk row's ``AWS/SQS`` panels), creates or updates the CloudWatch
       data source (the workspace's IAM role, default region ``Region``); an Update whose old properties had
       one and whose new ones have none (bulk turned off) deletes it, so no data source outlives its grant;
    4. POSTs the dashboard JSON to ``/api/dashboards/db`` with ``overwrite: true``;
    5. always deletes the token and the service account again.

    Only the standard library and boto3 (both in the Lambda Python runtime) are used.

    Resource properties (all strings): ``WorkspaceId``, ``WorkspaceEndpoint`` (host name, no scheme),
    ``PrometheusUrl``, ``Region``, ``DatasourceUid``, ``DatasourceName``, ``DashboardJson``; optional
    ``CloudWatchDatasourceUid`` with ``CloudWatchDatasourceName``.
    """
    missing = [key for key in REQUIRED_PROPERTIES if not props.get(key)]
    if missing:
        raise ProvisioningError(f"missing resource properties: {', '.join(missing)}")
    workspace = props["WorkspaceId"]
    name = f"cfn-dashboard-provisioner-{uuid.uuid4().hex[:8]}"
    account = grafana_client.create_workspace_service_account(workspaceId=workspace, name=name, grafanaRole="ADMIN")
    account_id = account["id"]
    try:
        token = grafana_client.create_workspace_service_account_token(
            workspaceId=workspace,
            serviceAccountId=account_id,
            name=name,
            secondsToLive=TOKEN_SECONDS_TO_LIVE,
        )["serviceAccountToken"]
        try:
            api = api_factory(f"https://{props['WorkspaceEndpoint']}", token["key"])
            datasource = upsert_datasource(api, datasource_body(props))
            cloudwatch = reconcile_cloudwatch(api, props, old_props or {})
            answer = post_dashboard(api, props["DashboardJson"])
        finally:
            grafana_client.delete_workspace_service_account_token(
                workspaceId=workspace, serviceAccountId=account_id, tokenId=token["id"]
            )
    finally:
        grafana_client.delete_workspace_service_account(workspaceId=workspace, serviceAccountId=account_id)
    LOG.info("datasource %s, cloudwatch %s, dashboard %s", datasource, cloudwatch, answer.get("uid"))
    return {
        "DashboardUid": str(answer.get("uid", "")),
        "DashboardUrl": f"https://{props['WorkspaceEndpoint']}{answer.get('url', '')}",
        "Datasource": datasource,
        "CloudWatchDatasource": cloudwatch,
    }


def on_event(event: Mapping[str, Any], _context: Any) -> dict[str, Any]:
    """CDK Provider ``onEvent`` entry point.

    Create and Update provision; Delete does nothing (the dashboard and data source go with
    the Grafana workspace, which the same stack deletes).
    """
    props = event.get("ResourceProperties", {})
    physical_id = event.get("PhysicalResourceId") or f"{props.get('WorkspaceId', 'unknown')}-dashboard"
    if event["RequestType"] == "Delete":
        return {"PhysicalResourceId": physical_id}
    import boto3  # in the Lambda runtime; imported here so tests can inject a client

    client = boto3.client("grafana", region_name=props.get("Region"))
    data = provision(props, client, old_props=event.get("OldResourceProperties"))
    return {"PhysicalResourceId": physical_id, "Data": data}
