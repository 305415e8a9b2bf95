"""Exponential back-off between restarts or repair attempts (1 s, 2 s, 4 s … capped at 60 s).

Used by the supervisor (restarting ``tritonserver``) and the gateway's health monitor (reloading a
model whose backend stopped answering), so that a persistent fault is retried at a bounded rate
instead of in a tight loop, while a one-off fault is repaired within a second.
Docs: docs/gateway.md, "`GET /ping` (readiness): the health rules".
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Delays of ``initial_s × factor**n`` seconds, capped at ``max_s``.

    The series starts over at ``initial_s`` after a success or an uptime of ``reset_after_s``.

    Args:
        initial_s: first delay, seconds (> 0).
        max_s: largest delay, seconds (≥ ``initial_s``).
        factor: growth per failure (≥ 1).
        reset_after_s: a success or an uptime at least this long forgets earlier failures.

    Raises:
        ValueError: a bound out of range.
    """

    initial_s: float = 1.0
    max_s: float = 60.0
    factor: float = 2.0
    reset_after_s: float = 60.0
    failures: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.initial_s <= self.max_s or self.factor < 1 or self.reset_after_s < 0:
            raise ValueError(
                f"back-off needs 0 < initial_s <= max_s and factor >= 1, got {self.initial_s}, {self.max_s}, "
                f"{self.factor}"
            )

    def next_delay(self, uptime_s: float = 0.0) -> float:
        """Count one failure and return the seconds to wait before the next attempt.

        Args:
            uptime_s: how long the failed thing ran; ``≥ reset_after_s`` starts the series over.
        """
        if uptime_s >= self.reset_after_s:
            self.failures = 0
        delay = min(self.max_s, self.initial_s * self.factor ** min(self.failures, 64))
        self.failures += 1
        return delay

    def reset(self) -> None:
        """Forget earlier failures (after a success)."""
        self.failures = 0
