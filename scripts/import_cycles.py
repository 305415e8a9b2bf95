"""``make lint``'s import-cycle check: no module of the tree imports, directly or through others, itself.

The import graph is grimp's (https://grimp.readthedocs.io, "Building the graph"): every ``import`` /
``from … import`` statement of every module, at module level, inside functions and methods, and under
``if TYPE_CHECKING:``, all counted. A cycle is a direct import ``a → b`` for which a chain ``b → … → a``
exists; each is printed once, shortest chain first, with the file and line of every hop.

Entry point: :func:`main` (the details, in its docstring).
Docs: docs/development.md, "What the two commands run".
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence

import grimp

PACKAGES = ("settings", "stacks", "k8s_charts", "whisper_build", "observability", "benchmarks", "tests", "scripts")
ENTRY_POINTS = ("app", "model")
"""Top-level modules grimp cannot build (``app.py``; the Triton model file, loaded by Triton as ``model``)."""


def build(packages: Sequence[str], helper_package: str | None = "tests") -> grimp.ImportGraph:
    """The import graph of ``packages`` (importable from ``sys.path``), bare helper imports resolved.

    ``helper_package``: the namespace package whose modules are also imported by their bare last name
    (``tests``); each such import becomes an import of that module. ``None``: no resolution.
    """
    graph = grimp.build_graph(*packages, include_external_packages=True, cache_dir=None)
    if helper_package is None:
        return graph
    helpers: dict[str, str] = {}
    for module in graph.find_descendants(helper_package):
        helpers.setdefault(module.rsplit(".", 1)[-1], module)
    for bare, module in helpers.items():
        if bare not in graph.modules or not graph.is_module_squashed(bare):
            continue  # not imported by bare name (or a real package of that name)
        for importer in graph.find_modules_that_directly_import(bare):
            for detail in graph.get_import_details(importer=importer, imported=bare):
                graph.add_import(
                    importer=importer,
                    imported=module,
                    line_number=detail["line_number"],
                    line_contents=detail["line_contents"],
                )
        graph.remove_module(bare)
    return graph


def cycles(graph: grimp.ImportGraph, packages: Iterable[str]) -> list[tuple[str, ...]]:
    """Every import cycle among the modules of ``packages``, once each, as its shortest chain ``a → … → a``.

    A cycle is named by its set of modules, so a cycle met from each of its edges is reported once.
    """
    internal = sorted(m for p in packages for m in ({p} | graph.find_descendants(p)) if m in graph.modules)
    found: dict[frozenset[str], tuple[str, ...]] = {}
    for importer in internal:
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported == importer or imported not in internal:
                continue
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                chain = (importer, *back)
                found.setdefault(frozenset(chain), chain)
    return sorted(found.values(), key=lambda chain: (len(chain), chain))


def describe(graph: grimp.ImportGraph, chain: Sequence[str]) -> str:
    """One cycle, a hop a line: ``importer → imported  (line N: the statement)``."""
    lines = [f"import cycle of {len(chain) - 1} module(s):"]
    for importer, imported in zip(chain, chain[1:], strict=False):
        details = graph.get_import_details(importer=importer, imported=imported)
        where = "; ".join(f"line {d['line_number']}: {d['line_contents']}" for d in details) or "no line recorded"
        lines.append(f"  {importer} → {imported}  ({where})")
    return "\n".join(lines)


def main() -> int:
    """Check the tree (``PACKAGES``); print each cycle. Exit status: module docstring.

    The tree is the packages below plus ``tests/`` (a folder without ``__init__.py``, which grimp reads as
    a namespace package); run it from the root as ``python -m scripts.import_cycles``. Test modules import their shared helpers by bare name
    (``pytest.ini``: ``pythonpath = . tests/support``; a folder's ``conftest.py`` puts that folder on the path),
    so a bare import that names a module of ``tests/`` is added to the graph as the import of that module.
    ``app.py`` and the Triton model file (``…/model_repository/whisper/1/model.py``, in a folder that is no
    package) are entry points that grimp cannot name; nothing imports them (checked here), so they cannot
    close a cycle.

    Exit status: 0 without a cycle, 1 with one (each printed), 2 if an entry point is imported.
    """
    graph = build(PACKAGES)
    imported_entry_points = [m for m in ENTRY_POINTS if m in graph.modules]
    if imported_entry_points:
        for module in imported_entry_points:
            print(f"{module} is an entry point but {sorted(graph.find_modules_that_directly_import(module))} import it")
        return 2
    found = cycles(graph, PACKAGES)
    for chain in found:
        print(describe(graph, chain))
    internal = sum(1 for p in PACKAGES for _ in {p} | graph.find_descendants(p))
    print(f"import cycles: {len(found)} among {internal} modules (grimp {grimp.__version__})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
