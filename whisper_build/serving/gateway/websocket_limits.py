"""A WebSocket message over the size limit is skipped and reported to the app, not answered by close 1009.

Entry points: :func:`websocket_protocol` (the ``uvicorn.Config`` arguments), :class:`SkippingWSProtocol`.
Docs: docs/gateway.md, "Live transcription (`GET /v1/realtime`)".
"""

from __future__ import annotations

from typing import Any

import wsproto.events
from uvicorn.protocols.websockets.wsproto_impl import FrameTooLargeError, WSProtocol

from whisper_build.serving.realtime.limits import OVERSIZED_KEY

__all__ = ["SkippingWSProtocol", "websocket_protocol"]


class SkippingWSProtocol(WSProtocol):
    """uvicorn's wsproto protocol, except for a message larger than ``ws_max_size``.

    uvicorn (every implementation) closes the connection with 1009 "message too big" once a message
    passes ``ws_max_size`` (16 MiB by default), so a live session dies on one oversized event and its
    turns in flight are lost. Here the rest of that message's frames are read and dropped — memory
    stays bounded by ``ws_max_size`` — and when it ends the app receives one ``websocket.receive``
    with ``{OVERSIZED_KEY: size}``; the connection stays open. The realtime endpoint answers it with
    its documented ``error`` event (``event_too_large``), as OpenAI's Realtime API answers an invalid
    event without closing (https://platform.openai.com/docs/api-reference/realtime-server-events/error).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._skipped_bytes: int | None = None

    def handle_message(self, event: wsproto.events.TextMessage | wsproto.events.BytesMessage) -> None:
        """Buffer ``event`` as uvicorn does until the message passes the limit, then count and drop it."""
        size = len(event.data.encode()) if isinstance(event, wsproto.events.TextMessage) else len(event.data)
        if self._skipped_bytes is None:
            try:
                self.buffer.extend(event)
            except FrameTooLargeError:
                self._skipped_bytes = self.buffer.length
                self.buffer.clear()
        else:
            self._skipped_bytes += size
        if not event.message_finished:
            return
        if self._skipped_bytes is None:
            self.queue.put_nowait(self.buffer.to_message())
            self.buffer.clear()
        else:
            skipped = {"type": "websocket.receive", "text": None, "bytes": None, OVERSIZED_KEY: self._skipped_bytes}
            self.queue.put_nowait(skipped)  # type: ignore[arg-type]
            self._skipped_bytes = None
        if not self.read_paused:
            self.read_paused = True
            self.transport.pause_reading()


def websocket_protocol(max_message_bytes: int) -> dict[str, Any]:
    """``uvicorn.Config`` keyword arguments: :class:`SkippingWSProtocol` with ``ws_max_size=max_message_bytes``."""
    return {"ws": SkippingWSProtocol, "ws_max_size": max_message_bytes}
