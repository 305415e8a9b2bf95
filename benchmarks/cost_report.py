"""Cost per audio hour from a measured run, beside hosted list prices (``make bench-cost``).

Prices the served-path runs on one NVIDIA H200 (``docs/benchmarks/gpu_served_h200.json``, and the
decoupled front's ``gpu_served_front_h200.json`` at concurrency 64) with the config's price
list (``settings.prices``), adds the throughput table's estimates for the configured GPU types
(labelled so) and the break-even volume per month against hosted prices. Writes
``<out>/cost_per_audio_hour.{json,md,png}``. Usage: ``python -m benchmarks.cost_report [--config
config/default.yaml] [--out docs/benchmarks]``; the arithmetic, in :func:`main`'s docstring.
Docs: docs/benchmarks.md, "Cost per audio hour".
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from settings import DEFAULT_CONFIG_PATH, DeploymentConfig, load_config
from settings.gpu_catalog import instance_spec_for
from settings.prices import HOURS_PER_MONTH
from settings.throughput import Estimated, figures_for
from whisper_build.paths import REPO_ROOT as REPO
from whisper_build.serving.contract import WINDOW_SECONDS

SERVED_RUN = REPO / "docs" / "benchmarks" / "gpu_served_h200.json"
FRONT_RUN = SERVED_RUN.with_name("gpu_served_front_h200.json")
FRONT_LEVELS = (64,)
"""The decoupled front's priced levels: its closed-loop c=64 gateway record (the throughput table's row)."""
H200_INSTANCE = "ml.p5en.48xlarge"


@dataclass(frozen=True)
class Hosted:
    """A hosted speech-to-text list price, per audio hour (per-minute price × 60)."""

    name: str
    usd_per_audio_hour: float
    source: str


HOSTED: tuple[Hosted, ...] = (
    Hosted("OpenAI whisper-1", 0.36, "0.006 USD/min, https://developers.openai.com/api/docs/models/whisper-1"),
    Hosted("OpenAI gpt-transcribe", 0.27, "0.0045 USD/min, https://developers.openai.com/api/docs/models/gpt-transcribe"),
    Hosted("Amazon Transcribe (tier 1)", 1.44, "0.024 USD/min billed per second, 15 s minimum; "
           "https://aws.amazon.com/transcribe/pricing/ (price as quoted by secondary sources)"),
    Hosted("Google Chirp (standard)", 0.96, "0.016 USD/min, https://cloud.google.com/speech-to-text/pricing "
           "(as quoted by secondary sources)"),
    Hosted("Google Chirp (dynamic batch, 24 h)", 0.24, "0.004 USD/min, same page"),
)  # fmt: skip
"""Hosted anchors: OpenAI's model pages (primary); Transcribe and Chirp prices from secondary sources
citing the vendors' pricing pages."""


@dataclass(frozen=True)
class CostPoint:
    """One load level priced.

    Attributes:
        label: what ran, e.g. ``H200, large-v3-turbo shapes (random weights)``.
        basis: ``measured`` or ``ESTIMATE: …``.
        concurrency: concurrent requests (measured) or the table's batch (estimates).
        audio_s_per_s: audio seconds transcribed per second (= audio hours per hour).
        usd_per_hour: price of the hardware that delivered it, ``None`` without a price.
    """

    label: str
    basis: str
    concurrency: float
    audio_s_per_s: float
    usd_per_hour: float | None

    @property
    def usd_per_audio_hour(self) -> float | None:
        """Price per hour ÷ audio hours per hour."""
        return None if self.usd_per_hour is None else self.usd_per_hour / self.audio_s_per_s

    @property
    def audio_hours_per_month(self) -> float:
        """What this throughput transcribes in a month of 730 h."""
        return self.audio_s_per_s * HOURS_PER_MONTH


def h200_gpu_price(config: DeploymentConfig) -> float:
    """USD per hour of one H200: the price list's ``ml.p5en.48xlarge`` ÷ its GPUs.

    Raises:
        LookupError: the price list has no price for it.
    """
    price = config.pricing.price_of(H200_INSTANCE)
    spec = instance_spec_for(H200_INSTANCE)
    if price is None or spec is None:
        raise LookupError(f"no price for {H200_INSTANCE} in the price list: set pricing.instances.{H200_INSTANCE}")
    return price.hourly / spec.gpus


