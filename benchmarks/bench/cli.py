r"""``python -m benchmarks.bench``: latency, RTF and throughput of Whisper serving vs concurrency.

Example (``make bench-audio`` writes speech files to ``bench-audio/``)::

    .venv/bin/python -m benchmarks.bench --audio bench-audio/ \
        --target gateway=http://127.0.0.1:8080 --target triton=grpc://127.0.0.1:8001 \
        --triton-metrics http://127.0.0.1:8002/metrics --concurrency 1,2,4,8,16,32 \
        --duration 20 --out results/
Docs: docs/benchmarks.md, "The `bench` tool".
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchmarks.bench.audio import BenchInputError, Inputs, load_inputs
from benchmarks.bench.open_loop import OpenPlan, open_sweep
from benchmarks.bench.report import write_all
from benchmarks.bench.runner import LevelPlan, sweep
from benchmarks.bench.stats import OK, LevelResult, Outcome, saturating_rate
from benchmarks.bench.targets import TargetSpec, open_target, parse_target, unreachable

EXIT_OK = 0
EXIT_LEVEL_FAILED = 1
"""A level had no successful request, or more errors than ``--max-error-rate`` (reports are written)."""
EXIT_BAD_INPUT = 2
EXIT_UNREACHABLE = 3
"""A target did not accept a TCP connection before the sweep (nothing is written)."""


def _concurrencies(text: str) -> list[int]:
    if text.strip() == "none":
        return []
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--concurrency {text!r}: write integers, e.g. 1,2,4,8") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"--concurrency {text!r}: every value must be ≥ 1")
    return values


def _rates(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rates {text!r}: write numbers, e.g. 20,40,80") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"--rates {text!r}: every rate must be > 0 requests/s")
    return values


def level_label(result: LevelResult) -> str:
    """``c=8`` for a closed-loop level, ``r=120/s`` for an open-loop one."""
    return f"c={result.concurrency}" if result.rate_per_s is None else f"r={result.rate_per_s:g}/s"


def _add_load_arguments(p: argparse.ArgumentParser) -> None:
    """The load's options: closed- and open-loop levels, their length, timeouts and the failure bound."""
    p.add_argument(
        "--concurrency", type=_concurrencies, default=[1, 2, 4, 8, 16, 32],
        help="closed-loop levels, comma list (default 1,2,4,8,16,32; none = only --rates)",
    )  # fmt: skip
    p.add_argument(
        "--rates", type=_rates, default=[],
        help="open-loop levels after the closed ones: arrivals per second, comma list (each request timed from its "
        "scheduled arrival; the saturating rate is reported)",
    )  # fmt: skip
    p.add_argument("--clients", type=int, default=4, help="open loop: sending processes per target (default 4)")
    p.add_argument(
        "--arrivals", choices=("poisson", "even"), default="poisson",
        help="open loop: Poisson arrivals (seeded exponential gaps, default) or evenly spaced",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="open loop: seed of level i's arrivals is SEED + i")
    p.add_argument(
        "--duration", type=float, default=20.0, help="seconds per level (default 20; 0 = bound by --requests only)"
    )
    p.add_argument("--requests", type=int, default=None, help="most requests per level")
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout, seconds (default 60)")
    p.add_argument("--deadline", type=float, default=1800.0, help="overall time limit, seconds (default 1800)")
    p.add_argument(
        "--warmup", type=int, default=2, help="requests per target before its sweep, not counted (default 2)"
    )
    p.add_argument(
        "--metrics-settle", type=float, default=1.0, help="pause before each Triton metrics scrape, seconds (default 1)"
    )
    p.add_argument(
        "--max-error-rate", type=float, default=0.5, metavar="FRACTION",
        help="exit 1 when a level's failed requests ÷ requests exceeds this (default 0.5; 429/503 shed by an "
        "overloaded server count as failures); a level with no successful request always fails",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The CLI's arguments (``--help`` lists them)."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bench",
        description="Send real audio files to Whisper servers at a sweep of concurrencies; report "
        "p50/p90/p99 latency, requests/s, audio-seconds/s, RTF, RTFx, errors by status and "
        "Triton's average batch size; write JSON, CSV and a PNG plot.",
    )
    p.add_argument("--audio", nargs="+", required=True, type=Path, help="audio files or folders of them")
    p.add_argument(
        "--target", action="append", required=True, metavar="NAME=URL",
        help="repeatable: http://host:port[/invocations] or http://host:port/v1/audio/transcriptions "
        "(gateway), grpc://host:port (Triton), 'engine:?engine=torch&model_path=DIR&max_batch=64' (the engine "
        "in this process; keys are EngineParams fields)",
    )  # fmt: skip
    p.add_argument(
        "--triton-metrics", action="append", default=[], metavar="[NAME=]URL",
        help="Triton metrics URL (e.g. http://127.0.0.1:8002/metrics) for the average batch size; "
        "NAME= limits it to one target, else it applies to all",
    )  # fmt: skip
    _add_load_arguments(p)
    p.add_argument("--model", default="whisper", help="Triton model name (default whisper)")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder (default bench-results)")
    p.add_argument("--prefix", default="bench", help="file name prefix of the outputs (default bench)")
    p.add_argument("--title", default="whisper benchmark", help="plot title")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="run each concurrency on every target in turn (default: target by target)",
    )
    return p


