"""The GPU served-path run's outputs: the levels table, the targets with pass/fail, a plot.

``python -m benchmarks.gpu_served_report RESULT_JSON`` (or ``benchmarks/gpu_served.py --table``) prints
:func:`report`; saturation is :data:`benchmarks.bench.stats.SATURATION_STEP`'s rule.
Docs: docs/benchmarks.md, "GPU, served path".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.bench.stats import SATURATION_STEP

TARGETS = ("gateway", "triton", "in_process", "reference_gateway")


def summary(levels: list[dict], model: str, extra: dict) -> list[dict]:
    """Records of the report's schema (docs/benchmarks.md, "GPU, served path") from bench levels.

    ``mean_encoder_batch``: a static batch encodes its rows, so it is the batch (Triton's, the in-process
    engine calls', or the static scheduler's rows per step); ``None`` for the in-flight scheduler.
    """
    records = []
    for level in levels:
        rows_source = level.get("rows_source")
        target, core, policy = level["target"].partition("engine_core_")
        path = {"path": policy} if core else {}
        records.append({
            "target": "engine_core" if core else target, "model": model, **path,
            "concurrency": level["concurrency"] if level.get("rate_per_s") is None else None,
            "rate_per_s": level.get("rate_per_s"), "offered_per_s": level.get("offered_per_s"),
            "p50_s": level.get("latency_p50_s"), "p99_s": level.get("latency_p99_s"),
            "windows_per_s": level.get("requests_per_s"), "rtfx": level.get("rtfx"),
            "avg_batch": level.get("avg_batch_size"), "mean_active_rows": level.get("mean_active_rows"),
            "mean_encoder_batch": level.get("mean_active_rows") if rows_source in ("triton_batch", "engine_calls")
            or (rows_source == "scheduler" and extra.get("scheduler", "static") == "static") else None,
            "rows_source": rows_source, "gpu_sm_util_pct": level.get("gpu_sm_util_pct"),
            "send_lag_p99_s": level.get("send_lag_p99_s"), "clients": level.get("clients"),
            "triton_ms": level.get("triton_ms"), "gateway_cpu_ms_per_request": level.get("gateway_cpu_ms_per_request"),
            "ok": level.get("ok"), "requests": level.get("requests"),
            "errors": level.get("errors"), **extra,
        })  # fmt: skip
    return records


def table(records: list[dict], model: str = "large-v3-turbo-random") -> str:
    """The served-path table (markdown) of ``model``: per target, c=1 p50 and windows/s (Triton's mean batch) per level."""
    rows = [r for r in records if r["model"] == model and r["target"] != "engine" and r.get("rate_per_s") is None]
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
                            if r["model"] == model and r["target"] == target and r["p50_s"] is not None
                            and r.get("rate_per_s") is None and r.get("workload", "dense") == "dense")  # fmt: skip
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


def saturating_record(records: list[dict], target: str) -> dict | None:
    """``target``'s open-loop record at the lowest rate whose next rate gains < 2 % windows/s; ``None`` if none."""
    ordered = sorted(
        (r for r in records if r["target"] == target and r.get("rate_per_s")), key=lambda r: r["rate_per_s"]
    )
    for level, following in zip(ordered, ordered[1:], strict=False):
        if (following["windows_per_s"] or 0) < (1 + SATURATION_STEP) * (level["windows_per_s"] or 0):
            return level
    return None


def _engine_best(records: list[dict]) -> dict | None:
    alone = [r for r in records if r["target"] == "engine" and r.get("batch", 0) > 1]
    return max(alone, key=lambda r: r["windows_per_s"], default=None)


def _closed(records: list[dict], target: str, concurrency: int) -> dict | None:
    return next((r for r in records if r["target"] == target and r.get("concurrency") == concurrency
                 and r.get("rate_per_s") is None and r.get("batch") in (None, 1)), None)  # fmt: skip


