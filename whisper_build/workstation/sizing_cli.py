"""``make sizing``: replicas per GPU group, their cost and the cheapest mix for a target.

Reads the config's GPU groups, the price list (``settings.prices``) and the throughput table
(``settings.throughput``: measured on the CPU and one H200, every other GPU an estimate scaled from the
H200, a MIG slice the whole GPU's figure × its share of the SMs; each operating point printed says
which), then sizes with :mod:`whisper_build.workstation.sizing`. docs/cost.md, "Sizing".

Usage (one target)::

    python -m whisper_build.workstation.sizing_cli [CONFIG] --audio-hours-per-day 2000
    python -m whisper_build.workstation.sizing_cli [CONFIG] --sync-rps 20 --p95-s 5 [--audio-s 30]
    python -m whisper_build.workstation.sizing_cli [CONFIG] --bulk-audio-hours 5000 --deadline-hours 24 \
        [--spot-availability 0.5]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from settings import DEFAULT_CONFIG_PATH, DeploymentConfig, load_config
from settings.throughput import Estimated, Measured, figures_for, slice_figures
from whisper_build.workstation import sizing
from whisper_build.workstation.sizing_bulk import DEFAULT_SPOT_AVAILABILITY, bulk_lines


def offers(config: DeploymentConfig) -> list[sizing.Offer]:
    """One :class:`~whisper_build.workstation.sizing.Offer` per GPU group of ``config``.

    A MIG group's figures are one slice's (:func:`settings.throughput.slice_figures`), never a whole GPU's.
    """
    result = []
    for group in config.gpu_groups:
        price = config.pricing.price_of(group.instance_type)
        figures = figures_for(group.gpu.name, group.serving_engine, config.model.name)
        if group.mig is not None:
            figures = slice_figures(figures, group.mig)
        result.append(
            sizing.Offer(
                group=group.name,
                instance_type=group.instance_type,
                usd_per_hour=None if price is None else price.hourly,
                pods_per_instance=group.pods_per_node,
                capacity=group.effective_capacity,
                figures=tuple(figures),
                mig_profile=group.mig_profile,
            )
        )
    return result


def _source(source: Measured | Estimated) -> str:
    """``measured: …``, or ``ESTIMATE:`` and each scaling step down to the measured figure (at most two)."""
    if isinstance(source, Measured):
        return f"measured: {source.where}, {source.when}"
    steps = [step for step in source.basis.split("; from: ") if not step.startswith("measured on ")]
    return "ESTIMATE: " + "; from ".join(steps[:2])


def report(
    config: DeploymentConfig, target: sizing.Target, spot_availability: float = DEFAULT_SPOT_AVAILABILITY
) -> list[str]:
    """The printout: demand, one line per group sized alone, the cheapest mix.

    For a bulk backlog with bulk on, also each bulk group's priority list and Spot share
    (:func:`whisper_build.workstation.sizing_bulk.bulk_lines`).
    """
    plans = [sizing.plan(offer, target, config.autoscaling.target_utilization) for offer in offers(config)]
    per = "for the job" if isinstance(target, sizing.BulkDeadline) else "a month"
    lines = [
        f"target: {sizing.describe(target)}; demand {sizing.demand(target):.3g} {sizing.unit(target)} (model {config.model.name})"
    ]
    for p in plans:
        head = f"{p.offer.group} ({p.offer.instance_type})"
        pod = f"a pod (one {p.offer.mig_profile} MIG slice)" if p.offer.mig_profile else "a pod"
        if p.figure is None:
            lines.append(f"  {head}: cannot meet the target: {p.note}")
            continue
        cost = "no price (make prices)" if p.cost_usd is None else f"{p.cost_usd:,.0f} USD {per}"
        lines.append(
            f"  {head}: {p.replicas} replicas on {p.instances} instances, {cost}; {pod} at batch "
            f"{p.figure.batch:g} does {p.per_pod:.3g} {sizing.unit(target)} ({_source(p.figure.source)})"
        )
    mix = sizing.cheapest_mix(plans, target)
    if mix is None:
        lines.append("cheapest mix: none (no GPU type is both priced and able to meet the target)")
    else:
        parts = " + ".join(f"{n} × {group}" for group, n in mix.instances.items())
        scope = "" if mix.exhaustive else " (single types only: too many combinations to search)"
        lines.append(f"cheapest mix: {parts} = {mix.cost_usd:,.0f} USD {per}{scope}")
    if isinstance(target, sizing.BulkDeadline):
        lines += bulk_lines(config, target, plans, spot_availability)
    return lines


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _target(args: argparse.Namespace, parser: argparse.ArgumentParser) -> sizing.Target:
    if args.audio_hours_per_day is not None:
        return sizing.DailyVolume(args.audio_hours_per_day)
    if args.sync_rps is not None and args.p95_s is not None:
        return sizing.SyncLatency(args.sync_rps, args.p95_s, args.audio_s)
    if args.bulk_audio_hours is not None and args.deadline_hours is not None:
        return sizing.BulkDeadline(args.bulk_audio_hours, args.deadline_hours)
    parser.error(
        "give one target: --audio-hours-per-day, --sync-rps with --p95-s, or --bulk-audio-hours with --deadline-hours"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse a target, print :func:`report`; exit status 0 (2 on a usage error)."""
    parser = argparse.ArgumentParser(prog="make sizing", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="?", type=Path, default=DEFAULT_CONFIG_PATH)
    parser.add_argument("--audio-hours-per-day", type=_positive)
    parser.add_argument("--sync-rps", type=_positive, help="synchronous requests per second")
    parser.add_argument("--p95-s", type=_positive, help="p95 latency target of a synchronous request, seconds")
    parser.add_argument("--audio-s", type=_positive, default=sizing.WINDOW_SECONDS, help="audio per request, s")
    parser.add_argument("--bulk-audio-hours", type=_positive)
    parser.add_argument("--deadline-hours", type=_positive)
    parser.add_argument(
        "--spot-availability",
        type=_share,
        default=DEFAULT_SPOT_AVAILABILITY,
        help=f"share of its hours a Spot instance runs, an assumption (default {DEFAULT_SPOT_AVAILABILITY})",
    )
    args = parser.parse_args(argv)
    target = _target(args, parser)
    print("\n".join(report(load_config(args.config), target, args.spot_availability)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
