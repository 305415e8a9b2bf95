"""ASGI middleware that refuses request bodies over a size limit with 413.

The limit is checked twice: from ``Content-Length`` before anything is read, and while the
body streams in (chunked uploads, or a lying ``Content-Length``). The body is read in full
before the app runs, so the app never sees a partial body.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fastapi.responses import JSONResponse

from whisper_build.gateway.errors import ErrorCode, error_response


class BodyLimitMiddleware:
    """Answer 413 in the error shape when the body exceeds ``max_bytes``.

    Args:
        app: the wrapped ASGI app.
        max_bytes: the largest body accepted.
        setting_name: the environment variable that raises the limit (named in the message).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, setting_name: str) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.setting_name = setting_name

    def _too_large(self, size: str) -> JSONResponse:
        return error_response(
            413,
            ErrorCode.BODY_TOO_LARGE,
            f"request body is {size} bytes, over the limit of {self.max_bytes} bytes "
            f"({self.setting_name}): send a shorter or compressed audio file (e.g. FLAC, MP3)",
            {"Connection": "close"},
        )

    async def _reply_too_large(self, size: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Read and drop the rest of the body (up to ``max_bytes`` more), then answer 413.

        Closing a socket whose receive buffer still holds unread body makes the kernel send a
        TCP reset, which can destroy the 413 before the client reads it; reading the rest
        first (as nginx's lingering close does) lets the client see the answer.
        """
        budget = self.max_bytes
        while budget > 0:
            message = await receive()
            if message["type"] == "http.disconnect" or not message.get("more_body", False):
                break
            budget -= len(message.get("body", b""))
        await self._too_large(size)(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
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
                    await self._too_large(str(size))(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
