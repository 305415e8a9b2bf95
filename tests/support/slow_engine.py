"""A real tritonserver whose engine is slowed from outside, for tests that need the model busy.

:func:`slow_triton` starts :class:`~whisper_build.workstation.local_triton.LocalTriton` with
the engine wrapper ``tests/support/engine_hook/slowed.py:wrap`` named in ``WHISPER_ENGINE_WRAPPER``: the product's ``model.py``, decoding layer, batching, cancellation and
engine all run, and each ``generate`` first sleeps :attr:`SlowEngineControl.seconds_per_window` per
window (``tests/support/engine_hook/slowed.py``). A test sets the delay, so "busy for N seconds" or
"outlives its timeout" holds on a fast or a slow CPU, and reads the engine's call log to know when it
is idle. docs/development.md "Tests that need the model busy".
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from engine_hook.slowed import CALLS_VARIABLE, CONTROL_VARIABLE

from whisper_build.serving import contract
from whisper_build.serving.engines.factory import WRAPPER_VARIABLE
from whisper_build.serving.prometheus_text import sample_sums
from whisper_build.serving.triton_model.settings import TritonSettings
from whisper_build.workstation.local_triton import LocalTriton

HOOK_DIR = Path(__file__).resolve().parent / "engine_hook"


class SlowEngineControl:
    """The control and call-log files of one slowed tritonserver.

    Args:
        folder: where ``control.json`` and ``calls.log`` live.
    """

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.control, self.calls = folder / "control.json", folder / "calls.log"
        self.calls.touch()
        self.seconds_per_window = 0.0

    @property
    def seconds_per_window(self) -> float:
        """Seconds each ``generate`` sleeps per window before decoding (read by the engine at every call)."""
        return float(json.loads(self.control.read_text())["seconds_per_window"])

    @seconds_per_window.setter
    def seconds_per_window(self, value: float) -> None:
        self.control.write_text(json.dumps({"seconds_per_window": value}))

    @contextmanager
    def delay(self, seconds_per_window: float) -> Iterator[SlowEngineControl]:
        """``seconds_per_window`` inside the block, 0 again after it."""
        self.seconds_per_window = seconds_per_window
        try:
            yield self
        finally:
            self.seconds_per_window = 0.0

    def events(self) -> list[tuple[str, int]]:
        """Every ``(start|end, windows)`` the engine logged, in order."""
        return [(e, int(n)) for e, n in (line.split() for line in self.calls.read_text().splitlines() if line)]

    def windows_started(self) -> int:
        """Windows handed to ``generate`` so far (each fallback re-decode counts again)."""
        return sum(n for event, n in self.events() if event == "start")

    def busy(self) -> bool:
        """True while a ``generate`` call has started and not ended."""
        events = self.events()
        return sum(1 for e, _ in events if e == "start") > sum(1 for e, _ in events if e == "end")


@contextmanager
def slow_triton(settings: TritonSettings, folder: Path) -> Iterator[tuple[LocalTriton, SlowEngineControl]]:
    """A started :class:`LocalTriton` with the slowed engine (delay 0 until the test sets one).

    Yields:
        (the server, its :class:`SlowEngineControl`); both stopped / left behind at the end.
    """
    control = SlowEngineControl(folder)
    server = LocalTriton(settings, workdir=folder / "triton")
    added = {
        CONTROL_VARIABLE: str(control.control),
        CALLS_VARIABLE: str(control.calls),
        WRAPPER_VARIABLE: f"{HOOK_DIR / 'slowed.py'}:wrap",
    }
    saved = {key: os.environ.get(key) for key in added}
    os.environ.update(added)  # LocalTriton passes its environment at start (kept for its restarts)
    try:
        server.start()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    try:
        yield server, control
    finally:
        server.stop()


def gateway_inflight(metrics_url: str) -> float:
    """The gateway's ``whisper_gateway_inflight_requests`` (every worker's, summed) from its ``/metrics``."""
    text = httpx.get(f"{metrics_url.rstrip('/').removesuffix('/metrics')}/metrics", timeout=10).text
    match = re.search(r"^whisper_gateway_inflight_requests (\S+)$", text, re.MULTILINE)
    assert match, "whisper_gateway_inflight_requests not on the gateway's metrics"
    return float(match.group(1))


def triton_pending(metrics_url: str) -> float:
    """Work queued for the ``whisper`` model: requests in Triton's queue (``nv_inference_pending_request_count``)
    plus windows in the model's scheduler (``contract.SCHEDULER_QUEUED``, every level; a decoupled model's
    requests never wait in Triton's queue)."""
    names = ("nv_inference_pending_request_count", contract.SCHEDULER_QUEUED)
    sums = sample_sums(httpx.get(metrics_url, timeout=10).text, names, lambda labels: labels.get("model") == "whisper")
    assert sums, "neither Triton's queue nor the model scheduler's on Triton's metrics"
    return sum(sums.values())


def wait_until_idle(
    control: SlowEngineControl,
    gateway_metrics: str | None = None,
    triton_metrics: str | None = None,
    limit_s: float = 300.0,
) -> None:
    """Wait until the engine has no call in progress — and, where given, the gateway no request and
    Triton no queued request — two polls 0.5 s apart in a row.

    A gateway that kept sending window groups after its client left would stay in progress until
    the file's end, so this never ends early on a slow machine (no quiet-period guess).

    Raises:
        AssertionError: still busy after ``limit_s``.
    """
    deadline, quiet = time.monotonic() + limit_s, 0
    while quiet < 2:
        assert time.monotonic() < deadline, f"the gateway, Triton or the engine still busy after {limit_s:.0f} s"
        time.sleep(0.5)
        idle = not control.busy()
        idle = idle and (gateway_metrics is None or gateway_inflight(gateway_metrics) == 0)
        idle = idle and (triton_metrics is None or triton_pending(triton_metrics) == 0)
        quiet = quiet + 1 if idle else 0
