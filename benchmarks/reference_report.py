"""The reference run's figures as Markdown (``reference.md``): :func:`render_markdown` of :mod:`benchmarks.reference`.

Docs: docs/benchmarks.md, "Reference run (CPU, this machine)".
"""

from __future__ import annotations


def _synth_rows(synth: dict) -> list[str]:
    """The ``make synth`` rows of the table (and ``make bench-synth``'s output after it)."""
    lines: list[str] = []
    if "error" in synth:
        lines.append(f"| make synth | not measured: {synth['error']} |")
    else:
        for row in synth.values():
            if "wall_s" in row:
                lines.append(f"| `{row['command']}` wall time | {row['wall_s']:.1f} s (exit {row['exit_code']}) |")
        if "default" in synth and "three-groups" in synth:
            ratio = synth["three-groups"]["wall_s"] / synth["default"]["wall_s"]
            lines.append(f"| make synth: three-groups ÷ default | {ratio:.2f} |")
        if "bench_synth" in synth:
            lines += [
                "",
                "`make bench-synth` (warm synthesis, no gates):",
                "",
                "```",
                synth["bench_synth"]["output"].strip(),
                "```",
            ]
    return lines


def _cost_rows(costs: dict | None) -> list[str]:
    """The timestamps-and-fallback cost table, empty when it was not measured."""
    lines: list[str] = []
    if costs:
        lines += [
            "",
            f"Cost of timestamps and fallback (c=1, {costs['rounds']} rounds × {len(costs['files'])} files, same files, "
            "interleaved; ratio to the first row of its group; errors: "
            f"{len(costs['errors'])}):",
            "",
            "| where | variant | p50 latency | ratio | decodes per window |",
            "|---|---|---|---|---|",
        ]
        for where in ("gateway", "in_process"):
            for name, row in costs[where].items():
                p50 = "-" if row["p50_s"] is None else f"{row['p50_s']:.3f} s"
                ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
                per = "-" if row["decodes_per_window"] is None else f"{row['decodes_per_window']:.2f}"
                lines.append(f"| {where.replace('_', '-')} | {name} | {p50} | {ratio} | {per} |")
    return lines


def render_markdown(figures: dict) -> str:
    """The figures as a Markdown section (``reference.md``)."""
    m, e2e, thr, long_, mem = (
        figures[k] for k in ("machine", "e2e_vs_engine", "throughput", "long_audio", "gateway_rss")
    )
    mib = lambda b: f"{b / 2**20:.0f} MiB"  # noqa: E731
    lines = [
        f"Run {figures['started_utc']} – {figures['finished_utc']} on {m['cpu_model']}, "
        f"{m['cpus_usable']} usable CPUs, {m['ram_gib']} GiB RAM; load average at start "
        f"{m['load_avg_1_5_15'][0]:.2f}, at end {figures['load_avg_end'][0]:.2f}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| gateway e2e p50 ÷ in-process engine + decoding layer p50 (c=1, {e2e['pairs']} interleaved pairs) | {e2e['ratio_p50']:.3f} "
        f"({e2e['gateway_p50_s']:.3f} s ÷ {e2e['engine_p50_s']:.3f} s); median of per-pair ratios {e2e['ratio_median_of_pairs']:.3f} |",
    ]
    batch = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for name, row in thr.items():
        lines.append(
            f"| {name}: throughput c={row['high']} ÷ c=1 (audio s/s) | {row['ratio']:.2f} "
            f"({row['high_audio_s_per_s']:.1f} ÷ {row['c1_audio_s_per_s']:.1f}); Triton avg batch {batch(row['c1_batch'])} → {batch(row['high_batch'])} |"
        )
    lines += [
        f"| {figures['long_audio_s'] / 60:.1f}-min recording: sequential ÷ batched wall time ({long_['windows']} windows) | "
        f"{long_['ratio']:.2f} ({long_['sequential_s']:.1f} s ÷ {long_['batched_s']:.1f} s) |",
        f"| same recording, one `/invocations` request through the gateway | {long_['gateway']['latency_s']:.1f} s "
        f"({long_['gateway']['status']}, RTFx {long_['gateway']['rtfx']:.1f}) |",
        f"| gateway RSS at rest / peak during the sweep / after the sweep | {mib(mem['rest'])} / {mib(mem['peak_load'])} / {mib(mem['after'])} |",
        f"| gateway RSS peak during the long-recording request | {mib(mem['peak_long_request'])} |",
    ]
    lines += _synth_rows(figures["synth"])
    lines += _cost_rows(figures.get("decoding_costs"))
    return "\n".join(lines) + "\n"