_MODELS = {"tiny.en": "tiny.en (real weights)", "large-v3-turbo-random": "large-v3-turbo shapes (random weights)"}


def measured_points(
    run: dict, usd_per_gpu_hour: float, concurrencies: Collection[int] | None = None, note: str = ""
) -> list[CostPoint]:
    """A served run's closed-loop gateway levels (``concurrencies`` only; ``None``: all), at ``usd_per_gpu_hour``.

    large-v3-turbo levels come twice: as sent (RTFx × concurrency) and as full 30 s windows
    (windows/s × 30, the module docstring's full-window column). ``note`` follows the model in each
    label (``, decoupled front``). Open-loop levels (``concurrency`` null) are left out: 3 s each,
    they scattered too much to price (docs/benchmarks.md, "GPU, served path").
    """
    points = []
    for record in run["records"]:
        c = record["concurrency"]
        if record["target"] != "gateway" or record["model"] not in _MODELS or c is None:
            continue
        if concurrencies is not None and c not in concurrencies:
            continue
        label = f"H200, {_MODELS[record['model']]}{note}"
        points.append(CostPoint(label, "measured", c, record["rtfx"] * c, usd_per_gpu_hour))
        if record.get("random_weights"):
            full = record["windows_per_s"] * WINDOW_SECONDS
            points.append(CostPoint(label + ", as full 30 s windows", "measured", c, full, usd_per_gpu_hour))
    return points


def estimated_points(config: DeploymentConfig) -> list[CostPoint]:
    """The throughput table's estimates for the config's GPU groups (per GPU, at each table batch)."""
    points = []
    for group in config.gpu_groups:
        price = config.pricing.price_of(group.instance_type)
        per_gpu = None if price is None else price.hourly / group.instance.gpus
        for figure in figures_for(group.gpu.name, group.serving_engine, config.model.name):
            if not isinstance(figure.source, Estimated):
                continue
            basis = "ESTIMATE: " + figure.source.basis.split(";", 1)[0]
            label = f"{group.gpu.name} ({group.instance_type}), {group.serving_engine} {config.model.name}"
            if figure.window_audio_seconds == WINDOW_SECONDS:
                label += ", as full 30 s windows"
            points.append(CostPoint(label, basis, figure.batch, figure.rtfx, per_gpu))
    return points


CPU_BASIS = "measured on a busy shared machine: NOT a capacity figure (docs/benchmarks.md, Reference run)"
"""The basis of the CPU sweep's rows: the run's levels were slowed by other work on its 2 cores."""


def cpu_points(sweep: dict) -> list[CostPoint]:
    """The CPU reference run's gateway levels (measured, no instance price, not capacity figures)."""
    return [
        CostPoint(
            "CPU development machine (2 cores), tiny.en", CPU_BASIS, level["concurrency"], level["audio_s_per_s"], None
        )
        for level in sweep["levels"]
        if level["target"] == "gateway" and level["audio_s_per_s"] > 0
    ]


def break_even(monthly_usd: float) -> dict[str, float]:
    """Audio hours per month above which ``monthly_usd`` beats each hosted price."""
    return {hosted.name: monthly_usd / hosted.usd_per_audio_hour for hosted in HOSTED}


def fleet_monthly_usd(config: DeploymentConfig) -> float | None:
    """The configured fleet's month: Σ instance_count × price × 730 h (idle included); ``None`` if unpriced."""
    total = 0.0
    for group in config.gpu_groups:
        price = config.pricing.price_of(group.instance_type)
        if price is None:
            return None
        total += group.instance_count * price.hourly * HOURS_PER_MONTH
    return total


