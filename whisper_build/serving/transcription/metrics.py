"""What the transcription core counts, as an interface a front end implements.

The core calls :class:`TranscriptionMetrics`; the HTTP gateway's
:class:`~whisper_build.serving.gateway.metrics.GatewayMetrics` implements it on Prometheus, under
the names of docs/contracts.md §7 (the ones other layers read: :mod:`whisper_build.contracts.gateway_metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["TranscriptionMetrics"]


class TranscriptionMetrics(Protocol):
    """The core's counters and gauges (one instance per worker process)."""

    def request_started(self) -> None:
        """One more request in flight: admitted or waiting for a slot (the autoscaling demand)."""

    def request_finished(self) -> None:
        """One request fewer in flight, however it ended."""

    def transcribed(self, route: str, audio_seconds: float, temperatures: Sequence[float]) -> None:
        """A finished transcription: ``audio_seconds`` of audio on ``route``, one window decode per temperature."""

    def model_health(self, healthy: bool, busy_with_others: bool) -> None:
        """This worker's verdict on the model, and whether it waits behind other clients' work on Triton."""

    def speaker_model_failed(self, failed: bool) -> None:
        """Whether the speaker model was marked failed (it died on every load; diarization answers 503)."""

    def backend_failed(self, source: str) -> None:
        """An inference the model server failed; ``source`` is ``canary`` or ``request``."""
