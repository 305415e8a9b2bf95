"""A window group whose model runtime died is retried once, on the model loaded again.

When Triton's python stub dies mid-request, every request it held fails with "Stub process '…' is
not healthy" (:class:`~whisper_build.serving.transcription.backend.ModelRestarting`). A window's
inference is idempotent, so :class:`RecoveringBackend` asks :class:`ModelRecovery` to load the
model again — one reload per worker however many requests failed together (single flight; the
health loop uses the same one) — and sends the group once more. A call still pending when a
reload completes was queued on the dead runtime (Triton does not always fail those): it is
cancelled and sent once more too, in every worker of the pod: a reload is published
(``on_reloaded``) and the other workers act on it (:meth:`ModelRecovery.observe_pod`), since a
decoupled model never answers what its dead runtime held. If the reload fails, or the
retry fails again, the error reaches the client as unavailable (the gateway: 503 with
``Retry-After``). Counted in
``whisper_gateway_window_retries_total{outcome="ok"|"failed"}``.
Docs: docs/serving.md, "Under pressure: disconnect, timeout, overload, fault".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from whisper_build.serving.results import WindowResult
from whisper_build.serving.transcription.backend import (
    BackendError,
    DelegatingBackend,
    ModelRestarting,
    TranscriptionBackend,
    WindowRequest,
)

__all__ = ["RELOAD_TIMEOUT_SECONDS", "ModelRecovery", "RecoveringBackend"]

RELOAD_TIMEOUT_SECONDS = 600.0
"""Longest wait for the model server to load the model again (large engines load in minutes)."""

log = logging.getLogger("whisper.gateway.recovery")


class ModelRecovery:
    """Loads the model again, once for all the callers that ask at the same time.

    Args:
        backend: the model server (its ``reload``).
        fresh_seconds: a reload that succeeded this recently answers at once (the callers that
            failed on the same dead runtime share it).
        clock: monotonic seconds.
        on_reloaded: told the unix time of each reload that succeeded here (the pod-wide gauge).
    """

    def __init__(
        self,
        backend: TranscriptionBackend,
        fresh_seconds: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        on_reloaded: Callable[[float], None] = lambda _: None,
    ) -> None:
        self.backend = backend
        self._on_reloaded = on_reloaded
        self._pod_reloaded_at: float | None = None
        self.fresh_seconds = fresh_seconds
        self._clock = clock
        self._running: asyncio.Future[bool] | None = None
        self._succeeded_at = float("-inf")
        self._reloaded: asyncio.Event | None = None
        self.reloads = 0

    def next_reload(self) -> asyncio.Event:
        """An event set when the next reload succeeds (calls pending then were sent to the old runtime)."""
        if self._reloaded is None:
            self._reloaded = asyncio.Event()
        return self._reloaded

    async def recover(self) -> bool:
        """Load the model again (or join the reload in progress); True when it is loaded."""
        if self._clock() - self._succeeded_at < self.fresh_seconds:
            return True
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._reload())
        return await asyncio.shield(self._running)

    async def _reload(self) -> bool:
        self.reloads += 1
        try:
            await self.backend.reload(RELOAD_TIMEOUT_SECONDS)
        except (BackendError, TimeoutError) as exc:
            log.error("loading the model again failed: %s", exc)
            return False
        self._succeeded_at = self._clock()
        log.warning("the model was loaded again (reload %d)", self.reloads)
        self._pod_reloaded_at = time.time()
        self._on_reloaded(self._pod_reloaded_at)
        self._release_pending()
        return True

    def observe_pod(self, reloaded_at: float) -> bool:
        """Act on the pod's latest reload (unix s, 0 = none): True when another worker made it since the last look.

        The calls pending here then were queued on the old runtime: they fail as :class:`ModelRestarting`
        and are sent once more (the reload counts as fresh here, so they do not load the model again).
        The first look only notes the time (reloads before this worker started concern nothing here).
        """
        seen, self._pod_reloaded_at = self._pod_reloaded_at, max(reloaded_at, self._pod_reloaded_at or 0.0)
        if seen is None or reloaded_at <= seen:
            return False
        log.warning(
            "another worker of this pod loaded the model again: calls queued here on its old runtime are re-sent"
        )
        self._succeeded_at = self._clock()
        self._release_pending()
        return True

    def _release_pending(self) -> None:
        if self._reloaded is not None:
            self._reloaded.set()
            self._reloaded = None


class RecoveringBackend(DelegatingBackend):
    """A :class:`TranscriptionBackend` whose ``infer`` retries once after :class:`ModelRestarting`.

    Args:
        backend: the model server.
        recovery: the worker's :class:`ModelRecovery`.
        on_retry: told ``"ok"`` or ``"failed"`` for each retry (the metric).
    """

    def __init__(
        self, backend: TranscriptionBackend, recovery: ModelRecovery, on_retry: Callable[[str], None] = lambda _: None
    ) -> None:
        super().__init__(backend)
        self.recovery = recovery
        self._on_retry = on_retry

    async def infer(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """The wrapped backend's, sent once more on the reloaded model after :class:`ModelRestarting`.

        Raises: as the wrapped backend; :class:`ModelRestarting` when the reload or the retry failed.
        """
        try:
            return await self._unless_reloaded(windows, request, timeout)
        except ModelRestarting:
            if not await self.recovery.recover():
                self._on_retry("failed")
                raise
        try:
            outputs = await self.backend.infer(windows, request, timeout)
        except BackendError:
            self._on_retry("failed")
            raise
        self._on_retry("ok")
        return outputs

    async def _unless_reloaded(
        self, windows: Sequence[npt.NDArray[np.float32]], request: WindowRequest, timeout: float
    ) -> list[WindowResult]:
        """The call, or :class:`ModelRestarting` when a reload completes while it is still pending."""
        reloaded = asyncio.ensure_future(self.recovery.next_reload().wait())
        call = asyncio.ensure_future(self.backend.infer(windows, request, timeout))
        try:
            await asyncio.wait({call, reloaded}, return_when=asyncio.FIRST_COMPLETED)
            if call.done():
                return call.result()
            raise ModelRestarting("the model was loaded again while this call was queued on its old runtime")
        finally:
            for task in (call, reloaded):
                if not task.done():
                    task.cancel()
