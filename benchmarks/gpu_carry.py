"""What a GPU benchmark run carries to the device machine, derived instead of listed by hand.

:func:`served_requirements`: the pins of the install sets whose packages the served path imports
(an ``ast`` scan of its source, lazy imports included, mapped to distributions); :func:`missing_pins`:
what a resolved closure (``pip install --dry-run --report``) needs beyond the machine's packages;
:func:`pack`: files into parts that each fit one device call beside the sent checkout, with room for
that checkout to grow; :func:`split_large` / :func:`join_split`: a file larger than a part travels in
pieces. Used by ``benchmarks/gpu_served_stage.sh`` and ``benchmarks/vllm_stage.sh``.
Docs: docs/benchmarks.md, "GPU, served path" and "Side by side with vLLM".
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

SERVED_SOURCES = ("whisper_build/serving", "whisper_build/workstation", "settings", "benchmarks/bench", "benchmarks/gpu_served.py",
                  "benchmarks/gpu_whisper_random.py", "benchmarks/reference_gateway.py", "benchmarks/live.py",
                  "benchmarks/gpu_live.py", "benchmarks/gpu_served_engine.py", "benchmarks/gpu_served_report.py",
                  "benchmarks/gpu_served_stack.py", "benchmarks/gpu_engine_sustained.py", "benchmarks/gpu_engine_random.py")  # fmt: skip
"""What the served benchmark runs on the device machine (gateway, Triton model, engines, load tool)."""

CALL_BYTES = 64 * 1024 * 1024
"""What one device call carries, the sent checkout's tracked files included (the device README)."""


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower())


def imported_modules(paths: Iterable[Path]) -> set[str]:
    """Top-level names of every module imported anywhere in the ``.py`` files under ``paths``."""
    names: set[str] = set()
    for root in paths:
        for path in [root] if root.is_file() else sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names |= {alias.name.split(".")[0] for alias in node.names}
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.split(".")[0])
    return names


def served_requirements(requirements: str, modules: set[str], without: Iterable[str] = ()) -> list[str]:
    """The pins of ``requirements`` (requirements files' text) whose distribution provides one of ``modules``.

    ``without``: distributions left out on purpose. Distributions are looked up in this environment
    (:func:`importlib.metadata.packages_distributions`), so the pins must be installed here.

    Raises:
        ValueError: a name in ``without`` is not pinned (a stale exclusion).
    """
    provided = {
        _norm(dist) for module, dists in packages_distributions().items() if module in modules for dist in dists
    }
    pins = {}
    for line in requirements.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==", line.strip())
        if match:
            pins[_norm(match.group(1))] = line.strip()
    skip = {_norm(name) for name in without}
    if stale := skip - set(pins):
        raise ValueError(f"not pinned in the install sets, remove from the exclusions: {', '.join(sorted(stale))}")
    return [pin for name, pin in pins.items() if name in provided and name not in skip]


def missing_pins(report: Mapping[str, object], machine: Iterable[str], keep: Iterable[str] = ()) -> list[str]:
    """``name==version`` of each package a pip report installs that the machine lacks, in the report's order.

    Args:
        report: ``pip install --dry-run --report`` JSON (``install[].metadata.name/version``).
        machine: distribution names the device machine already has (benchmarks/gpu_machine_packages.txt).
        keep: names that travel although the machine has them (another version is needed).
    """
    have = {_norm(name) for name in machine} - {_norm(name) for name in keep}
    items = report.get("install", [])
    assert isinstance(items, list), "a pip report has an install list"
    return [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in items
        if _norm(item["metadata"]["name"]) not in have
    ]


