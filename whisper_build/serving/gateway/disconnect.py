"""Cancel the work of a request whose client is gone: the gateway watches for the disconnect itself.

Starlette does not cancel a handler when its client disconnects: the handler — and the model
calls it awaits — runs to the end and answers nobody. :class:`DisconnectMiddleware` runs each
request's app in a task; once the request's body has been read, it keeps reading the connection,
and an ``http.disconnect`` before the response is complete cancels that task. The cancellation
travels down like the request timeout's: the window pipeline stops sending groups and the gRPC
call in flight is cancelled (``grpc.aio`` cancels the RPC of a cancelled call), so Triton marks
the request cancelled and the model stops before its next engine call
(:mod:`whisper_build.serving.triton_model.cancellation`). Any route gets this, streaming ones too.

The request is counted with status 499 (nginx's "client closed request"); nothing is sent.
Docs: docs/gateway.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CLIENT_CLOSED_REQUEST", "DisconnectMiddleware"]

log = logging.getLogger("whisper.gateway.disconnect")

CLIENT_CLOSED_REQUEST = 499
"""Status recorded (not sent) for a request whose client left before its answer (nginx's 499)."""


class DisconnectMiddleware:
    """ASGI middleware: a client disconnect before the response completes cancels the request's app task."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: requests with a body (POST, PUT, …) are watched; others pass through."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        body_read, gone, answered = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def app_receive() -> Message:
            if body_read.is_set():  # the body is consumed: what is left to hear is the disconnect
                await gone.wait()
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.disconnect":
                gone.set()
            elif not message.get("more_body", False):
                body_read.set()
            return message

        async def app_send(message: Message) -> None:
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered.set()
            await send(message)

        task = asyncio.ensure_future(self.app(scope, app_receive, app_send))
        watcher = asyncio.ensure_future(self._watch(receive, body_read, gone, answered, task))
        try:
            await task
        except asyncio.CancelledError:
            if not gone.is_set() or answered.is_set():
                raise  # cancelled from outside (shutdown), not by the disconnect
            log.info("%s %s: client disconnected before the answer; its work was cancelled",
                     scope["method"], scope["path"])  # fmt: skip
            await send({"type": "http.response.start", "status": CLIENT_CLOSED_REQUEST, "headers": []})
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if not task.done():
                task.cancel()

    @staticmethod
    async def _watch(
        receive: Receive,
        body_read: asyncio.Event,
        gone: asyncio.Event,
        answered: asyncio.Event,
        task: asyncio.Future[None],
    ) -> None:
        """After the body: read the connection until it closes; cancel ``task`` if no answer completed by then."""
        await body_read.wait()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
        gone.set()
        if not answered.is_set() and not task.done():
            task.cancel()
