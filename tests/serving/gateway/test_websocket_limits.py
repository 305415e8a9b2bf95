"""A WebSocket message over the limit is skipped and reported to the app; the connection stays open."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket
from websockets.sync.client import connect

from whisper_build.serving.gateway.websocket_limits import websocket_protocol
from whisper_build.serving.realtime.limits import OVERSIZED_KEY

LIMIT = 1000


async def _echo(websocket: WebSocket) -> None:
    """Answers each message with what the app received: ``text:<n>``, ``bytes:<n>`` or ``oversized:<n>``."""
    await websocket.accept()
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get(OVERSIZED_KEY) is not None:
            await websocket.send_text(f"oversized:{message[OVERSIZED_KEY]}")
        elif message.get("text") is not None:
            await websocket.send_text(f"text:{len(message['text'])}")
        else:
            await websocket.send_text(f"bytes:{len(message['bytes'])}")


@contextmanager
def _server() -> Iterator[str]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = Starlette(routes=[WebSocketRoute("/ws", _echo)])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **websocket_protocol(LIMIT)))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"ws://127.0.0.1:{sock.getsockname()[1]}/ws"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def test_oversized_messages_are_reported_and_the_connection_goes_on() -> None:
    with _server() as url, connect(url, max_size=None) as ws:
        ws.send("a" * LIMIT)  # at the limit: delivered
        assert ws.recv(timeout=10) == f"text:{LIMIT}"
        ws.send("é" * 600)  # 600 characters, 1200 UTF-8 bytes: over
        assert ws.recv(timeout=10) == "oversized:1200"
        ws.send(["b" * 700, "b" * 700, "b" * 700])  # one message in three frames: counted to its end
        assert ws.recv(timeout=10) == "oversized:2100"
        ws.send(b"\x00" * 5000)
        assert ws.recv(timeout=10) == "oversized:5000"
        ws.send("after")  # the next message is whole again
        assert ws.recv(timeout=10) == "text:5"
        ws.send(b"\x01" * 10)
        assert ws.recv(timeout=10) == "bytes:10"
