"""``make serve``'s gateway beside the local Triton: its ports checked first, then both supervised.

:func:`refuse_busy_gateway_port` runs before Triton starts, so a busy gateway port leaves nothing half-running;
:func:`supervise` runs the started :class:`~.local_triton.LocalTriton` (restarted as in the serving image) and
the gateway under :class:`whisper_build.serving.supervisor.Supervisor`. Used by :func:`.local_triton.main`.
Docs: docs/serving.md, "Local run (no Docker)".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Protocol

from whisper_build.paths import REPO_ROOT
from whisper_build.serving.triton_cleanup import TritonLaunch
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.ports import ports_in_use
from whisper_build.workstation.triton_wheel import TritonStartError

__all__ = ["StartedTriton", "refuse_busy_gateway_port", "supervise"]


class StartedTriton(Protocol):
    """What :func:`supervise` needs of a started :class:`~.local_triton.LocalTriton`."""

    settings: TritonSettings
    command: list[str]
    launch: TritonLaunch

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The running tritonserver process."""
        ...

    def spawn(self) -> subprocess.Popen[bytes]:
        """Start tritonserver again (a restart)."""
        ...

    def end(self, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
        """SIGTERM ``process`` and end it once every request is answered."""
        ...


def supervise(server: StartedTriton, gateway: bool) -> int:
    """Watch the started ``server`` and, with ``gateway``, run the gateway in the foreground.

    Triton is restarted with back-off 1 s → 60 s when it exits, as in the serving image. Ctrl-C or
    SIGTERM stops the gateway first, then Triton. Returns the exit code.
    """
    from whisper_build.serving.supervisor import ChildSpec, RestartPolicy, Supervisor

    triton = ChildSpec(
        "tritonserver",
        server.command,
        server.settings.exit_timeout_s + 5,
        restart=RestartPolicy(),
        spawn=server.spawn,
        after_exit=server.launch.clean_up,
        stop=server.end,
    )
    children = [triton]
    if gateway:
        env = {
            **os.environ,
            "WHISPER_GATEWAY_TRITON_URL": server.settings.grpc_url,
            "WHISPER_GATEWAY_TRITON_METRICS_URL": server.settings.metrics_url,
        }
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        children.append(ChildSpec("gateway", [sys.executable, "-m", "whisper_build.serving.gateway"], 300.0, env))
    supervisor = Supervisor(children)
    signal.signal(signal.SIGTERM, supervisor.request_stop)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    assert server.process is not None
    return supervisor.run(adopted={triton.name: server.process})


def refuse_busy_gateway_port() -> None:
    """Raise when the gateway's traffic or metrics port (``WHISPER_GATEWAY_PORT``/``_METRICS_PORT``) cannot be bound.

    Raises:
        TritonStartError: naming the variable to change.
    """
    from whisper_build.serving.gateway.settings import GatewaySettings

    server = GatewaySettings().server
    ports = {"WHISPER_GATEWAY_PORT": server.port}
    if not server.metrics_on_traffic_port and server.metrics_port:
        ports["WHISPER_GATEWAY_METRICS_PORT"] = server.metrics_port
    busy = ports_in_use(server.host, ports)
    if busy:
        examples = {"WHISPER_GATEWAY_PORT": 9080, "WHISPER_GATEWAY_METRICS_PORT": 9081}
        example = " ".join(f"{name.split('=')[0]}={examples[name.split('=')[0]]}" for name in busy)
        transcribe = (
            " (and export the same WHISPER_GATEWAY_PORT for make transcribe)"
            if "WHISPER_GATEWAY_PORT=" in example
            else ""
        )
        raise TritonStartError(
            f"the gateway's port is already in use on {server.host}: {', '.join(busy)} (another `make serve`?): "
            f"stop it, or set {'that variable' if len(busy) == 1 else 'those variables'} to a free port, "
            f"e.g. {example} make serve{transcribe}"
        )
