"""The side-by-side run's records, WER and report: one JSON, one table, the targets with pass/fail.

Records (one per server × workload × level; docs/benchmarks.md, "Side by side with vLLM"): ``target``
``gateway`` | ``vllm``, ``workload`` ``tiny_en`` | ``dense`` | ``mixed``, ``concurrency`` (closed loop; the
integer 1 for c=1) or ``rate_per_s`` (open loop), ``windows_per_s``, ``p50_s``, ``p99_s``, ``wer`` (tiny_en:
the server's pooled WER over the corpus; else ``None``). ``python -m benchmarks.vllm_peer_report RESULT``
prints :func:`report`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from benchmarks.gpu_served_report import saturating_record
from whisper_build.release.engine_build.smoke import normalize_words

TARGETS = ("gateway", "vllm")
WORKLOADS = ("tiny_en", "dense", "mixed")
GOALS = {"saturation_ratio": 1.0, "p50_c1_gap_ms": 5.0, "wer_gap_points": 0.3}
"""ours ÷ vLLM windows/s at saturation ≥; ours − vLLM p50 at c=1 ≤ (ms); ours − vLLM WER ≤ (points)."""


def pooled_wer(references: Mapping[str, str], hypotheses: Mapping[str, str]) -> dict[str, float | int]:
    """Corpus WER of ``hypotheses`` (file → text) against ``references``: every file's words pooled.

    Both sides pass the same normaliser (lower-case words without punctuation,
    :func:`whisper_build.release.engine_build.smoke.normalize_words`); a file with no answer counts as empty.
    Returns ``wer`` (0–1), ``words`` (reference words) and ``errors``.
    """
    import jiwer

    names = sorted(references)
    refs = [" ".join(normalize_words(references[n])) for n in names]
    hyps = [" ".join(normalize_words(hypotheses.get(n, ""))) for n in names]
    scored = jiwer.process_words(refs, hyps)
    errors = scored.substitutions + scored.deletions + scored.insertions
    words = scored.substitutions + scored.deletions + scored.hits
    return {"wer": round(errors / words, 4) if words else 0.0, "words": words, "errors": errors}


def level_records(levels: list[dict], target: str, workload: str, wer: float | None, extra: dict) -> list[dict]:
    """Records of the schema from the bench tool's levels (every request one window: windows/s = requests/s)."""
    return [
        {
            "target": target,
            "workload": workload,
            "concurrency": level["concurrency"] if level.get("rate_per_s") is None else None,
            "rate_per_s": level.get("rate_per_s"),
            "offered_per_s": level.get("offered_per_s"),
            "windows_per_s": level.get("requests_per_s"),
            "p50_s": level.get("latency_p50_s"),
            "p99_s": level.get("latency_p99_s"),
            "wer": wer,
            "ok": level.get("ok"),
            "requests": level.get("requests"),
            "errors": level.get("errors"),
            "send_lag_p99_s": level.get("send_lag_p99_s"),
            "gpu_sm_util_pct": level.get("gpu_sm_util_pct"),
            **extra,
        }  # fmt: skip
        for level in levels
    ]


def _pick(records: list[dict], target: str, workload: str) -> dict[str, dict | None]:
    mine = [r for r in records if r["target"] == target and r["workload"] == workload]
    closed = {r["concurrency"]: r for r in mine if r.get("concurrency") is not None}
    opened = [r for r in mine if r.get("rate_per_s")]
    saturated = saturating_record(opened, target) or max(opened, key=lambda r: r["windows_per_s"] or 0, default=None)
    return {"c1": closed.get(1), "c64": closed.get(max(closed, default=0)), "saturation": saturated}