def _metrics_map(values: Sequence[str], specs: Sequence[TargetSpec]) -> dict[str, str]:
    names = {s.name for s in specs}
    mapping: dict[str, str] = {}
    for value in values:
        name, sep, url = value.partition("=")
        if sep and not name.startswith("http"):
            if name not in names:
                raise BenchInputError(f"--triton-metrics {value!r}: no target named {name!r}")
            mapping[name] = url
        else:
            mapping.update({n: value for n in names if n not in mapping})
    return mapping


def results_table(results: Sequence[LevelResult]) -> Table:
    """A rich table of the results, one row per level."""
    table = Table(title="whisper benchmark")
    for column in (
        "target",
        "level",
        "ok/req",
        "p50 s",
        "p90 s",
        "p99 s",
        "req/s",
        "audio s/s",
        "RTF",
        "RTFx",
        "batch",
        "errors",
    ):
        table.add_column(column, justify="right" if column not in ("target", "errors") else "left")
    fmt = lambda v, spec=".3f": "-" if v is None else format(v, spec)  # noqa: E731
    for r in results:
        table.add_row(
            r.target, level_label(r), f"{r.ok}/{r.requests}", fmt(r.latency_p50_s), fmt(r.latency_p90_s),
            fmt(r.latency_p99_s), fmt(r.requests_per_s, ".2f"), fmt(r.audio_s_per_s, ".1f"),
            fmt(r.rtf, ".4f"), fmt(r.rtfx, ".1f"), fmt(r.avg_batch_size, ".2f"),
            ", ".join(f"{k}={v}" for k, v in r.errors.items()) or "-",
        )  # fmt: skip
    return table


def failed_levels(results: Sequence[LevelResult], max_error_rate: float) -> list[str]:
    """One line per level with no successful request or (closed loop) an error rate above ``max_error_rate`` (0–1)."""
    lines = []
    for r in results:
        rate = (r.requests - r.ok) / r.requests if r.requests else 1.0
        errors = ", ".join(f"{k}={v}" for k, v in r.errors.items()) or "no requests finished"
        if r.ok == 0:
            at = f"concurrency {r.concurrency}" if r.rate_per_s is None else level_label(r)
            lines.append(f"{r.target} {at}: no successful request ({errors})")
        elif r.rate_per_s is not None:
            continue  # open loop above capacity sheds by design; the saturating rate counts its errors
        elif rate > max_error_rate:
            lines.append(
                f"{r.target} concurrency {r.concurrency}: {rate:.0%} of {r.requests} requests failed "
                f"(> --max-error-rate {max_error_rate:g}; {errors})"
            )
    return lines


def saturations(results: Sequence[LevelResult]) -> dict[str, dict | None]:
    """Per target with open-loop levels, its saturating level (:func:`saturating_rate`) as a dict, or ``None``."""
    out: dict[str, dict | None] = {}
    for name in dict.fromkeys(r.target for r in results if r.rate_per_s is not None):
        level = saturating_rate([r for r in results if r.target == name])
        out[name] = level.as_dict() if level else None
    return out


async def _unreachable_targets(specs: Sequence[TargetSpec]) -> list[str]:
    problems = await asyncio.gather(*(unreachable(s) for s in specs))
    return [p for p in problems if p]


async def _run(
    args: argparse.Namespace, specs: list[TargetSpec], inputs: Inputs, console: Console
) -> list[LevelResult]:
    samples = inputs.samples
    plan = LevelPlan(args.duration or None, args.requests, args.timeout)
    metrics_urls = _metrics_map(args.triton_metrics, specs)
    targets = [open_target(s, max([*args.concurrency, 1]), args.model) for s in specs]
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=console, disable=args.quiet, transient=False,
    )  # fmt: skip
    tasks: dict[tuple[str, int], TaskID] = {}
    tallies: dict[tuple[str, int], list[int]] = {}

    def on_outcome(name: str, concurrency: int, outcome: Outcome) -> None:
        key = (name, concurrency)
        if key not in tasks:
            tasks[key] = progress.add_task("", total=None)
            tallies[key] = [0, 0]
        tallies[key][0 if outcome.status == OK else 1] += 1
        ok, bad = tallies[key]
        progress.update(tasks[key], description=f"{name} c={concurrency}: {ok} ok, {bad} errors")

    def on_level(result: LevelResult) -> None:
        key = (result.target, result.concurrency)
        if key in tasks:
            progress.stop_task(tasks[key])

    started = time.monotonic()
    try:
        with progress:
            results = await sweep(
                targets, samples, args.concurrency, plan, args.deadline, metrics_urls,
                args.model, args.warmup, on_outcome, on_level, args.metrics_settle, args.interleave,
            )  # fmt: skip
        if args.rates:
            open_plan = OpenPlan(args.rates, args.duration, args.clients, args.arrivals, args.seed, args.timeout)
            left = args.deadline - (time.monotonic() - started)
            results += await open_sweep(
                targets, specs, samples, open_plan, left, metrics_urls, args.model, metrics_settle_s=args.metrics_settle
            )
        return results
    finally:
        for target in targets:
            await target.close()


