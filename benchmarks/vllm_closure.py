"""vLLM's closure for the GPU machine: which wheels travel, their bytes, how many device calls carry them.

Used by ``benchmarks/vllm_stage.sh`` after pip resolved the pin (``pip install --dry-run --report``) and
:func:`benchmarks.gpu_carry.missing_pins` dropped what the machine has: :func:`select` leaves out
distributions named on purpose, :func:`wheel_files` finds each pin's wheel in the download cache,
:func:`summary` writes the measured closure (``.vllmcarry/closure.json``, quoted in docs/benchmarks.md,
"Side by side with vLLM"), :func:`calls` counts the parts.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from benchmarks.gpu_carry import pack

MIB = 1024 * 1024


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def select(pins: Iterable[str], without: Iterable[str] = ()) -> list[str]:
    """``pins`` (``name==version``) minus the distributions named in ``without``.

    Raises:
        ValueError: a name in ``without`` is not among the pins (a stale exclusion).
    """
    pins = list(pins)
    skip = {_norm(n) for n in without}
    names = {_norm(p.split("==")[0]) for p in pins}
    if stale := skip - names:
        raise ValueError(f"not in the closure, remove from VLLM_STAGE_WITHOUT: {', '.join(sorted(stale))}")
    return [p for p in pins if _norm(p.split("==")[0]) not in skip]


def wheel_files(pins: Iterable[str], folder: Path) -> dict[str, Path]:
    """Each pin's wheel in ``folder`` (wheel names normalise ``-`` and ``.`` to ``_``; PEP 427).

    Raises:
        FileNotFoundError: a pin has no wheel there (the download failed).
    """
    found = {}
    wheels = sorted(folder.glob("*.whl"))
    for pin in pins:
        name, version = pin.split("==")
        stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
        match = [w for w in wheels if w.name.lower().startswith(stem)]
        if not match:
            raise FileNotFoundError(f"{pin}: no wheel {stem}*.whl in {folder}")
        found[pin] = match[0]
    return found


def calls(sizes: Mapping[str, int], budget: int) -> int:
    """Parts (one device call each) that carry files of ``sizes``, files over ``budget`` split in pieces."""
    pieces: dict[str, int] = {}
    for name, size in sizes.items():
        count = max(1, math.ceil(size / budget))
        pieces |= {f"{name}#{k}": min(budget, size - k * budget) for k in range(count)}
    return len(pack(pieces, budget))


def summary(report: Mapping[str, object], missing: list[str], wheels: Mapping[str, Path], budget: int,
            without: Iterable[str] = ()) -> dict[str, object]:  # fmt: skip
    """The measured closure: resolved and missing counts, every travelling wheel with its bytes, totals, parts."""
    installs = report.get("install", [])
    assert isinstance(installs, list)
    sizes = {pin: path.stat().st_size for pin, path in wheels.items()}
    total = sum(sizes.values())
    return {
        "pin": next((f"vllm=={i['metadata']['version']}" for i in installs if i["metadata"]["name"] == "vllm"), None),
        "resolved_packages": len(installs),
        "missing_on_machine": len(missing),
        "left_out": sorted(without),
        "wheels_travelling": len(wheels),
        "bytes": total,
        "mib": round(total / MIB, 1),
        "part_budget_bytes": budget,
        "parts": calls({p.name: s for p, s in zip(wheels.values(), sizes.values(), strict=True)}, budget),
        "largest": [f"{pin} {sizes[pin] / MIB:.1f} MiB" for pin in sorted(sizes, key=lambda p: -sizes[p])[:8]],
        "wheels": {pin: sizes[pin] for pin in sorted(sizes, key=str.lower)},
    }


def main(argv: list[str] | None = None) -> int:
    """The CLI: ``select``, ``link``, ``summary``.

    ``select PINS``: print the pins that travel; ``link PINS CACHE DEST``: hard-link their wheels into DEST;
    ``summary REPORT MISSING DEST --budget N``: print the closure JSON.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    sel = sub.add_parser("select")
    sel.add_argument("pins", type=Path)
    sel.add_argument("--without", nargs="*", default=[])
    ln = sub.add_parser("link")
    ln.add_argument("pins", type=Path)
    ln.add_argument("cache", type=Path)
    ln.add_argument("dest", type=Path)
    sm = sub.add_parser("summary")
    sm.add_argument("report", type=Path)
    sm.add_argument("missing", type=Path)
    sm.add_argument("dest", type=Path, help="the folder of the travelling wheels")
    sm.add_argument("--budget", type=int, required=True)
    sm.add_argument("--without", nargs="*", default=[])
    args = p.parse_args(argv)
    lines = lambda path: [x.strip() for x in path.read_text().splitlines() if x.strip()]  # noqa: E731
    try:
        if args.command == "select":
            print("\n".join(select(lines(args.pins), args.without)))
        elif args.command == "link":
            for path in wheel_files(lines(args.pins), args.cache).values():
                os.link(path, args.dest / path.name)
        else:
            missing = lines(args.missing)
            travelling = select(missing, args.without)
            wheels = wheel_files(travelling, args.dest)
            report = json.loads(args.report.read_text())
            print(json.dumps(summary(report, missing, wheels, args.budget, args.without), indent=1))
    except (ValueError, FileNotFoundError) as exc:
        print(f"vllm_closure: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
