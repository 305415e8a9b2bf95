"""PromQL of live transcription (``/v1/realtime`` sessions): the dashboard's "Live transcription" row.

Series: the gateway's live metrics (names in :mod:`whisper_build.contracts.live_metrics`), scraped with
the rest of the gateway's and relabelled with its GPU group.
Latencies are wall seconds measured in the gateway from the audio as it arrived (speech start → first
delta, turn end → ``completed``); quantiles are histogram estimates.
Docs: docs/observability.md, "Dashboard" (its "Live transcription" row).
"""

from __future__ import annotations

from observability.promql import GROUP_LABELS, group_by, sum_rate
from observability.queries import RATE_WINDOW, Query
from whisper_build.contracts import live_metrics as names

SESSION_WINDOW = "15m"
"""Window of the session-duration quantiles: sessions last minutes, so a 2 m window would hold few ends."""


def _quantile(key: str, histogram: str, quantile: float, window: str, what: str) -> Query:
    pct = f"p{round(quantile * 100)}"
    return Query(
        f"{key}_{pct}",
        f"histogram_quantile({quantile}, {sum_rate(f'{histogram}_bucket', '', window, 'le')})",
        "s",
        f"{pct} {what} (histogram estimate over {window}).",
    )


class Live:
    """The live row's queries, per GPU group / instance type."""

    SESSIONS_ACTIVE = Query(
        "live_sessions_active",
        f"sum by ({group_by()}) ({names.SESSIONS_ACTIVE})",
        "short",
        "Open live transcription sessions.",
    )
    SESSIONS_REFUSED = Query(
        "live_sessions_refused",
        sum_rate(f"{names.SESSIONS_REFUSED}_total", "", RATE_WINDOW, "reason"),
        "short",
        "Sessions refused per second, by reason (full: close 1013; draining: 1012; bad_request).",
        (*GROUP_LABELS, "reason"),
    )
    SESSION_DURATION_P50 = _quantile(
        "live_session_duration", names.SESSION_DURATION, 0.5, SESSION_WINDOW, "session length"
    )
    SESSION_DURATION_P95 = _quantile(
        "live_session_duration", names.SESSION_DURATION, 0.95, SESSION_WINDOW, "session length"
    )
    FIRST_DELTA_P50 = _quantile("live_first_delta", names.FIRST_DELTA, 0.5, RATE_WINDOW, "speech start → first delta")
    FIRST_DELTA_P95 = _quantile("live_first_delta", names.FIRST_DELTA, 0.95, RATE_WINDOW, "speech start → first delta")
    FINALISATION_P50 = _quantile("live_finalisation", names.FINALISATION, 0.5, RATE_WINDOW, "turn end → completed")
    FINALISATION_P95 = _quantile("live_finalisation", names.FINALISATION, 0.95, RATE_WINDOW, "turn end → completed")
    UPDATES_DROPPED = Query(
        "live_updates_dropped",
        sum_rate(f"{names.UPDATES_DROPPED}_total", "", RATE_WINDOW),
        "short",
        "Updates dropped as stale per second (their successor was due before they came back).",
    )
    WINDOWS_PER_UPDATE = Query(
        "live_windows_per_update",
        f"{sum_rate(f'{names.UPDATE_WINDOWS}_total', '', RATE_WINDOW)} / "
        f"{sum_rate(f'{names.UPDATES}_total', '', RATE_WINDOW)}",
        "short",
        "Windows sent per decoded update (1 = every update fits one 30 s window).",
    )
