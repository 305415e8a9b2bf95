"""The import layers of pyproject.toml's ``[tool.importlinter]`` hold for the tree, and an upward arrow breaks them.

``make lint`` runs the contracts with import-linter (``lint-imports``); these tests run the same
``layers`` contracts through grimp's ``find_illegal_dependencies_for_layers`` (the function
import-linter's layers contract calls), so ``pytest`` alone fails on an upward arrow too.
"""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import grimp
import pytest

REPO = Path(__file__).resolve().parents[3]
CONFIG: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
CONTRACTS = {contract["id"]: contract for contract in CONFIG["contracts"]}


def _layer(line: str) -> grimp.Layer:
    """``"a | b"``: independent siblings; ``"a : b"``: siblings that may import each other (import-linter's syntax)."""
    independent = ":" not in line
    tails = [part.strip() for part in line.replace(":", "|").split("|")]
    return grimp.Layer(*tails, independent=independent)


def _forbidden(graph: grimp.ImportGraph, contract: dict[str, Any]) -> list[str]:
    """``forbidden`` contracts: each import of a forbidden package by a source one (import-linter's check).

    With ``allow_indirect_imports`` only direct imports count, else every chain.
    """
    found = []
    for source in contract["source_modules"]:
        for forbidden in contract["forbidden_modules"]:
            if forbidden not in graph.modules:  # a package no module of the tree imports (import-linter: kept)
                continue
            if contract.get("allow_indirect_imports"):
                modules = graph.find_descendants(source) | {source}
                found += [
                    f"{source} -> {forbidden}: {importer} -> {imported}"
                    for importer in sorted(modules)
                    for imported in sorted(graph.find_modules_directly_imported_by(importer))
                    if imported == forbidden or imported.startswith(forbidden + ".")
                ]
            elif chains := graph.find_shortest_chains(importer=source, imported=forbidden, as_packages=True):
                found.append(f"{source} -> {forbidden}: " + "; ".join(" -> ".join(c) for c in sorted(chains)))
    return sorted(found)


def _violations(graph: grimp.ImportGraph, contract_id: str) -> list[str]:
    contract = CONTRACTS[contract_id]
    if ignored := contract.get("ignore_imports"):  # "importer -> imported" lines, as import-linter reads them
        graph = copy.deepcopy(graph)
        for line in ignored:
            importer, imported = (part.strip() for part in line.split("->"))
            graph.remove_import(importer=importer, imported=imported)
    if contract["type"] == "forbidden":
        return _forbidden(graph, contract)
    assert contract["type"] == "layers"
    found = graph.find_illegal_dependencies_for_layers(
        layers=[_layer(line) for line in contract["layers"]], containers=set(contract.get("containers", ())) or None
    )
    return sorted(
        f"{dependency.importer} -> {dependency.imported}: "
        + "; ".join(" -> ".join((*route.heads, *route.middle, *route.tails)) for route in dependency.routes)
        for dependency in found
    )


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    # the root packages import from the repository root (pytest.ini: pythonpath = .)
    return grimp.build_graph(
        *CONFIG["root_packages"],
        include_external_packages=CONFIG.get("include_external_packages", False),
        cache_dir=None,
    )


@pytest.mark.parametrize("contract_id", sorted(CONTRACTS))
def test_every_import_runs_down_the_floors(graph: grimp.ImportGraph, contract_id: str) -> None:
    assert _violations(graph, contract_id) == []


@pytest.mark.parametrize(
    ("contract_id", "importer", "imported", "expected"),
    [
        # settings read the engine names out of the serving package before they moved to the floor
        ("floors", "settings.schema", "whisper_build.serving.contract", "settings -> whisper_build.serving"),
        # the bulk CLI learnt its stack's output names from the CDK module before they moved to settings.names
        ("floors", "whisper_build.bulk.cli", "stacks.bulk_stack", "whisper_build.bulk -> stacks"),
        # bulk borrowed the window pipeline, the backend and the formats out of the HTTP gateway
        (
            "front-ends",
            "whisper_build.bulk.worker",
            "whisper_build.serving.gateway.settings",
            "whisper_build.bulk -> whisper_build.serving.gateway",
        ),
        # the core reached into the gateway's settings for its window plan
        (
            "core",
            "whisper_build.serving.transcription.windows",
            "whisper_build.serving.gateway.settings",
            "whisper_build.serving.transcription -> whisper_build.serving.gateway",
        ),
        # admission, model health and failure accounting lived in the gateway, beside FastAPI
        (
            "core",
            "whisper_build.serving.transcription.service",
            "whisper_build.serving.gateway.pipeline",
            "whisper_build.serving.transcription -> whisper_build.serving.gateway",
        ),
        # ... and a module of the core reaching a web framework, even through another of its modules
        ("core", "whisper_build.serving.audio", "starlette", "whisper_build.serving.transcription -> starlette"),
        (
            "core",
            "whisper_build.serving.transcription.health",
            "fastapi",
            "whisper_build.serving.transcription -> fastapi",
        ),
        # the contracts floor imports nothing of the tree
        ("floors", "whisper_build.contracts.engines", "settings.labels", "whisper_build.contracts -> settings"),
        # the sizing command took the window length from the audio package, and with it numpy and PyAV
        (
            "infrastructure-set",
            "whisper_build.workstation.sizing",
            "whisper_build.serving.audio.windows",
            "whisper_build.workstation.sizing -> numpy",
        ),
        # the AWS session read the operator's endpoints out of the destroy plan before they moved to settings.names
        (
            "deploy",
            "whisper_build.deploy.aws_session",
            "whisper_build.deploy.destroy_plan",
            "whisper_build.deploy.aws_session -> whisper_build.deploy.destroy_plan",
        ),
    ],
)
def test_an_upward_arrow_breaks_its_contract(
    graph: grimp.ImportGraph, contract_id: str, importer: str, imported: str, expected: str
) -> None:
    # GIVEN the tree's graph plus one import that runs up a floor
    upward = copy.deepcopy(graph)
    upward.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
    # THEN the contract names it, with its route
    found = _violations(upward, contract_id)
    assert [line for line in found if line.startswith(expected + ":")], found
    assert any(f"{importer} -> {imported}" in line for line in found), found


def test_every_package_stands_on_a_floor(graph: grimp.ImportGraph) -> None:
    # A new package of whisper_build (or a new root package) must be placed on a floor, or the
    # contract would say nothing about its arrows.
    placed = {tail.strip() for line in CONTRACTS["floors"]["layers"] for tail in line.replace(":", "|").split("|")}
    children = graph.find_children("whisper_build")
    assert children <= placed, sorted(children - placed)
    assert set(CONFIG["root_packages"]) - {"whisper_build"} <= placed