def targets(result: dict) -> list[tuple[str, str, str, str, str]]:
    """(figure, workload, measured, target, verdict) rows of the run, served by its first scheduler."""
    first = result.get("batching", {}).get("schedulers", ["static"])[0]
    rows = []
    workloads = dict.fromkeys(r.get("workload", "dense") for r in result["records"] if r.get("random_weights"))
    for workload in workloads:
        mine = [r for r in result["records"] if r.get("workload", "dense") == workload and r.get("random_weights")]
        primary = [r for r in mine if r["target"] == "engine" or r.get("scheduler", first) == first]
        best, alone_c1 = (
            _engine_best(primary),
            next((r for r in primary if r["target"] == "engine" and r["batch"] == 1), None),
        )
        for target, goal in (("gateway", 0.9), ("triton", 0.95)):
            at = saturating_record(primary, target)
            if at is None or best is None:
                opened = any(r["target"] == target and r.get("rate_per_s") for r in primary)
                why = (
                    "no engine-alone run"
                    if best is None
                    else "still rising: raise the rates"
                    if opened
                    else "no open-loop levels"
                )
                rows.append((f"{target} at saturation ÷ engine best", workload, why, f"≥ {goal}", "not measured"))
                continue
            ratio = at["windows_per_s"] / best["windows_per_s"]
            measured = (f"{at['windows_per_s']:.1f} (at {at['rate_per_s']:g}/s) ÷ {best['windows_per_s']:.1f} "
                        f"({best['path']} {best['batch']}) = {ratio:.3f}")  # fmt: skip
            rows.append(
                (f"{target} at saturation ÷ engine best", workload, measured, f"≥ {goal}", _verdict(ratio >= goal))
            )
        gateway_c1 = _closed(primary, "gateway", 1)  # dense only: mixed windows differ between the two
        if workload == "dense" and gateway_c1 and alone_c1 and gateway_c1["p50_s"] is not None:
            gap_ms = 1000 * (gateway_c1["p50_s"] - alone_c1["p50_s"])
            measured = f"{1000 * gateway_c1['p50_s']:.1f} − {1000 * alone_c1['p50_s']:.1f} = {gap_ms:.1f} ms"
            rows.append(("gateway p50 − engine alone, c=1", workload, measured, "≤ 10 ms", _verdict(gap_ms <= 10)))
        if workload == "dense" and best is not None:
            rows.append(("engine alone, dense windows/s", workload, f"{best['windows_per_s']:.1f} ({best['path']} "
                         f"{best['batch']})", "≥ 165", _verdict(best["windows_per_s"] >= 165)))  # fmt: skip
        others = [
            r for r in mine if r["target"] == "gateway" and r.get("rate_per_s") and r.get("scheduler", first) != first
        ]
        for other in others:
            same = next(
                (r for r in primary if r["target"] == "gateway" and r.get("rate_per_s") == other["rate_per_s"]), None
            )
            if same:  # in-flight over static whichever ran first
                top, bottom = (same, other) if first == "inflight" else (other, same)
                ratio = f"{top['windows_per_s'] / bottom['windows_per_s']:.3f}" if bottom["windows_per_s"] else "—"
                rows.append((f"gateway {top.get('scheduler', first)} ÷ {bottom.get('scheduler', first)} at "
                             f"{other['rate_per_s']:g}/s", workload,
                             f"{top['windows_per_s']:.1f} ÷ {bottom['windows_per_s']:.1f} = {ratio}", "report", "—"))  # fmt: skip
        rows += _core_rows(mine, best, workload)
        lags = [r["send_lag_p99_s"] for r in mine if r.get("send_lag_p99_s") is not None]
        if lags:
            rows.append(("load generator: worst send lag p99", workload, f"{1000 * max(lags):.1f} ms", "small", "—"))
    return rows


def _core_rows(records: list[dict], best: dict | None, workload: str) -> list[tuple[str, str, str, str, str]]:
    """B ÷ A figures: each batching policy's best closed-loop engine-core level over the engine alone's best.

    On dense windows also the core's in-flight best over its static best.
    """
    cores: dict[str, dict] = {}
    closed = [r for r in records if r["target"] == "engine_core" and r.get("rate_per_s") is None]
    for r in closed:
        if r.get("windows_per_s") and r["windows_per_s"] > cores.get(r["path"], {}).get("windows_per_s", 0):
            cores[r["path"]] = r
    rows = []
    for path, top in sorted(cores.items()):
        if best is not None:
            ratio = top["windows_per_s"] / best["windows_per_s"]
            measured = (f"{top['windows_per_s']:.1f} (c={top.get('concurrency')}) ÷ {best['windows_per_s']:.1f} "
                        f"= {ratio:.3f}")  # fmt: skip
            rows.append((f"engine core ({path}) ÷ engine best", workload, measured, "≥ 0.95", _verdict(ratio >= 0.95)))
    if workload == "dense" and {"static", "inflight"} <= cores.keys():
        ratio = cores["inflight"]["windows_per_s"] / cores["static"]["windows_per_s"]
        measured = f"{cores['inflight']['windows_per_s']:.1f} ÷ {cores['static']['windows_per_s']:.1f} = {ratio:.3f}"
        rows.append(("engine core in-flight ÷ static", workload, measured, "≥ 0.95", _verdict(ratio >= 0.95)))
    return rows


def _verdict(ok: bool) -> str:
    return "**pass**" if ok else "**FAIL**"


def levels_table(records: list[dict]) -> str:
    """Markdown: one row per target × workload × level (engine alone: per batch or scheduler)."""
    lines = ["| workload | target | level | windows/s | p50 ms | p99 ms | rows/pass (source) | encoder batch | SM % | errors |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    ms = lambda v: "—" if v is None else f"{1000 * v:.0f}"  # noqa: E731
    num = lambda v, spec=".1f": "—" if v is None else format(v, spec)  # noqa: E731
    for r in records:
        if r["target"] == "engine":
            level = f"{r['path']} batch {r['batch']}"
        elif r.get("rate_per_s") is not None:
            level = f"r={r['rate_per_s']:g}/s" + (
                f" ({r['scheduler']})" if r.get("scheduler") not in (None, "static") else ""
            )
        else:
            level = f"c={r['concurrency']}" + (f" ({r['path']})" if r.get("path") else "")
        rows = f"{num(r.get('mean_active_rows'))} ({r.get('rows_source') or '—'})"
        errors = ", ".join(f"{k}={v}" for k, v in (r.get("errors") or {}).items()) or "—"
        lines.append(f"| {r.get('workload', 'dense')} | {r['target']} | {level} | {num(r['windows_per_s'])} | "
                     f"{ms(r.get('p50_s'))} | {ms(r.get('p99_s'))} | {rows} | {num(r.get('mean_encoder_batch'))} | "
                     f"{num(r.get('gpu_sm_util_pct'), '.0f')} | {errors} |")  # fmt: skip
    return "\n".join(lines)


def report(result: dict) -> str:
    """The levels table and the targets table of one run (markdown)."""
    head = "| figure | workload | measured | target | verdict |\n|---|---|---|---|---|"
    rows = "\n".join("| " + " | ".join(row) + " |" for row in targets(result))
    return f"{levels_table(result['records'])}\n\n{head}\n{rows}\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m benchmarks.gpu_served_report RESULT_JSON")
    print(report(json.loads(Path(sys.argv[1]).read_text())))
