"""The deploy tool's shape (docs/development.md, "Layers"): small modules and functions, a typed step/session seam,
and no import cycle inside the package (function-local imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

from deploy_helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "whisper_build" / "deploy"
MODULES = sorted(PACKAGE.glob("*.py"))


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def test_no_module_over_400_lines_and_no_function_over_60() -> None:
    assert len(MODULES) > 10
    for path in MODULES:
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 400, path.name
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                assert node.end_lineno - node.lineno + 1 <= 60, f"{path.name}: {node.name}"


def test_the_step_session_seam_has_no_any() -> None:
    for name in ("session.py", "steps.py", "runner.py"):
        names = {n.id for n in ast.walk(_tree(PACKAGE / name)) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(_tree(PACKAGE / name)) if isinstance(n, ast.Attribute)}
        assert "Any" not in names, name


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module == "whisper_build.deploy":
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("whisper_build.deploy."):
            found.add(node.module.split(".")[2])
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = {path.stem: _imports(path) for path in MODULES}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, set()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    assert graph["cli"] >= {"runner", "deploy_plan", "aws_session"}
    for module in graph:
        assert not reaches(module, module, {module}), module


PLAN_TESTS = {"deploy_plan": "test_deploy_plan.py", "destroy_plan": "test_destroy_plan.py",
              "ctranslate2_plan": "test_ctranslate2_plan.py"}  # fmt: skip
"""The plans' tests, named after the plan rather than test_deploy_<module> (docs/development.md, "Tests, by area")."""


def test_every_module_has_its_test_file_as_docs_development_says() -> None:
    tests = {path.name for path in (REPO_ROOT / "tests" / "deploy").rglob("test_*.py")}  # in plans/ or calls/
    for path in MODULES:
        if path.stem in ("__init__", "__main__"):
            continue
        name = PLAN_TESTS.get(path.stem, f"test_deploy_{path.stem}.py")
        assert name in tests, f"{path.name}: no tests/deploy/*/{name}"
