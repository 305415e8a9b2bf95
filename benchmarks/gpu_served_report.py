"""The GPU served-path run's outputs as a table and a plot (benchmarks/gpu_served.py ``--table``, ``--plot``).

Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = ("gateway", "triton", "in_process", "reference_gateway")


def table(records: list[dict], model: str = "large-v3-turbo-random") -> str:
    """The served-path table (markdown) of ``model``: per target, c=1 p50 and windows/s (Triton's mean batch) per level."""
    rows = [r for r in records if r["model"] == model]
    levels = sorted({r["concurrency"] for r in rows})
    head = "| target | c=1 p50 | " + " | ".join(f"c={c} windows/s (batch), p99" for c in levels) + " |"
    lines = [head, "|" + "---|" * (2 + len(levels))]
    for target in dict.fromkeys(r["target"] for r in rows):
        at = {r["concurrency"]: r for r in rows if r["target"] == target}
        p50 = at[1]["p50_s"] if 1 in at and at[1]["p50_s"] is not None else None
        cells = []
        for c in levels:
            r = at.get(c)
            if r is None or r["windows_per_s"] is None:
                cells.append("—")
                continue
            batch = f" ({r['avg_batch']:.1f})" if r.get("avg_batch") is not None else ""
            p99 = f", {r['p99_s']:.2f} s" if r.get("p99_s") is not None else ""
            cells.append(f"{r['windows_per_s']:.1f}{batch}{p99}")
        lines.append(f"| {target} | {'—' if p50 is None else f'{1000 * p50:.1f} ms'} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result_json: Path, out: Path) -> Path:
    """Plot p50 latency and windows/s against concurrency.

    One row per model, one line per target (matplotlib Agg; runs anywhere).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = json.loads(result_json.read_text())["records"]
    models = list(dict.fromkeys(r["model"] for r in records))
    fig, axes = plt.subplots(len(models), 2, figsize=(11, 4 * len(models)), squeeze=False)
    for row, model in zip(axes, models, strict=True):
        for target in TARGETS:
            points = sorted((r["concurrency"], r["p50_s"], r["windows_per_s"]) for r in records
                            if r["model"] == model and r["target"] == target and r["p50_s"] is not None)  # fmt: skip
            if points:
                conc, p50, wps = zip(*points, strict=True)
                row[0].plot(conc, p50, marker="o", label=target)
                row[1].plot(conc, wps, marker="o", label=target)
        for ax, label in zip(row, ("p50 latency (s)", "windows / s"), strict=True):
            ax.set_xscale("log", base=2)
            ax.set_xticks([1, 4, 16, 64], labels=["1", "4", "16", "64"])
            ax.set_xlabel("concurrent single-window requests")
            ax.set_ylabel(label)
            ax.set_title(model)
            ax.grid(alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out
