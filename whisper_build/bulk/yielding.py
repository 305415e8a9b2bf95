"""Bulk windows step back while synchronous requests are in flight on a Triton the two share.

Triton's priority levels (docs/bulk.md) order its *queue*: a synchronous request waiting there goes into
the next batch before any bulk window. They cannot stop a batch that is executing, and the next batch
is still filled with queued bulk windows up to ``max_batch_size``. Where the batch's time grows with its
size (a CPU; a GPU at large batches) a synchronous request then waits for bulk work it did not ask for.

Entry point: :class:`YieldGate` (the details, in its docstring).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from whisper_build.bulk import metrics
from whisper_build.contracts.gateway_metrics import INFLIGHT
from whisper_build.serving.prometheus_text import fetch_text, require_http_url, sample_sums
from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import DelegatingBackend, TranscriptionBackend, WindowRequest

log = logging.getLogger("whisper.bulk")
GATEWAY_INFLIGHT = INFLIGHT
"""The gateway's in-flight gauge (``whisper_build.serving.gateway.metrics``), summed over its workers."""
IDLE_STOP_SECONDS = 10.0
"""The poller stops this long after the last bulk call asked (an idle worker reads nothing)."""


def read_gauge(url: str, name: str, timeout: float) -> float | None:
    """Sum of the gauge ``name``'s samples at the Prometheus text endpoint ``url``; ``None`` if unreadable."""
    text = fetch_text(url, timeout)
    sums = None if text is None else sample_sums(text, (name,))
    if sums is None:
        log.debug("yield gate: %s unreadable; not yielding", url)
        return None
    return sums.get(name, 0.0)


class YieldGate:
    """Open unless synchronous requests were in flight within the last ``hold_seconds`` (module docstring).

    Raises: ``ValueError`` when ``url`` is not an ``http(s)://`` URL (a typo would open the gate for good).

    :class:`YieldGate` closes the gap: it reads the gateway's pod-wide in-flight gauge
    (``whisper_gateway_inflight_requests``, docs/contracts.md §7) every ``poll_seconds`` and holds every new
    bulk Triton call while that gauge is above 0 and for ``hold_seconds`` after it fell to 0. A call waits
    at most ``max_wait_seconds``, and only one call goes that way per ``max_wait_seconds`` (calls that began
    waiting together do not all go together): bulk keeps a trickle of progress under constant synchronous traffic. An
    unreachable or unparsable endpoint opens the gate (bulk work must not stop because a gateway is away).
    :class:`YieldingBackend` puts the gate in front of a
    :class:`whisper_build.serving.transcription.backend.TranscriptionBackend`.

    The first synchronous request after a quiet spell still waits for the bulk batch in progress; from
    then on the gate keeps bulk windows out of its batches. Deployed bulk pods have a Triton of their own
    (docs/bulk.md), so no gateway shares it and the gate is off (``yield_to_metrics_url`` unset).
    """

    def __init__(
        self,
        url: str,
        *,
        hold_seconds: float = 2.0,
        poll_seconds: float = 0.1,
        max_wait_seconds: float = 30.0,
        gauge: str = GATEWAY_INFLIGHT,
    ) -> None:
        self.url, self.gauge = require_http_url(url, "yield_to_metrics_url"), gauge
        self._readable: bool | None = None
        self.hold_seconds, self.poll_seconds, self.max_wait_seconds = hold_seconds, poll_seconds, max_wait_seconds
        self._last_busy = -float("inf")
        self._last_asked = -float("inf")
        self._last_forced = -float("inf")
        self._poller: asyncio.Task[None] | None = None

    @property
    def is_open(self) -> bool:
        """True when a bulk call may go now."""
        return time.monotonic() - self._last_busy >= self.hold_seconds

    def observe(self, inflight: float | None) -> None:
        """Take one reading of the gauge (``None``: unreadable, counts as 0; logged when that starts and ends)."""
        if (inflight is not None) != self._readable:
            self._readable = inflight is not None
            if self._readable:
                log.info("yield gate: reading %s; bulk calls wait while its requests are in flight", self.url)
            else:
                log.warning("yield gate: %s unreadable; bulk calls do not wait for its requests", self.url)
        if inflight is not None and inflight > 0:
            self._last_busy = time.monotonic()
        metrics.YIELDING.set(0 if self.is_open else 1)

    async def read(self) -> None:
        """One reading of the gauge, now."""
        self.observe(await asyncio.to_thread(read_gauge, self.url, self.gauge, max(1.0, self.poll_seconds)))

    async def _poll(self) -> None:
        while time.monotonic() - self._last_asked < IDLE_STOP_SECONDS:
            await asyncio.sleep(self.poll_seconds)
            await self.read()
        self._poller = None

    def start(self) -> None:
        """Start polling (inside the event loop that runs the worker); it stops when no call asked for a while."""
        self._last_asked = time.monotonic()
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def wait(self) -> float:
        """Wait until the gate is open, or ``max_wait_seconds`` and no other call was let through in the last ``max_wait_seconds``; the seconds waited.

        Without a poller running (the first call, or the first after an idle spell) it reads the gauge
        first, so that call yields too.
        """
        if self._poller is None:
            await self.read()
        self.start()
        if self.is_open:
            return 0.0
        started = time.monotonic()
        while not self.is_open:
            now = time.monotonic()
            self._last_asked = now  # a waiting call keeps the poller reading (else the gate would open stale)
            if now - started >= self.max_wait_seconds and now - self._last_forced >= self.max_wait_seconds:
                self._last_forced = now  # one call per max_wait_seconds, not every call that began waiting then
                log.info("yield gate: synchronous traffic for %.0f s; sending one bulk call", self.max_wait_seconds)
                break
            await asyncio.sleep(self.poll_seconds)
        waited = time.monotonic() - started
        metrics.YIELD_SECONDS.inc(waited)
        return waited

    async def close(self) -> None:
        """Stop polling."""
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None


class YieldingBackend(DelegatingBackend):
    """A :class:`TranscriptionBackend` whose ``infer`` first waits for the :class:`YieldGate`."""

    def __init__(self, backend: TranscriptionBackend, gate: YieldGate) -> None:
        super().__init__(backend)
        self.gate = gate

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """Wait for the gate, then the wrapped backend's ``infer``."""
        await self.gate.wait()
        return await super().infer(windows, request, timeout)

    async def close(self) -> None:
        """Stop the gate and close the wrapped backend."""
        await self.gate.close()
        await super().close()
