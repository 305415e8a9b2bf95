"""The repository as one installable package set: pyproject's ``[project]`` declares no dependency (the
install sets of requirements/ hold every pin) and finds every import root; only ``whisper_build/paths.py`` finds the repository
root; nothing edits ``sys.path``; only ``tests/bench/`` imports ``benchmarks``."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from whisper_build.paths import REPO_ROOT

PRODUCT = ("settings", "stacks", "k8s_charts", "observability", "whisper_build", "benchmarks", "scripts")
ROOT_BY_HAND = re.compile(
    r"Path\((?:whisper_build\.)?__file__\)(?:\.resolve\(\))?\.(?:parent\.parent|parents\[[1-9]\])"
)
PATH_EDIT = re.compile(r"\bsys\.path(?:\.insert|\.append|\.extend|\[[^\]]*\]\s*=|\s*=)")


def _python_files(*folders: str) -> list[Path]:
    skip = ("k8s_charts/imports/",)
    files = [p for folder in folders for p in (REPO_ROOT / folder).rglob("*.py")]
    return [p for p in files if not any(s in p.relative_to(REPO_ROOT).as_posix() for s in skip)]


def test_project_declares_no_dependency_the_install_sets_hold_them() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert project["project"]["dependencies"] == []  # installing the project pulls in no set
    assert "dynamic" not in project["project"] and "dynamic" not in project["tool"]["setuptools"]


def test_every_import_root_is_found_by_the_package_search() -> None:
    include = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    roots = sorted(p.parent.name for p in REPO_ROOT.glob("*/__init__.py"))
    assert roots == sorted(PRODUCT)
    assert sorted(pattern.rstrip("*") for pattern in include["include"]) == sorted(PRODUCT)


def test_only_paths_py_finds_the_repository_root_from_its_own_location() -> None:
    found = [
        f"{p.relative_to(REPO_ROOT)}: {line.strip()}"
        for p in _python_files(*PRODUCT)
        for line in p.read_text().splitlines()
        if ROOT_BY_HAND.search(line)
    ]
    assert found == ["whisper_build/paths.py: REPO_ROOT = Path(__file__).resolve().parent.parent"]


def test_nothing_edits_sys_path() -> None:
    found = [
        f"{p.relative_to(REPO_ROOT)}:{n}"
        for p in _python_files(*PRODUCT, "tests")
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if PATH_EDIT.search(line) and p.name != "test_package_layout.py"
    ]
    assert found == []


def test_only_tests_bench_imports_benchmarks() -> None:
    importers = []
    for path in _python_files("tests", *[p for p in PRODUCT if p != "benchmarks"]):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            if any(n == "benchmarks" or n.startswith("benchmarks.") for n in names):
                importers.append(path.relative_to(REPO_ROOT).as_posix())
    assert sorted({i for i in importers if not i.startswith("tests/bench/")}) == []


MAX_TEST_FILES_PER_FOLDER = 20
"""Test folders follow the product's packages (docs/development.md, "Test tiers"): a folder that outgrows
this splits by the package its tests cover."""


def test_no_test_folder_holds_more_than_twenty_test_files() -> None:
    counts: dict[str, int] = {}
    for path in (REPO_ROOT / "tests").rglob("test_*.py"):
        folder = path.parent.relative_to(REPO_ROOT).as_posix()
        counts[folder] = counts.get(folder, 0) + 1
    assert counts["tests/serving/gateway"] >= 10  # the scan sees the tree
    assert {folder: n for folder, n in counts.items() if n > MAX_TEST_FILES_PER_FOLDER} == {}
