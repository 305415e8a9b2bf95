"""The WebSocket loop of ``GET /v1/realtime?intent=transcription`` (docs/gateway.md, "Live transcription").

:class:`LiveSessions` is built once per gateway process and serves each connection with :meth:`~LiveSessions.serve`:
it checks the query (OpenAI's ``invalid_model`` for ``model`` with ``intent``), takes a session slot (none
free → close 1013, draining → 1012), sends ``session.created``, then dispatches client events until the
client leaves, the session reaches its length limit, its audio goes idle, or the process drains (the turn
in progress is finished, then close 1012). A bad event gets an ``error`` event and the session goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from whisper_build.serving.realtime.events import ProtocolError, legacy_to_ga, legacy_view, merge, session_object
from whisper_build.serving.realtime.limits import OVERSIZED_KEY
from whisper_build.serving.realtime.ports import HealthRecorder, LiveMetrics, SessionLimiter
from whisper_build.serving.realtime.server_events import Send, SessionEvent, error_event
from whisper_build.serving.realtime.session import LiveLimits, TranscriptionSession
from whisper_build.serving.transcription.backend import TranscriptionBackend

__all__ = ["CLOSE_DRAINING", "CLOSE_FULL", "LiveSessions"]

CLOSE_FULL = 1013
"""Try again later: this pod has no session slot free (openai-python reconnects on it)."""
CLOSE_DRAINING = 1012
"""Service restart: the pod is draining; the turn in progress was finished first."""
CLOSE_POLICY = 1008


class LiveSessions:
    """The live sessions of one gateway process.

    Args:
        backend: returns the model server (built in the app's lifespan).
        served_ids: returns the accepted model names.
        limiter: session slots of this process; limits: per-session limits.
        metrics: the live series; health: the model-health record.
    """

    def __init__(
        self,
        backend: Callable[[], TranscriptionBackend],
        served_ids: Callable[[], list[str]],
        limiter: SessionLimiter,
        limits: LiveLimits,
        metrics: LiveMetrics,
        health: HealthRecorder,
    ) -> None:
        self.backend = backend
        self.served_ids = served_ids
        self.limiter = limiter
        self.limits = limits
        self.metrics = metrics
        self.health = health
        self.draining = False
        self.open = 0  # sessions open in this process
        self._drain_events: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def start_drain(self) -> None:
        """Refuse new sessions and wind down open ones (safe from a signal handler)."""
        self.draining = True
        for loop, event in list(self._drain_events):
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)

    async def serve(self, websocket: WebSocket) -> None:
        """Serve one WebSocket connection (the API key was checked before it reached here)."""
        query = websocket.query_params
        if query.get("intent") != "transcription" or "model" in query:
            self.metrics.refused.labels("bad_request").inc()
            await _accept(websocket)
            if query.get("intent") == "transcription":  # with a model, as OpenAI answers it
                event = error_event(
                    "You must not provide a model parameter for transcription sessions.", "invalid_model"
                )
            else:
                message = "this endpoint serves transcription sessions only: connect with ?intent=transcription"
                event = error_event(message, "invalid_intent", "intent")
            await websocket.send_json(event.wire())
            await websocket.close(CLOSE_POLICY)
            return
        if self.draining:
            self.metrics.refused.labels("draining").inc()
            await _accept(websocket)
            await websocket.close(CLOSE_DRAINING, "server is draining; reconnect")
            return
        if not self.limiter.try_acquire():
            self.metrics.refused.labels("full").inc()
            await _accept(websocket)
            await websocket.close(CLOSE_FULL, "no session slot free on this server; retry")
            return
        self.metrics.active.inc()
        self.open += 1
        began = time.monotonic()
        try:
            await self._run(websocket)
        finally:
            self.open -= 1
            self.metrics.active.dec()
            self.metrics.duration.observe(time.monotonic() - began)
            self.limiter.release()

    async def _run(self, websocket: WebSocket) -> None:
        await _accept(websocket)
        inbox: asyncio.Queue[tuple[str | int, float] | None] = asyncio.Queue()  # (event or skipped size, arrival)
        session_id = "sess_" + secrets.token_hex(12)
        expires_at = int(time.time() + self.limits.max_session_seconds)

        async def send(event: dict[str, Any]) -> None:
            if websocket.application_state == WebSocketState.CONNECTED:
                with contextlib.suppress(WebSocketDisconnect, RuntimeError):  # the client left: the loop ends
                    await websocket.send_json(event)

        def described() -> dict[str, Any]:
            body = session_object(session_id, session.config, expires_at)
            return legacy_view(body) if session.legacy else body  # legacy clients get their shape

        session = TranscriptionSession(self.backend(), send, self.served_ids(), self.limits, self.metrics, self.health)
        await send(SessionEvent(type="session.created", session=described()).wire())
        drain = asyncio.Event()
        entry = (asyncio.get_running_loop(), drain)
        self._drain_events.append(entry)
        reader = asyncio.create_task(self._read(websocket, inbox))
        deadline = time.monotonic() + self.limits.max_session_seconds
        last_audio = time.monotonic()
        code, reason = 1000, ""
        try:
            while True:
                if self.draining:
                    drain.set()
                timeout = min(deadline, last_audio + self.limits.idle_audio_seconds) - time.monotonic()
                item = await _next(inbox, drain, max(0.0, timeout))
                if item is None:
                    return  # the client left
                if isinstance(item, tuple):
                    text, arrived = item
                    if await self._dispatch(session, text, arrived, send, described) == "input_audio_buffer.append":
                        last_audio = time.monotonic()
                elif item is _TIMEOUT:
                    expired = time.monotonic() >= deadline
                    message = "session reached its maximum length" if expired else "no audio received for too long"
                    await send(error_event(message, "session_expired" if expired else "idle_timeout").wire())
                    break
                if drain.is_set() and inbox.empty():  # what had arrived is processed first
                    await session.drain()
                    code, reason = CLOSE_DRAINING, "server is draining; reconnect"
                    break
        finally:
            self._drain_events.remove(entry)
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError):
                await reader
            session.close()
        if websocket.application_state == WebSocketState.CONNECTED:
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                await websocket.close(code, reason)

    async def _dispatch(
        self,
        session: TranscriptionSession,
        text: str | int,
        arrived: float,
        send: Send,
        described: Callable[[], dict[str, Any]],
    ) -> str:
        """Handle one client event (``arrived``: its monotonic arrival time); a refused one gets an ``error`` event.

        ``text`` is the event's JSON, or the size in bytes of one the server skipped as too large.
        """
        kind, client_id = "", None
        try:
            if isinstance(text, int) or len(text) > self.limits.max_event_bytes:
                size = text if isinstance(text, int) else len(text)
                raise ProtocolError(
                    f"event is {size} bytes; the largest accepted is {self.limits.max_event_bytes} "
                    "(send audio in smaller appends)",
                    "event_too_large",
                )
            try:
                event = json.loads(text)
            except json.JSONDecodeError:
                raise ProtocolError("event is not JSON", "invalid_json") from None
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise ProtocolError("event must be a JSON object with a string 'type'", "invalid_event", "type")
            kind, client_id = event["type"], event.get("event_id")
            if kind in ("session.update", "transcription_session.update"):
                update = event.get("session", {})
                merged = merge(session.config, update if kind == "session.update" else legacy_to_ga(update))
                await session.check_language(merged)
                session.configure(merged)
                await session.speakers.configure(merged)  # known speakers' clips are decoded in a thread
                session.legacy = kind == "transcription_session.update"
                reply = "session.updated" if kind == "session.update" else "transcription_session.updated"
                await send(SessionEvent(type=reply, session=described()).wire())
            elif kind == "input_audio_buffer.append":
                await session.append(event.get("audio"), arrived)
            elif kind == "input_audio_buffer.commit":
                await session.commit()
            elif kind == "input_audio_buffer.clear":
                await session.clear()
            else:
                raise ProtocolError(
                    f"unknown or unsupported event type {kind!r} in a transcription session",
                    "invalid_event_type",
                    "type",
                )
        except ProtocolError as exc:
            await send(error_event(str(exc), exc.code, exc.param, client_id).wire())
        return kind

    @staticmethod
    async def _read(websocket: WebSocket, inbox: asyncio.Queue[tuple[str | int, float] | None]) -> None:
        try:
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if message.get(OVERSIZED_KEY) is not None:  # skipped by the server: its size in bytes
                    await inbox.put((int(message[OVERSIZED_KEY]), time.monotonic()))
                    continue
                if text is None and message.get("bytes") is not None:
                    text = message["bytes"].decode("utf-8", "replace")
                await inbox.put((text or "", time.monotonic()))
        finally:
            await inbox.put(None)


SUBPROTOCOL = "realtime"
"""The WebSocket subprotocol OpenAI's browser clients offer (beside the key's); echoed when offered: Chromium fails
a handshake that offered protocols and whose answer names none ("Sent non-empty 'Sec-WebSocket-Protocol' header
but no response was received")."""


async def _accept(websocket: WebSocket) -> None:
    """Accept, echoing :data:`SUBPROTOCOL` when the client offered it (never the key's subprotocol)."""
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)


_TIMEOUT: Any = object()
_DRAIN: Any = object()


async def _next(inbox: asyncio.Queue[tuple[str | int, float] | None], drain: asyncio.Event, timeout: float) -> Any:
    """The next inbox item; ``_TIMEOUT`` after ``timeout`` s; ``_DRAIN`` when ``drain`` is set first."""
    if not inbox.empty():
        return inbox.get_nowait()
    get = asyncio.ensure_future(inbox.get())
    stop = asyncio.ensure_future(drain.wait())
    done, _ = await asyncio.wait([get, stop], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    stop.cancel()
    if get in done:
        return get.result()
    get.cancel()
    return _DRAIN if drain.is_set() else _TIMEOUT
