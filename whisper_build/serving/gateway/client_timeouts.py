"""Slow clients bounded where uvicorn reads the socket: a header deadline and a minimum upload rate.

Entry point: :class:`ClientTimeouts` (the details, in its docstring).
Docs: docs/gateway.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.errors import error_response
from whisper_build.serving.gateway.settings import GatewaySettings

__all__ = ["ClientTimeouts", "bounded_h11_protocol", "http_protocol"]

log = logging.getLogger("whisper.gateway.clients")


@dataclass(frozen=True)
class ClientTimeouts:
    """Deadlines of one connection (see the module docstring).

    Attributes:
        header_seconds: longest wait for a request's complete headers.
        body_seconds: longest wait for the body's bytes beyond what the rate earns.
        min_bytes_per_second: each this many bytes received extends the body deadline by 1 s.

    uvicorn has neither: its only timer is the keep-alive one, armed after a response and cancelled by
    any byte, and ASGI middleware runs only once the headers have parsed. So a client that opens a
    connection and sends nothing, or trickles its headers or body a byte at a time, holds a connection
    (and, once its headers are in, an upload slot) for as long as it likes. :func:`bounded_h11_protocol`
    returns uvicorn's h11 protocol with two deadlines, as Apache's ``mod_reqtimeout`` sets them
    (https://httpd.apache.org/docs/2.4/mod/mod_reqtimeout.html, ``header=20 body=20,MinRate=500``;
    nginx's ``client_header_timeout`` / ``client_body_timeout`` answer 408 the same way,
    https://nginx.org/en/docs/http/ngx_http_core_module.html#client_body_timeout):

    * **headers**: a request's headers must be complete ``header_seconds`` after the connection opened
      or, on a kept-alive connection, after the request's first byte;
    * **body**: once the headers are in, the body must be complete by ``body_seconds`` after them plus
      one second per ``min_bytes_per_second`` bytes received so far — a fast upload of any size is
      never cut, a trickle is.

    Past a deadline the client gets **408** ``request_timeout`` (``Connection: close``) when no
    response has started, and the connection is closed; the app sees ``http.disconnect``. Requests
    whose body has arrived are not timed here (the request timeout covers their processing).
    """

    header_seconds: float = 20.0
    body_seconds: float = 20.0
    min_bytes_per_second: float = 500.0


def _timeout_response(message: str, path: str) -> bytes:
    """A complete HTTP/1.1 408 in the error shape of ``path``, closing the connection."""
    response = error_response(408, ErrorCode.REQUEST_TIMEOUT, message, {"Connection": "close"}, path)
    head = [b"HTTP/1.1 408 Request Timeout"]
    head += [name + b": " + value for name, value in response.raw_headers]
    return b"\r\n".join(head) + b"\r\n\r\n" + bytes(response.body)


def http_protocol(settings: GatewaySettings) -> type[H11Protocol]:
    """The bounded protocol with the deadlines of ``settings`` (``WHISPER_GATEWAY_*_TIMEOUT_SECONDS`` …)."""
    return bounded_h11_protocol(
        ClientTimeouts(
            settings.uploads.header_timeout_seconds,
            settings.uploads.body_timeout_seconds,
            settings.uploads.min_upload_bytes_per_second,
        )
    )


class BoundedH11Protocol(H11Protocol):
    """H11Protocol + header deadline + body minimum rate; :func:`bounded_h11_protocol` sets :attr:`timeouts`."""

    timeouts: ClassVar[ClientTimeouts]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._body_started = 0.0
        self._body_bytes = 0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        reading_body = self._body_timer is not None
        super().data_received(data)
        if self.transport.get_protocol() is not self:  # upgraded to a WebSocket: not an upload to time
            self._cancel_timers()
            return
        state = self.conn.their_state
        if state is h11.IDLE:  # a request's headers are arriving
            if self._header_timer is None:
                self._arm_header_deadline()
        elif state is h11.SEND_BODY:
            self._cancel_header_deadline()
            if reading_body:
                self._body_bytes += len(data)
            else:
                self._body_started, self._body_bytes = self.loop.time(), 0
                self._body_timer = self.loop.call_later(self.timeouts.body_seconds, self._check_body)
        else:  # the request is complete (or the connection is done): nothing to time here
            self._cancel_timers()

    def _arm_header_deadline(self) -> None:
        self._header_timer = self.loop.call_later(self.timeouts.header_seconds, self._header_expired)

    def _cancel_header_deadline(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_header_deadline()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _header_expired(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._time_out(
                f"request headers not received within {self.timeouts.header_seconds:g} s "
                "(WHISPER_GATEWAY_HEADER_TIMEOUT_SECONDS)",
                "",
            )

    def _check_body(self) -> None:
        self._body_timer = None
        if self.conn.their_state is not h11.SEND_BODY or self.transport.is_closing():
            return
        deadline = (
            self._body_started + self.timeouts.body_seconds + self._body_bytes / self.timeouts.min_bytes_per_second
        )
        remaining = deadline - self.loop.time()
        if remaining > 0:
            self._body_timer = self.loop.call_later(remaining, self._check_body)
            return
        self._time_out(
            f"request body too slow: {self._body_bytes} bytes in {self.loop.time() - self._body_started:.0f} s; "
            f"the upload must finish within {self.timeouts.body_seconds:g} s plus 1 s per "
            f"{self.timeouts.min_bytes_per_second:g} bytes (WHISPER_GATEWAY_BODY_TIMEOUT_SECONDS, "
            "WHISPER_GATEWAY_MIN_UPLOAD_BYTES_PER_SECOND)",
            self.scope["path"] if self.scope else "",
        )

    def _time_out(self, message: str, path: str) -> None:
        """408 (when no response has started), close; the app's ``receive()`` returns ``http.disconnect``."""
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "client"
        log.warning("%s: %s; closing the connection", client, message)
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            self.transport.write(_timeout_response(message, path))
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()


def bounded_h11_protocol(timeouts: ClientTimeouts) -> type[H11Protocol]:
    """The ``H11Protocol`` of uvicorn with the deadlines of ``timeouts`` (for ``uvicorn.Config(http=...)``)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"timeouts": timeouts})