def _check_arguments(args: argparse.Namespace, specs: list[TargetSpec]) -> None:
    """Raise :class:`BenchInputError` for options that do not make a sweep."""
    if len({s.name for s in specs}) != len(specs):
        raise BenchInputError("target names must be unique")
    if args.duration < 0 or (args.duration == 0 and args.requests is None):
        raise BenchInputError("give a --duration > 0 or a --requests count per level")
    if args.rates and args.duration <= 0:
        raise BenchInputError("--rates needs a --duration > 0 (the arrival window of each level)")
    if not args.concurrency and not args.rates:
        raise BenchInputError("--concurrency none needs --rates")
    if args.clients < 1:
        raise BenchInputError(f"--clients {args.clients}: give at least 1 process")
    if not 0 <= args.max_error_rate <= 1:
        raise BenchInputError(f"--max-error-rate {args.max_error_rate}: give a fraction between 0 and 1")


def _meta(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    specs: list[TargetSpec],
    inputs: Inputs,
    started: float,
    saturating: dict,
) -> dict:
    """The reports' header: what was asked, what was measured, on what."""
    meta = {
        "title": args.title,
        "started_unix": started,
        "finished_unix": time.time(),
        "argv": list(sys.argv if argv is None else argv),
        "targets": [vars(s) for s in specs],
        "audio": [str(p) for p in args.audio],
        "audio_files": [
            {"path": s.path, "duration_s": s.duration_s, "windows": len(s.windows)} for s in inputs.samples
        ],
        "skipped_inputs": [{"path": s.path, "reason": s.reason} for s in inputs.skipped],
        "max_error_rate": args.max_error_rate,
        "duration_s_per_level": args.duration,
        "max_requests_per_level": args.requests,
        "request_timeout_s": args.timeout,
        "open_loop": {"rates_per_s": args.rates, "clients": args.clients, "arrivals": args.arrivals, "seed": args.seed}
        if args.rates
        else None,
        "saturating": saturating,
        "python": platform.python_version(),
        "host": platform.node(),
    }
    return meta


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status.

    0 every level passed; 1 a level failed (no success, or errors above ``--max-error-rate``; reports
    are still written); 2 bad arguments/input (via argparse); 3 a target was unreachable before the
    sweep (nothing written).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    try:
        specs = [parse_target(t) for t in args.target]
        _check_arguments(args, specs)
        inputs = load_inputs(args.audio)
        for skipped in inputs.skipped:
            console.print(f"skipped {skipped.path}: {skipped.reason}", markup=False, soft_wrap=True)
        problems = asyncio.run(_unreachable_targets(specs))
        if problems:
            for problem in problems:
                console.print(f"error: {problem}", markup=False, soft_wrap=True)
            console.print(
                "nothing was measured; start the server (make serve) or fix --target", markup=False, soft_wrap=True
            )
            return EXIT_UNREACHABLE
        started = time.time()
        results = asyncio.run(_run(args, specs, inputs, console))
    except (BenchInputError, ValueError) as exc:
        parser.error(str(exc))
    saturating = saturations(results)
    meta = _meta(args, argv, specs, inputs, started, saturating)
    paths = write_all(results, meta, args.out, args.prefix)
    Console(width=None if sys.stdout.isatty() else 160).print(results_table(results))
    console.print("wrote " + ", ".join(str(p) for p in paths.values()))
    for name, level in saturating.items():
        console.print(f"{name}: " + (f"saturates at {level['rate_per_s']:g}/s ({level['requests_per_s']:.1f} req/s)"
                                     if level else "still rising at the top rate: raise --rates"), markup=False)  # fmt: skip
    failures = failed_levels(results, args.max_error_rate)
    for line in failures:
        console.print(f"FAILED {line}", markup=False, soft_wrap=True)
    return EXIT_LEVEL_FAILED if failures else EXIT_OK
