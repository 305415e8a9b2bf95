"""How far HyperPod got with each instance group, per instance type, and the capacity errors it reported.

With ``NodeProvisioningMode: Continuous`` a cluster goes InService short of nodes and keeps retrying, so a
shortage shows up here, not as a failed ``cdk deploy``: ``DescribeCluster`` gives each group's
``CurrentCount``/``TargetCount`` and ``InstanceTypeDetails`` (count per type of a flexible group),
``ListClusterEvents`` the errors (e.g. insufficient capacity for a type in one zone). Lines such as
``g5: 0/1 nodes (ml.g5.2xlarge 0, ml.g5.4xlarge 0)`` and
``g5: Error 2026-05-01T10:00:00: Insufficient capacity for ml.g5.2xlarge in use1-az4; trying ml.g5.4xlarge``.
Read once a minute during the serving wait (:func:`wait_progress`), by its failure report and by ``make pods``
(:func:`safe_progress`). docs/deploy.md "When a GPU type runs out".
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

MAX_EVENTS = 10
"""Newest error/warning events shown (one ``ListClusterEvents`` page, newest first)."""


def group_lines(described: dict[str, Any]) -> list[str]:
    """One line per instance group of a ``DescribeCluster`` response: nodes joined of target, per type."""
    lines = []
    for group in described.get("InstanceGroups", []):
        details = group.get("InstanceTypeDetails") or []
        desired = (group.get("InstanceRequirements") or {}).get("DesiredInstanceTypes") or []
        counts = {d["InstanceType"]: d.get("CurrentCount", 0) for d in details}
        for instance_type in desired:
            counts.setdefault(instance_type, 0)
        if not counts and group.get("InstanceType"):
            counts[group["InstanceType"]] = group.get("CurrentCount", 0)
        per_type = ", ".join(f"{t} {n}" for t, n in counts.items())
        spot = " Spot" if "Spot" in (group.get("CapacityRequirements") or {}) else ""
        lines.append(
            f"{group['InstanceGroupName']}: {group.get('CurrentCount', 0)}/{group.get('TargetCount', 0)} nodes"
            f"{spot} ({per_type}), {group.get('Status', '?')}"
        )
    return lines


def event_lines(events: list[dict[str, Any]]) -> list[str]:
    """``Error``/``Warn`` events of a ``ListClusterEvents`` page, newest first, at most :data:`MAX_EVENTS`."""
    kept = [e for e in events if e.get("EventLevel") in ("Error", "Warn")][:MAX_EVENTS]
    return [
        f"{e.get('InstanceGroupName') or e.get('ResourceType', 'Cluster')}: {e['EventLevel']} "
        f"{e['EventTime'].isoformat() if hasattr(e.get('EventTime'), 'isoformat') else e.get('EventTime', '')}: "
        f"{e.get('Description', '').strip()}"
        for e in kept
    ]


def wait_lines(described: dict[str, Any], events: list[dict[str, Any]]) -> list[str]:
    """One line per instance group for the serving wait: :func:`group_lines` and the group's newest error.

    E.g. ``g5: 0/1 nodes (ml.g5.2xlarge 0, ml.g5.4xlarge 0), Creating; newest error: Insufficient capacity
    for ml.g5.2xlarge in use1-az4; trying ml.g5.4xlarge`` (``events``: a ``ListClusterEvents`` page, newest first).
    """
    newest: dict[str, dict[str, Any]] = {}
    for event in events:  # newest first
        if event.get("EventLevel") in ("Error", "Warn") and event.get("InstanceGroupName"):
            newest.setdefault(event["InstanceGroupName"], event)
    lines = []
    for group, line in zip(described.get("InstanceGroups", []), group_lines(described), strict=True):
        last = newest.get(group["InstanceGroupName"])
        note = f"; newest {last['EventLevel'].lower()}: {last.get('Description', '').strip()}" if last else ""
        lines.append(line + note)
    return lines


def _events(sagemaker: Any, cluster_name: str, described: dict[str, Any]) -> list[dict[str, Any]]:
    if described.get("NodeProvisioningMode") != "Continuous":  # events exist in Continuous mode only
        return []
    page = sagemaker.list_cluster_events(ClusterName=cluster_name, SortOrder="Descending", MaxResults=50)
    events: list[dict[str, Any]] = page.get("Events", [])
    return events


def wait_progress(sagemaker: Any, cluster_name: str) -> list[str]:
    """:func:`wait_lines` of the live cluster, or one line saying why it could not be read.

    Never raises for an AWS error: the wait goes on.
    """
    try:
        described = sagemaker.describe_cluster(ClusterName=cluster_name)
        return wait_lines(described, _events(sagemaker, cluster_name, described))
    except (BotoCoreError, ClientError) as err:
        return [unreadable(cluster_name, err)]


def unreadable(cluster_name: str, err: Exception) -> str:
    """The line for a cluster that could not be read; a missing one is said to be not created yet."""
    if isinstance(err, ClientError) and err.response["Error"]["Code"] == "ResourceNotFound":
        return f"HyperPod cluster {cluster_name}: not found (step 'stacks' creates it)"
    return f"(could not read the HyperPod cluster {cluster_name}: {err})"


def safe_progress(sagemaker: Any, cluster_name: str) -> list[str]:
    """:func:`progress`, or one line saying why the cluster could not be read (``make pods``, failure reports)."""
    try:
        return progress(sagemaker, cluster_name)
    except (BotoCoreError, ClientError) as err:
        return [unreadable(cluster_name, err)]


def progress(sagemaker: Any, cluster_name: str) -> list[str]:
    """:func:`group_lines` then :func:`event_lines` of the live cluster (two SageMaker read calls).

    Raises:
        botocore.exceptions.ClientError: either call failed (the caller reports it).
    """
    described = sagemaker.describe_cluster(ClusterName=cluster_name)
    return group_lines(described) + event_lines(_events(sagemaker, cluster_name, described))