def machine_packages(path: Path) -> list[str]:
    """The names of a package list file (one a line, ``#`` comments)."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


SPLIT = ".split-"
"""Suffix of a piece of a file split for travel: ``NAME.split-000``, ``NAME.split-001``, ..."""


def split_large(folder: Path, budget: int) -> list[str]:
    """Split every file under ``folder`` larger than ``budget`` bytes into pieces of at most ``budget``.

    The pieces replace the file (``NAME.split-NNN``); :func:`join_split` puts it back. Returns the
    relative paths of the files split.
    """
    split = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.stat().st_size > budget):
        with path.open("rb") as source:
            for k, piece in enumerate(iter(lambda: source.read(budget), b"")):
                path.with_name(f"{path.name}{SPLIT}{k:03d}").write_bytes(piece)
        path.unlink()
        split.append(str(path.relative_to(folder)))
    return split


def join_split(folder: Path) -> list[str]:
    """Join every ``NAME.split-000..`` under ``folder`` back into ``NAME`` (pieces removed); returns the names.

    Raises:
        ValueError: a piece is missing (numbers not 0..N-1).
    """
    groups: dict[Path, list[Path]] = {}
    for piece in folder.rglob(f"*{SPLIT}[0-9][0-9][0-9]"):
        groups.setdefault(piece.with_name(piece.name.rsplit(SPLIT, 1)[0]), []).append(piece)
    for whole, pieces in groups.items():
        pieces.sort()
        numbers = [int(p.name.rsplit(SPLIT, 1)[1]) for p in pieces]
        if numbers != list(range(len(pieces))):
            raise ValueError(f"{whole.name}: pieces {numbers} of {len(pieces)}; one is missing")
        with whole.open("wb") as out:
            for piece in pieces:
                out.write(piece.read_bytes())
        for piece in pieces:
            piece.unlink()
    return sorted(str(w.relative_to(folder)) for w in groups)


def pack(sizes: Mapping[str, int], budget: int) -> list[list[str]]:
    """Files (relative path → bytes) into parts of at most ``budget`` bytes each, largest first (first fit).

    Raises:
        ValueError: a file alone is over ``budget`` (split it first), or ``budget`` < 1.
    """
    if budget < 1:
        raise ValueError(f"no room left in a device call (budget {budget} bytes): carry less or shrink the checkout")
    parts: list[tuple[int, list[str]]] = []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        if sizes[name] > budget:
            raise ValueError(f"{name} ({sizes[name]} bytes) is over the {budget} bytes a part may carry; split it")
        for k, (used, files) in enumerate(parts):
            if used + sizes[name] <= budget:
                parts[k] = (used + sizes[name], [*files, name])
                break
        else:
            parts.append((sizes[name], [name]))
    return [files for _, files in parts]


def main(argv: list[str] | None = None) -> int:
    """The CLI: ``requirements``, ``missing``, ``pack``, ``join``.

    ``requirements``: the served pins; ``missing``: a report's pins the machine lacks; ``pack SRC DEST``:
    SRC's files into DEST/<prefix>1..N (``--split``: pieces first); ``join DIR``: pieces back into files.
    """
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    req = sub.add_parser("requirements")
    req.add_argument("requirements_txt", type=Path, nargs="+", help="install sets, e.g. requirements/serving.txt")
    req.add_argument("--without", nargs="*", default=[])
    pk = sub.add_parser("pack")
    pk.add_argument("source", type=Path)
    pk.add_argument("dest", type=Path)
    pk.add_argument("--budget", type=int, required=True, help="bytes one part may hold")
    pk.add_argument("--split", action="store_true", help="split files over the budget into pieces first")
    pk.add_argument("--prefix", default="", help="part folder names: PREFIX1..PREFIXN")
    ms = sub.add_parser("missing")
    ms.add_argument("report", type=Path, help="pip install --dry-run --report JSON")
    ms.add_argument("machine", type=Path, help="the machine's package list (one name a line)")
    ms.add_argument("--keep", nargs="*", default=[], help="names that travel although the machine has them")
    jn = sub.add_parser("join")
    jn.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    if args.command == "requirements":
        modules = imported_modules(Path(s) for s in SERVED_SOURCES)
        text = "\n".join(path.read_text() for path in args.requirements_txt)
        print("\n".join(served_requirements(text, modules, args.without)))
        return 0
    if args.command == "missing":
        report = json.loads(args.report.read_text())
        print("\n".join(missing_pins(report, machine_packages(args.machine), args.keep)))
        return 0
    if args.command == "join":
        print("\n".join(join_split(args.folder)))
        return 0
    if args.split:
        split_large(args.source, args.budget)
    files = {str(f.relative_to(args.source)): f.stat().st_size for f in args.source.rglob("*") if f.is_file()}
    try:
        parts = pack(files, args.budget)
    except ValueError as exc:
        print(f"gpu_carry: {exc}", file=sys.stderr)
        return 1
    for k, names in enumerate(parts, start=1):
        for name in names:
            (args.dest / f"{args.prefix}{k}" / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(args.source / name, args.dest / f"{args.prefix}{k}" / name)
    print(len(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