def table(records: list[dict]) -> str:
    """Markdown: per workload and server, p50 at c=1, the top closed level, saturation (rate), p99 there, WER."""
    lines = ["| workload | server | c=1 p50 | top closed level windows/s | saturation windows/s (rate) | p99 there | WER |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for workload in WORKLOADS:
        for target in TARGETS:
            at = _pick(records, target, workload)
            if not any(at.values()):
                continue
            c1, top, sat = at["c1"], at["c64"], at["saturation"]
            wer = next((r["wer"] for r in records if r["target"] == target and r["workload"] == workload), None)
            cells = [
                "—" if not c1 or c1["p50_s"] is None else f"{1000 * c1['p50_s']:.1f} ms",
                "—" if not top else f"c={top['concurrency']}: {top['windows_per_s']:.1f}",
                "—" if not sat else f"{sat['windows_per_s']:.1f} ({sat['rate_per_s']:g}/s)",
                "—" if not sat or sat["p99_s"] is None else f"{sat['p99_s']:.2f} s",
                "—" if wer is None else f"{100 * wer:.2f} %",
            ]
            lines.append(f"| {workload} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets(records: list[dict]) -> list[dict]:
    """The issue's three figures per workload (ours = ``gateway``), each with its goal and ``ok`` (``None``: not measured)."""
    rows = []
    for workload in WORKLOADS:
        ours, peer = _pick(records, "gateway", workload), _pick(records, "vllm", workload)
        if not any(ours.values()) and not any(peer.values()):
            continue
        ratio = gap = None
        if ours["saturation"] and peer["saturation"] and peer["saturation"]["windows_per_s"]:
            ratio = round(ours["saturation"]["windows_per_s"] / peer["saturation"]["windows_per_s"], 3)
        if ours["c1"] and peer["c1"] and ours["c1"]["p50_s"] is not None and peer["c1"]["p50_s"] is not None:
            gap = round(1000 * (ours["c1"]["p50_s"] - peer["c1"]["p50_s"]), 1)
        rows.append({"workload": workload, "figure": "ours ÷ vLLM windows/s at saturation", "value": ratio,
                     "goal": f"≥ {GOALS['saturation_ratio']}", "ok": None if ratio is None else ratio >= GOALS["saturation_ratio"]})  # fmt: skip
        rows.append({"workload": workload, "figure": "ours − vLLM p50 at c=1 (ms)", "value": gap,
                     "goal": f"≤ +{GOALS['p50_c1_gap_ms']}", "ok": None if gap is None else gap <= GOALS["p50_c1_gap_ms"]})  # fmt: skip
        wers = {t: next((r["wer"] for r in records if r["target"] == t and r["workload"] == workload
                         and r.get("wer") is not None), None) for t in TARGETS}  # fmt: skip
        if wers["gateway"] is not None and wers["vllm"] is not None:
            points = round(100 * (wers["gateway"] - wers["vllm"]), 2)
            rows.append({"workload": workload, "figure": "ours − vLLM WER (points)", "value": points,
                         "goal": f"≤ +{GOALS['wer_gap_points']}", "ok": points <= GOALS["wer_gap_points"]})  # fmt: skip
    return rows


def report(result: dict) -> str:
    """The table, the targets (pass/fail) and each server's start-up, as markdown."""
    records = result["records"]
    lines = [table(records), "", "| workload | figure | measured | goal | |", "|---|---|---|---|---|"]
    for row in targets(records):
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[row["ok"]]
        value = "—" if row["value"] is None else row["value"]
        lines.append(f"| {row['workload']} | {row['figure']} | {value} | {row['goal']} | {verdict} |")
    for server in result.get("servers", []):
        lines.append(f"\n{server['target']} {server['workload']}: ready in {server.get('ready_s')} s, "
                     f"GPU memory {server.get('gpu_memory_mib')} MiB")  # fmt: skip
        lines += [f"  {line}" for line in server.get("startup", [])]
    return "\n".join(lines)


def merge(existing: dict | None, fresh: dict, workloads: list[str]) -> dict:
    """``fresh`` plus ``existing``'s records and servers of the workloads not re-run (one JSON over several calls)."""
    if not existing:
        return fresh
    keep = lambda items: [i for i in items if i.get("workload") not in workloads]  # noqa: E731
    transcripts = {**existing.get("transcripts", {}), **fresh.get("transcripts", {})}
    return {**fresh, "records": keep(existing.get("records", [])) + fresh["records"],
            "servers": keep(existing.get("servers", [])) + fresh.get("servers", []), "transcripts": transcripts}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Print :func:`report` of a result file."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.vllm_peer_report RESULT_JSON", file=sys.stderr)
        return 2
    print(report(json.loads(Path(args[0]).read_text())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
