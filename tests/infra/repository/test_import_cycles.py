"""scripts/import_cycles.py (``make lint``): grimp's graph finds cycles through module-level,
function-local and TYPE_CHECKING imports and through bare test-helper imports; the tree has none."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import import_cycles
from whisper_build.paths import REPO_ROOT


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    for module, source in modules.items():
        (root / name / f"{module}.py").write_text(textwrap.dedent(source))


def test_a_function_local_import_closes_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a imports b at module level and b imports a only inside a function
    _package(
        tmp_path, "fdcyc_local", {"a": "from fdcyc_local import b\n", "b": "def f():\n    from fdcyc_local import a\n"}
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = import_cycles.build(["fdcyc_local"], helper_package=None)
    # THEN the cycle is found once, with the line of each hop
    found = import_cycles.cycles(graph, ["fdcyc_local"])
    assert found == [("fdcyc_local.a", "fdcyc_local.b", "fdcyc_local.a")]
    text = import_cycles.describe(graph, found[0])
    assert "fdcyc_local.b → fdcyc_local.a  (line 2: from fdcyc_local import a)" in text


def test_a_type_checking_import_and_a_longer_chain_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a → b → c, and c imports a under TYPE_CHECKING; d imports a (no cycle through d)
    _package(
        tmp_path,
        "fdcyc_long",
        {
            "a": "import fdcyc_long.b\n",
            "b": "from fdcyc_long import c\n",
            "c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fdcyc_long.a import x\n",
            "d": "import fdcyc_long.a\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = import_cycles.cycles(import_cycles.build(["fdcyc_long"], helper_package=None), ["fdcyc_long"])
    assert [set(chain) for chain in found] == [{"fdcyc_long.a", "fdcyc_long.b", "fdcyc_long.c"}]


def test_bare_helper_imports_resolve_to_the_helper_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a namespace folder of tests whose helper and test import each other by bare name
    folder = tmp_path / "fdcyc_tests"
    (folder / "area").mkdir(parents=True)
    (folder / "helper_x.py").write_text("import test_y\n")
    (folder / "area" / "test_y.py").write_text("from helper_x import thing\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = import_cycles.build(["fdcyc_tests"], helper_package="fdcyc_tests")
    found = import_cycles.cycles(graph, ["fdcyc_tests"])
    assert [set(chain) for chain in found] == [{"fdcyc_tests.helper_x", "fdcyc_tests.area.test_y"}]


def test_an_acyclic_package_reports_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path, "fdcyc_none", {"a": "from fdcyc_none import b\n", "b": "def f():\n    import json\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles.cycles(import_cycles.build(["fdcyc_none"], helper_package=None), ["fdcyc_none"]) == []


def test_the_tree_has_no_import_cycle() -> None:
    # the same command make lint runs
    result = subprocess.run(
        [sys.executable, "-m", "scripts.import_cycles"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "import cycles: 0 among" in result.stdout
