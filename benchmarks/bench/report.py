"""Benchmark artefacts: ``<prefix>.json``, ``<prefix>.csv`` and ``<prefix>.png``.

``<prefix>.json`` holds results + run metadata, ``<prefix>.csv`` one row per level and ``<prefix>.png``
latency and throughput vs concurrency, one line per target.
Docs: docs/benchmarks.md, "Artefacts (`docs/benchmarks/`)".
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.bench.stats import LevelResult

CSV_COLUMNS = (
    "target", "concurrency", "wall_s", "requests", "ok", "errors",
    "latency_p50_s", "latency_p90_s", "latency_p99_s", "latency_mean_s",
    "requests_per_s", "audio_s_per_s", "rtf", "rtfx", "avg_batch_size",
    "rate_per_s", "offered_per_s", "clients", "send_lag_p99_s", "mean_active_rows", "rows_source",
)  # fmt: skip


def write_json(results: Sequence[LevelResult], meta: Mapping[str, object], path: Path) -> Path:
    """``{"meta": meta, "levels": [LevelResult.as_dict(), ...]}``, indented."""
    path.write_text(json.dumps({"meta": dict(meta), "levels": [r.as_dict() for r in results]}, indent=2))
    return path


def write_csv(results: Sequence[LevelResult], path: Path) -> Path:
    """One row per level, columns :data:`CSV_COLUMNS`; ``errors`` as ``status:count;...``."""
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for result in results:
            row = result.as_dict()
            row["errors"] = ";".join(f"{k}:{v}" for k, v in result.errors.items())
            writer.writerow({k: "" if row[k] is None else row[k] for k in CSV_COLUMNS})
    return path


def plot(results: Sequence[LevelResult], path: Path, title: str = "whisper benchmark") -> Path:
    """Plot latency and throughput against concurrency into ``path``; one colour per target.

    Two panels on a log₂ concurrency axis labelled with the plain concurrencies run: p50 latency
    (p90 dashed) and audio seconds transcribed per second, both from zero. Uses matplotlib's Agg
    backend (no display). Open-loop levels (no concurrency) are left out.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    results = [r for r in results if r.rate_per_s is None]
    fig, (lat_ax, thr_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    targets = list(dict.fromkeys(r.target for r in results))
    for index, name in enumerate(targets):
        rows = sorted((r for r in results if r.target == name), key=lambda r: r.concurrency)
        colour = f"C{index}"
        xs = [r.concurrency for r in rows]
        lat_ax.plot(xs, [_nan(r.latency_p50_s) for r in rows], "o-", color=colour, label=f"{name} p50")
        lat_ax.plot(xs, [_nan(r.latency_p90_s) for r in rows], "--", color=colour, alpha=0.6, label=f"{name} p90")
        thr_ax.plot(xs, [r.audio_s_per_s for r in rows], "o-", color=colour, label=name)
    concurrencies = sorted({r.concurrency for r in results})
    for ax, label in ((lat_ax, "latency (s)"), (thr_ax, "audio seconds per second")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])  # plain 1, 2, 4 … not 2^0, 2^1
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if results:
            ax.legend(fontsize=8)
    lat_ax.set_ylim(bottom=0)
    thr_ax.set_ylim(bottom=0)  # throughput from zero, so that differences are not exaggerated
    lat_ax.set_title("latency vs concurrency")
    thr_ax.set_title("throughput vs concurrency")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _nan(value: float | None) -> float:
    return float("nan") if value is None else value


def write_all(
    results: Sequence[LevelResult], meta: Mapping[str, object], out_dir: Path, prefix: str = "bench"
) -> dict[str, Path]:
    """Write JSON, CSV and PNG into ``out_dir`` (created); returns ``{"json"|"csv"|"png": path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        "json": write_json(results, meta, out_dir / f"{prefix}.json"),
        "csv": write_csv(results, out_dir / f"{prefix}.csv"),
        "png": plot(results, out_dir / f"{prefix}.png", str(meta.get("title", "whisper benchmark"))),
    }