def _money(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def markdown(points: Sequence[CostPoint], gpu_hour: float, config: DeploymentConfig) -> str:
    """The report's tables: cost per audio hour by level, hosted anchors, break-even volumes."""
    price = config.pricing.price_of(H200_INSTANCE)
    origin = "" if price is None else f" ({price.basis}, {price.source}, {price.as_of})"
    lines = [
        f"H200 priced at {H200_INSTANCE} ÷ 8 = {gpu_hour:.3f} USD per GPU-hour{origin}.",
        "",
        "| what | basis | concurrency / batch | audio s/s | USD/h | USD per audio hour | audio h a month at this load |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in points:
        lines.append(
            f"| {p.label} | {p.basis} | {p.concurrency:g} | {p.audio_s_per_s:.1f} | {_money(p.usd_per_hour)} | "
            f"{_money(p.usd_per_audio_hour, 4)} | {p.audio_hours_per_month:,.0f} |"
        )
    lines += ["", "| hosted | USD per audio hour | source |", "|---|---|---|"]
    lines += [f"| {h.name} | {h.usd_per_audio_hour:.2f} | {h.source} |" for h in HOSTED]
    monthly = {"one H200 (a month, idle included)": gpu_hour * HOURS_PER_MONTH}
    fleet = fleet_monthly_usd(config)
    if fleet is not None:
        groups = " + ".join(f"{g.instance_count} × {g.instance_type}" for g in config.gpu_groups)
        monthly[f"the configured fleet ({groups})"] = fleet
    lines += ["", "| break-even: audio hours a month above which … is cheaper | USD a month | "
              + " | ".join(h.name for h in HOSTED) + " |", "|---|---|" + "---|" * len(HOSTED)]  # fmt: skip
    for name, usd in monthly.items():
        lines.append(f"| {name} | {usd:,.0f} | " + " | ".join(f"{v:,.0f}" for v in break_even(usd).values()) + " |")
    return "\n".join(lines) + "\n"


SAME_FIGURE_RMS = 0.5
"""Largest RMS pixel difference (0-255) at which a rendered figure counts as the one already in the
file: font rasterisation differs by a few pixels between machines, a moved point or label far more."""


def save_if_changed(figure: Any, out: Path, dpi: int) -> bool:
    """Save ``figure`` (matplotlib) to the PNG ``out`` unless ``out`` already shows it; True when written.

    So ``make bench-cost`` on unchanged inputs leaves the tracked file, and ``git status``, as they
    were. The comparison is matplotlib's own image test (``matplotlib.testing.compare.compare_images``).
    """
    from matplotlib.testing.compare import compare_images
    from matplotlib.testing.exceptions import ImageComparisonFailure

    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder) / out.name
        figure.savefig(candidate, dpi=dpi)
        if out.exists():
            try:
                if compare_images(str(out), str(candidate), tol=SAME_FIGURE_RMS) is None:
                    return False
            except ImageComparisonFailure:  # another size: a changed figure
                pass
        shutil.copyfile(candidate, out)
    return True


def plot(points: Sequence[CostPoint], out: Path) -> Path:
    """Cost per audio hour vs load (audio hours per hour), log-log, hosted prices as horizontal lines.

    Each priced series is drawn as its measured (or estimated) points joined, plus the dotted
    hyperbola price ÷ load below its lowest level: a GPU billed for the hour at a smaller load.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(10, 6.5))
    series: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for p in points:
        if p.usd_per_hour is not None:
            name = f"{p.label} [{'measured' if p.basis == 'measured' else 'estimate'}]"
            series.setdefault((name, p.usd_per_hour), []).append((p.audio_s_per_s, p.usd_per_hour / p.audio_s_per_s))
    for (name, usd_per_hour), xy in series.items():
        xy.sort()
        style = "-o" if name.endswith("[measured]") else "--x"
        (line,) = axes.plot([x for x, _ in xy], [y for _, y in xy], style, label=name)
        xs = [xy[0][0] * f for f in (0.02, 0.05, 0.1, 0.2, 0.5, 1.0)]
        axes.plot(xs, [usd_per_hour / x for x in xs], ":", color=line.get_color())
    for hosted in HOSTED:
        axes.axhline(hosted.usd_per_audio_hour, color="grey", linewidth=0.8)
        axes.annotate(f"{hosted.name} {hosted.usd_per_audio_hour:.2f}", (0.01, hosted.usd_per_audio_hour),
                      xycoords=("axes fraction", "data"), fontsize=7, va="bottom", color="dimgrey")  # fmt: skip
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("load: audio hours transcribed per hour (= audio s/s) on one GPU")
    axes.set_ylabel("USD per audio hour")
    axes.set_title("Cost per audio hour vs load (H200 measured, random-weight shapes labelled; others estimates)")
    axes.legend(fontsize=7, loc="upper right")
    axes.grid(True, which="both", linewidth=0.3)
    figure.tight_layout()
    save_if_changed(figure, out, dpi=120)
    plt.close(figure)
    return out


def _document(args: argparse.Namespace, points: list, gpu_hour: float, config: DeploymentConfig) -> dict:
    """The JSON record of the report: its inputs, the H200's hourly price, every point, the break-even volumes."""
    document = {
        "inputs": {
            "served": str(args.served.relative_to(REPO)),
            "front": str(args.front.relative_to(REPO)),
            "sweep": str(args.sweep.relative_to(REPO)),
        },
        "h200_usd_per_gpu_hour": gpu_hour,
        "points": [{**asdict(p), "usd_per_audio_hour": p.usd_per_audio_hour} for p in points],
        "hosted": [asdict(h) for h in HOSTED],
        "break_even_audio_hours_per_month": {
            "one_h200": break_even(gpu_hour * HOURS_PER_MONTH),
            "configured_fleet": None
            if fleet_monthly_usd(config) is None
            else break_even(fleet_monthly_usd(config) or 0),
        },
    }
    return document


def _parser() -> argparse.ArgumentParser:
    """The command's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG_PATH)
    parser.add_argument("--served", type=Path, default=SERVED_RUN, help="served-path run (gpu_served.py output)")
    parser.add_argument("--front", type=Path, default=FRONT_RUN, help="decoupled-front run (its c=64 gateway level)")
    parser.add_argument("--sweep", type=Path, default=SERVED_RUN.with_name("sweep.json"), help="CPU reference sweep")
    parser.add_argument("--out", type=Path, default=SERVED_RUN.parent)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write ``cost_per_audio_hour.{json,md,png}`` under ``--out``; print the markdown; exit status 0.

    Reads the served-path runs on one NVIDIA H200 (``docs/benchmarks/gpu_served_h200.json``: gateway →
    Triton → the ``torch`` engine, one record per model × target × concurrency; of
    ``gpu_served_front_h200.json``, the decoupled front with the in-flight scheduler, the closed-loop
    concurrency-64 gateway record, :data:`FRONT_LEVELS`) and prices them with the
    config's price list (``settings.prices``): the H200 at the ``ml.p5en.48xlarge`` price ÷ its 8 GPUs
    (an EC2 on-demand figure by default). Audio seconds per second at a level = RTFx × concurrency (the
    bench tool's RTFx is Σ audio ÷ Σ latency and a closed loop keeps ``concurrency`` requests in flight,
    so Σ latency ≈ concurrency × wall time); audio s/s = audio hours per hour, so USD per audio hour =
    USD per hour ÷ audio s/s. The large-v3-turbo run has random weights and decodes exactly 100 tokens per
    window (the load of a dense 30 s window) on 8–10 s files; its "full-window" column prices the same
    windows as 30 s of audio each (windows/s × 30), what long recordings would get.

    The configured GPU groups' types (A10G, L40S, …) are not measured: their rows are the throughput
    table's estimates (``settings.throughput``), labelled so. The CPU reference run (``sweep.json``) is
    measured but has no instance price, and its levels are not capacity figures (a busy shared machine,
    docs/benchmarks.md "Reference run"): its rows say so.

    Break-even volume per month = monthly cost (billed around the clock, idle included) ÷ a hosted price
    per audio hour: above it, the GPU is cheaper, if it can transcribe that much (its capacity at the
    measured throughput is printed beside it).

    Writes ``<out>/cost_per_audio_hour.{json,md,png}``. Usage::

        python -m benchmarks.cost_report [--config config/default.yaml] [--out docs/benchmarks]
    """
    args = _parser().parse_args(argv)
    config = load_config(args.config)
    gpu_hour = h200_gpu_price(config)
    points = [
        *measured_points(json.loads(args.served.read_text()), gpu_hour),
        *measured_points(json.loads(args.front.read_text()), gpu_hour, FRONT_LEVELS, ", decoupled front"),
        *estimated_points(config),
        *cpu_points(json.loads(args.sweep.read_text())),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(points, gpu_hour, config)
    (args.out / "cost_per_audio_hour.md").write_text(text)
    document = _document(args, points, gpu_hour, config)
    (args.out / "cost_per_audio_hour.json").write_text(json.dumps(document, indent=2) + "\n")
    plot(points, args.out / "cost_per_audio_hour.png")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
