"""ASGI middleware: 413 for request bodies over a size limit, 429 for bodies beyond a concurrency limit.

The size limit is checked twice: from ``Content-Length`` before anything is read, and while the
body streams in (chunked uploads, or a lying ``Content-Length``). The body is read in full
before the app runs (then replayed to it chunk by chunk), so the app never sees a partial body. Because bodies are buffered before
the app's admission control runs, at most ``max_concurrent`` bodies are held at once: the next
one is answered 429 before it is buffered, so an upload flood sheds load instead of exhausting
the pod's memory (which Triton shares).
"""

from __future__ import annotations

import asyncio
from collections import deque

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from whisper_build.serving.gateway.errors import ErrorCode, error_response

LINGER_SECONDS = 5.0
"""Longest time spent reading and dropping a refused body before answering it (seconds).

Bounded by time, not bytes, as nginx's lingering close is (``lingering_timeout`` 5 s between
reads, ``lingering_time`` 30 s in all: https://nginx.org/en/docs/http/ngx_http_core_module.html#lingering_close):
a byte budget leaves the tail of a large upload unread, and the reset that follows can reach the
client before the answer. Nothing read is kept, so memory stays bounded either way.
"""


class BodyLimitMiddleware:
    """Answer 413 in the error shape when the body exceeds ``max_bytes``.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the largest body accepted.
        setting_name: the environment variable that raises the limit (named in the message).
        max_concurrent: most requests with a body in progress at once (buffered or being
            served); ``None`` for no limit. The gateway passes capacity + queue size.
        retry_after_seconds: ``Retry-After`` of the 429.
        linger_seconds: longest time spent dropping the rest of a refused body before answering
            (:data:`LINGER_SECONDS`).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        setting_name: str,
        max_concurrent: int | None = None,
        retry_after_seconds: int = 1,
        linger_seconds: float = LINGER_SECONDS,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.setting_name = setting_name
        self.max_concurrent = max_concurrent
        self.retry_after_seconds = retry_after_seconds
        self.linger_seconds = linger_seconds
        self._in_progress = 0

    def _too_large(self, size: str, path: str) -> JSONResponse:
        return error_response(
            413,
            ErrorCode.BODY_TOO_LARGE,
            f"request body is {size} bytes, over the limit of {self.max_bytes} bytes "
            f"({self.setting_name}): send a shorter or compressed audio file (e.g. FLAC, MP3)",
            {"Connection": "close"},
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
        if self.max_concurrent is not None and self._in_progress >= self.max_concurrent:
            busy = error_response(
                429,
                ErrorCode.OVERLOADED,
                f"server busy: {self._in_progress} requests in progress (capacity + queue); retry later",
                {"Retry-After": str(self.retry_after_seconds), "Connection": "close"},
                scope.get("path", ""),
            )
            await self._drain_then(busy, scope, receive, send)
            return
        self._in_progress += 1
        try:
            await self._limited(scope, receive, send)
        finally:
            self._in_progress -= 1

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._reply_too_large(declared.decode(), scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                if message.get("more_body", False):
                    await self._reply_too_large(f"more than {self.max_bytes}", scope, receive, send)
                else:
                    await self._too_large(str(size), scope.get("path", ""))(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        # Replayed chunk by chunk, each dropped once handed over: no joined copy of the body, and a
        # multipart body is freed as the app parses it (it spools the file to disk).
        pending = deque(chunks)
        del chunks
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                chunk = pending.popleft() if pending else b""
                replayed = not pending
                return {"type": "http.request", "body": chunk, "more_body": not replayed}
            return await receive()

        await self.app(scope, replay, send)
