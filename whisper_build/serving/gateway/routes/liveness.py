"""``GET /live``: the gateway's liveness, independent of the model server.

It answers from the event loop without calling Triton, so a blocked loop (the kubelet's request
times out) or a stale supervisor heartbeat (``WHISPER_GATEWAY_SUPERVISOR_HEARTBEAT_FILE`` older than
``supervisor_heartbeat_max_age_seconds``) fails it and the kubelet restarts the container; a dead
or loading model does not (that is readiness, ``/ping``). Probes: ``k8s_charts/probes.py``.
Docs: docs/gateway.md, "`GET /live` (liveness)".
"""

from __future__ import annotations

import time

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.errors import ApiError
from whisper_build.serving.gateway.settings import ModelHealthSettings

LIVE = "/live"

router = APIRouter()


def heartbeat_problem(health: ModelHealthSettings, now: float | None = None) -> str | None:
    """Why the supervisor looks dead (``None`` when fine, or when no heartbeat file is configured).

    Args:
        health: the heartbeat file and its largest age, seconds.
        now: wall-clock time (``time.time()``) to compare the file's mtime with.
    """
    path = health.supervisor_heartbeat_file
    if path is None:
        return None
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError as err:
        return f"supervisor heartbeat {path} unreadable: {err.strerror}"
    if age > health.supervisor_heartbeat_max_age_seconds:
        return (
            f"supervisor heartbeat {path} is {age:.0f} s old (limit {health.supervisor_heartbeat_max_age_seconds:g} s)"
        )
    return None


@router.get(LIVE)
async def live(request: Request) -> JSONResponse:
    """200 while the event loop runs and the supervisor's heartbeat is fresh; 503 otherwise."""
    problem = heartbeat_problem(request.app.state.runtime.settings.health)
    if problem is not None:
        raise ApiError(503, ErrorCode.UNAVAILABLE, problem)
    return JSONResponse({"status": "alive"})
