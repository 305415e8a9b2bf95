"""ASGI middleware: 413 for request bodies over a size limit, 429 beyond the upload and request budgets.

The size limit is checked twice: from ``Content-Length`` before anything is read, and while the
body streams in (chunked uploads, or a lying ``Content-Length``). The body is read in full before
the app runs (then replayed to it chunk by chunk), so the app never sees a partial body.

Entry point: :class:`BodyLimitMiddleware` (the details, in its docstring).
Docs: docs/gateway.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import asyncio
from collections import deque

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from whisper_build.contracts.error_codes import ErrorCode
from whisper_build.serving.gateway.errors import error_response

LINGER_SECONDS = 5.0
"""Longest time spent reading and dropping a refused body before answering it (seconds).

Bounded by time, not bytes, as nginx's lingering close is (``lingering_timeout`` 5 s between
reads, ``lingering_time`` 30 s in all: https://nginx.org/en/docs/http/ngx_http_core_module.html#lingering_close):
a byte budget leaves the tail of a large upload unread, and the reset that follows can reach the
client before the answer. Nothing read is kept, so memory stays bounded either way.
"""


class BodyLimitMiddleware:
    """Answer 413 in the error shape when the body exceeds ``max_bytes``; 429 beyond a budget.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the largest body accepted.
        setting_name: the environment variable that raises the limit (named in the message).
        max_concurrent: most requests with a complete body handed to the app at once; ``None``
            for no limit. The gateway passes capacity + queue size.
        retry_after_seconds: ``Retry-After`` of the 429.
        linger_seconds: longest time spent dropping the rest of a refused body before answering
            (:data:`LINGER_SECONDS`).
        max_uploads: most bodies being received at once; ``None`` for no limit.
        max_buffered_bytes: most bytes held by all bodies together; ``None`` for no limit.

    Three budgets, so that slow uploads cannot starve fast ones and an upload flood cannot exhaust
    the pod's memory (which Triton shares):

    * ``max_uploads``: bodies being received at once (a larger budget: a slow upload waits for the
      network, not for the model; the protocol layer bounds how slow, :mod:`.client_timeouts`);
    * ``max_buffered_bytes``: bytes held by all bodies, while they arrive and while they are served —
      the memory bound (by default what ``max_concurrent`` full-size bodies hold);
    * ``max_concurrent``: requests whose body has arrived, handed to the app (capacity + queue size):
      a request is counted here only once its body is complete.

    Beyond any of them: 429 with ``Retry-After``, before the body is buffered where it is not read yet.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        setting_name: str,
        max_concurrent: int | None = None,
        retry_after_seconds: int = 1,
        linger_seconds: float = LINGER_SECONDS,
        max_uploads: int | None = None,
        max_buffered_bytes: int | None = None,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.setting_name = setting_name
        self.max_concurrent = max_concurrent
        self.retry_after_seconds = retry_after_seconds
        self.linger_seconds = linger_seconds
        self.max_uploads = max_uploads
        self.max_buffered_bytes = max_buffered_bytes
        self._in_progress = 0
        self._uploading = 0
        self._buffered = 0

    def _too_large(self, size: str, path: str) -> JSONResponse:
        return error_response(
            413,
            ErrorCode.BODY_TOO_LARGE,
            f"request body is {size} bytes, over the limit of {self.max_bytes} bytes "
            f"({self.setting_name}): send a shorter or compressed audio file (e.g. FLAC, MP3)",
            {"Connection": "close"},
            path,
        )

    def _busy(self, what: str, path: str) -> JSONResponse:
        return error_response(
            429,
            ErrorCode.OVERLOADED,
            f"server busy: {what}; retry later",
            {"Retry-After": str(self.retry_after_seconds), "Connection": "close"},
            path,
        )

    async def _reply_too_large(self, size: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Read and drop the rest of the body (for at most ``linger_seconds``), then answer 413.

        Closing a socket whose receive buffer still holds unread body makes the kernel send a
        TCP reset, which can destroy the 413 before the client reads it; reading the rest
        first (as nginx's lingering close does) lets the client see the answer.
        """
        await self._drain_then(self._too_large(size, scope.get("path", "")), scope, receive, send)

    async def _drain_then(self, response: JSONResponse, scope: Scope, receive: Receive, send: Send) -> None:
        """Read and drop the body for at most ``linger_seconds`` without keeping it, then send ``response``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.linger_seconds
        while (remaining := deadline - loop.time()) > 0:
            try:
                message = await asyncio.wait_for(receive(), remaining)
            except TimeoutError:
                break
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                break
        await response(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry: non-HTTP and GET/HEAD/OPTIONS pass through; other bodies are limited, then buffered."""
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.max_uploads is not None and self._uploading >= self.max_uploads:
            busy = self._busy(f"{self._uploading} uploads in progress", path)
            await self._drain_then(busy, scope, receive, send)
            return
        chunks: list[bytes] = []
        self._uploading += 1
        try:
            complete = await self._read(scope, receive, send, chunks)
        except BaseException:
            self._release(chunks)
            raise
        finally:
            self._uploading -= 1
        held = sum(len(chunk) for chunk in chunks)
        if not complete:
            self._buffered -= held
            return
        try:
            if self.max_concurrent is not None and self._in_progress >= self.max_concurrent:
                busy = self._busy(f"{self._in_progress} requests in progress (capacity + queue)", path)
                await busy(scope, receive, send)
                return
            self._in_progress += 1
            try:
                await self._replay(scope, receive, send, chunks)
            finally:
                self._in_progress -= 1
        finally:
            self._buffered -= held

    def _release(self, chunks: list[bytes]) -> None:
        self._buffered -= sum(len(chunk) for chunk in chunks)

    async def _read(self, scope: Scope, receive: Receive, send: Send, chunks: list[bytes]) -> bool:
        """Receive the whole body into ``chunks`` (≥ 1 chunk, counted in the byte budget); False when answered or gone."""
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        path = scope.get("path", "")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reply_too_large(declared.decode(), scope, receive, send)
            return False
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return False
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > self.max_bytes:
                if more:
                    await self._reply_too_large(f"more than {self.max_bytes}", scope, receive, send)
                else:
                    await self._too_large(str(size), path)(scope, receive, send)
                return False
            budget = self.max_buffered_bytes
            if budget is not None and self._buffered + len(chunk) > budget:
                busy = self._busy(f"{self._buffered} bytes of request bodies held, of {budget}", path)
                if more:
                    await self._drain_then(busy, scope, receive, send)
                else:
                    await busy(scope, receive, send)
                return False
            chunks.append(chunk)
            self._buffered += len(chunk)
            if not more:
                return True

    async def _replay(self, scope: Scope, receive: Receive, send: Send, chunks: list[bytes]) -> None:
        """Run the app, handing it ``chunks`` one by one (``chunks`` is emptied; each is dropped once handed over)."""
        # No joined copy of the body; a multipart body is freed as the app parses it (it spools the
        # file to disk). The byte budget is released when the request ends.
        pending = deque(chunks)
        chunks.clear()
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                chunk = pending.popleft() if pending else b""
                replayed = not pending
                return {"type": "http.request", "body": chunk, "more_body": not replayed}
            return await receive()

        await self.app(scope, replay, send)
