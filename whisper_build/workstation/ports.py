"""TCP ports for the servers started on this machine (tests, the local demo), and a retry when one is taken.

:func:`free_ports` asks the OS for ports free *now* and releases them, so another process (a test
run beside this one) may bind one before our server does. What the servers do then, measured here:

* ``tritonserver`` 2.51: a taken HTTP or gRPC port makes it exit 1; a taken metrics port is only
  logged (``failed to start Metrics service: Unavailable - Socket '…' already in use``) and it
  keeps running, so its metrics URL reaches the other process;
* the gateway (uvicorn, prometheus-client's metrics server) and ``prometheus`` exit (status 1 or 3)
  with "address already in use";
* moto's ``ThreadedMotoServer.start()`` waits forever (the bind error ends its thread): it is
  started on port 0 instead (:class:`whisper_build.bulk.local.LocalAws`).

None retries, so :func:`start_on_free_ports` does: it picks fresh ports and starts again, at most
:data:`ATTEMPTS` times, when the start raises :class:`PortTaken`. Docs: docs/development.md.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TypeVar

__all__ = ["ATTEMPTS", "PortTaken", "free_ports", "port_taken_in", "ports_in_use", "start_on_free_ports"]

log = logging.getLogger("whisper.ports")

ATTEMPTS = 3
"""Starts with fresh ports before a taken port is an error."""

T = TypeVar("T")


class PortTaken(RuntimeError):
    """A server could not bind a port: another process holds it."""


def port_taken_in(text: str) -> bool:
    """True when a server's output says a bind failed on a port in use (the servers' messages above)."""
    return "already in use" in text.lower()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (the OS picks them)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def ports_in_use(host: str, ports: dict[str, int]) -> list[str]:
    """Names (``"WHISPER_TRITON_GRPC_PORT=8001"``) of the ``ports`` that cannot be bound on ``host`` now.

    A readiness check on a busy port would reach whatever server already listens there, and
    Triton keeps running with a busy metrics port, so launchers refuse busy ports up front. The
    test bind sets ``SO_REUSEADDR`` as the servers' own binds do (Triton's gRPC and HTTP servers,
    uvicorn), so connections of a just-stopped server lingering in ``TIME_WAIT`` do not count as
    busy, while a listening socket still does (Linux refuses that bind either way).
    """
    busy = []
    for setting, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError:
                busy.append(f"{setting}={port}")
    return busy


def start_on_free_ports(start: Callable[[list[int]], T], count: int, attempts: int = ATTEMPTS) -> T:
    """``start(ports)`` with ``count`` fresh :func:`free_ports`, again with fresh ones while it raises :class:`PortTaken`.

    Raises:
        PortTaken: the last attempt's, after ``attempts`` starts.
        ValueError: ``attempts`` < 1.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    attempt = 1
    while True:
        ports = free_ports(count)
        try:
            return start(ports)
        except PortTaken as taken:
            if attempt == attempts:
                raise
            attempt += 1
            log.warning(
                "ports %s: %s; starting again on fresh ports (attempt %d of %d)", ports, taken, attempt, attempts
            )
