"""Headless Chromium driven over the Chrome DevTools Protocol: the page's browser tests and screenshots.

:func:`chromium` starts Debian's ``chromium`` (``--headless``, a fresh ``--user-data-dir``, a fake
microphone that plays a WAV file once: ``--use-file-for-fake-audio-capture=<wav>%noloop``) and yields a
:class:`Tab`: navigate, evaluate JavaScript, click like a user (mouse events, so the page gets a user
gesture), set a file input, take a screenshot. The protocol is the DevTools Protocol's JSON over a
WebSocket (https://chromedevtools.github.io/devtools-protocol/: ``Target``, ``Page``, ``Runtime``,
``Input``, ``DOM``), spoken with the ``websockets`` package the ``openai[realtime]`` extra already
brings; nothing downloads a browser. Docs: docs/gateway.md, "The page".
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import connect
from websockets.sync.connection import Connection

from whisper_build.serving.triton_cleanup import kill_process_group

__all__ = ["BrowserError", "Tab", "chromium", "chromium_path"]

FLAGS = (
    "--headless",
    "--no-sandbox",  # root in CI containers; the page is our own, on 127.0.0.1
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--no-first-run",
    "--no-default-browser-check",
    "--mute-audio",
    "--use-fake-ui-for-media-stream",  # grants the microphone without a prompt
    "--use-fake-device-for-media-stream",
    "--remote-debugging-port=0",
)


class BrowserError(RuntimeError):
    """Chromium did not start, a DevTools command failed, or a wait ran out (the message says which)."""


def chromium_path() -> str | None:
    """Debian's ``chromium`` (``.ci/apt-packages.txt``), else ``chromium-browser``; ``None`` when neither is on PATH."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Tab:
    """One page target over a DevTools WebSocket (flattened session)."""

    def __init__(self, socket: Connection, session: str) -> None:
        self._socket = socket
        self._session = session
        self._ids = itertools.count(1)
        self.console: list[str] = []  # console messages and uncaught exceptions, for failure reports

    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """One DevTools command; its ``result``. Events arriving meanwhile feed :attr:`console`.

        Raises: BrowserError (the command failed or got no answer within ``timeout`` s).
        """
        ident = next(self._ids)
        self._socket.send(
            json.dumps({"id": ident, "method": method, "params": params or {}, "sessionId": self._session})
        )
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrowserError(f"{method}: no answer within {timeout:g} s")
            try:
                message = json.loads(self._socket.recv(timeout=remaining))
            except TimeoutError:
                continue
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message')}")
                return dict(message.get("result", {}))
            self._note(message)

    def _note(self, message: dict[str, Any]) -> None:
        params = message.get("params", {})
        if message.get("method") == "Runtime.consoleAPICalled":
            self.console.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
        elif message.get("method") == "Log.entryAdded":  # the browser's own: CSP violations, failed loads
            self.console.append(str(params.get("entry", {}).get("text")))
        elif message.get("method") == "Runtime.exceptionThrown":
            self.console.append(str(params.get("exceptionDetails", {}).get("exception", {}).get("description")))

    def navigate(self, url: str, timeout: float = 60.0) -> None:
        """Load ``url`` and wait until its document is complete."""
        self.send("Page.navigate", {"url": url})
        self.wait_for("document.readyState === 'complete'", timeout)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` (a promise is awaited). Raises: BrowserError on a thrown exception."""
        result = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            thrown = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression!r} threw: {thrown}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, every: float = 0.25) -> Any:
        """Poll ``expression`` until it is truthy; its value.

        One that throws counts as false (a page may be between documents). Raises: BrowserError after
        ``timeout`` s, with the last exception, the page's URL and console lines.
        """
        deadline = time.monotonic() + timeout
        problem = ""
        while True:
            try:
                value = self.evaluate(expression)
            except BrowserError as exc:
                value, problem = None, str(exc)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(
                    f"still false after {timeout:g} s: {expression}; {problem}; page: {self.location()}; "
                    f"console: {self.console[-5:]}"
                )
            time.sleep(every)

    def location(self) -> str:
        """The tab's URL (``chrome-error://…`` when the page did not load)."""
        try:
            return str(self.evaluate("location.href"))
        except BrowserError as exc:
            return str(exc)

    def click(self, selector: str) -> None:
        """Click the element's centre with the mouse (a trusted event: a user gesture for the page)."""
        box = self.evaluate(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def type_text(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` (``Input.insertText``)."""
        self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        self.send("Input.insertText", {"text": text})

    def set_files(self, selector: str, paths: list[Path]) -> None:
        """Choose ``paths`` in a file input (``DOM.setFileInputFiles``)."""
        root = self.send("DOM.getDocument")["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        self.send("DOM.setFileInputFiles", {"nodeId": node, "files": [str(p) for p in paths]})

    def screenshot(self, path: Path) -> None:
        """A PNG of the whole page."""
        data = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))


@contextmanager
def chromium(fake_microphone: Path | None = None, timeout: float = 60.0) -> Iterator[Tab]:
    """A headless Chromium with one blank tab; closed (and its profile removed) on exit.

    Args:
        fake_microphone: a WAV file the fake microphone plays once from when it opens, then silence.
        timeout: seconds to wait for the browser's DevTools endpoint.

    Raises: BrowserError (no ``chromium`` on PATH, or it did not start).
    """
    binary = chromium_path()
    if binary is None:
        raise BrowserError("chromium is not installed: apt-get install chromium (.ci/apt-packages.txt)")
    with tempfile.TemporaryDirectory(prefix="page-chromium-", ignore_cleanup_errors=True) as profile:
        args = [binary, *FLAGS, f"--user-data-dir={profile}", "--window-size=1100,900"]
        if fake_microphone is not None:
            args.append(f"--use-file-for-fake-audio-capture={fake_microphone}%noloop")
        log = Path(profile) / "chromium.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [*args, "about:blank"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            endpoint = _devtools_endpoint(Path(profile), process, timeout, log)
            with connect(endpoint, max_size=None, open_timeout=timeout, proxy=None) as socket:
                yield _open_tab(socket)
        finally:
            _stop(process, Path(profile))


def _stop(process: subprocess.Popen[bytes], profile: Path) -> None:
    """Stop the browser and every process it started (its own session), then remove its profile.

    The renderer and utility processes outlive the browser process for a moment and may still write into
    the profile (seen: ``Directory not empty: 'Default'`` while it was removed): the whole group is gone
    (:func:`kill_process_group`) before the removal, which is retried for what left the session.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    kill_process_group(process.pid)  # the browser if it hung, and any child still in its session
    process.wait()
    for _ in range(50):
        try:
            shutil.rmtree(profile)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def _devtools_endpoint(profile: Path, process: subprocess.Popen[bytes], timeout: float, log: Path) -> str:
    """The browser's DevTools WebSocket URL, from ``DevToolsActivePort`` in the profile (port, then path)."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrowserError(f"chromium exited with {process.returncode}: {log.read_text(errors='replace')[-2000:]}")
        lines = active.read_text().split("\n") if active.exists() else []
        if len(lines) >= 2 and lines[0].strip() and lines[1].strip():
            return f"ws://127.0.0.1:{lines[0].strip()}{lines[1].strip()}"
        time.sleep(0.1)
    raise BrowserError(f"chromium's DevTools endpoint did not appear within {timeout:g} s")


def _open_tab(socket: Connection) -> Tab:
    ids = itertools.count(10_000)

    def browser(method: str, params: dict[str, Any]) -> dict[str, Any]:
        ident = next(ids)
        socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(socket.recv(timeout=60))
            if message.get("id") == ident:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error'].get('message')}")
                return dict(message["result"])

    target = browser("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = browser("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    tab = Tab(socket, session)
    for domain in ("Page.enable", "Runtime.enable", "DOM.enable", "Log.enable"):
        tab.send(domain)
    return tab
