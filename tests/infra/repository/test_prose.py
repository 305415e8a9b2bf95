"""The prose holds to its limits: short module docstrings that link a docs page and section that exist,
package docstrings that list their modules list all of them, unique headings per docs page, docs/*.md
within their line budget, and no citation of a tracker number that a clone of the repository cannot resolve."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

from whisper_build.paths import REPO_ROOT

PRODUCT = ("settings", "stacks", "k8s_charts", "observability", "whisper_build", "benchmarks", "scripts")
MAX_MODULE_DOCSTRING_LINES = 15
DOCS_LINE_BUDGET = 4200
MODULE_NAME = re.compile(r":mod:`[~.]?(?:[\w.]*\.)?(\w+)`|``(\w+)(?:/|\.py)``|``(\w+)``")
TRACKER_NUMBER = re.compile(r"(?<![\w/-])issues? ?#?\d+", re.IGNORECASE)
DOCS_LINK = re.compile(r'docs/(?P<page>[a-z][a-z0-9-]*)\.md(?:,?\s+\(?"(?P<section>[^"]+)")?')
"""A docs link: ``docs/<page>.md``, then optionally ``, "<a heading, or its start>"``. The project's pages are
lower-case; an upper-case ``docs/NAME.md`` is another project's file (mountpoint-s3-csi-driver's)."""


GENERATED = "k8s_charts/imports"
"""cdk8s-generated bindings (``make imports``): no prose of ours."""


def _product_modules() -> list[Path]:
    files = [p for folder in PRODUCT for p in (REPO_ROOT / folder).rglob("*.py")]
    return sorted(p for p in files if GENERATED not in p.as_posix())


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text()), clean=False) or ""


def test_module_docstrings_are_short() -> None:
    long = {
        path.relative_to(REPO_ROOT).as_posix(): lines
        for path in _product_modules()
        if (lines := len(_docstring(path).splitlines())) > MAX_MODULE_DOCSTRING_LINES
    }
    assert long == {}, f"module docstrings over {MAX_MODULE_DOCSTRING_LINES} lines: move detail to docs/"


def _headings(page: Path) -> list[str]:
    """The page's heading texts (``#`` marks stripped), outside fenced code blocks."""
    in_code, headings = False, []
    for line in page.read_text().splitlines():
        in_code = in_code != line.startswith("```")
        if not in_code and (match := re.match(r"#{1,6} (.+)", line)):
            headings.append(match.group(1).strip())
    return headings


def test_module_docstrings_link_a_docs_page_and_section_that_exist() -> None:
    unlinked, broken = [], []
    for path in _product_modules():
        if not (doc := _docstring(path)):
            continue
        name = path.relative_to(REPO_ROOT).as_posix()
        links = list(DOCS_LINK.finditer(doc))
        if not links:
            unlinked.append(name)
        for link in links:
            page = REPO_ROOT / "docs" / f"{link['page']}.md"
            section = " ".join((link["section"] or "").split())
            if not page.is_file():
                broken.append(f"{name}: docs/{link['page']}.md does not exist")
            elif section and not any(h.startswith(section) for h in _headings(page)):
                broken.append(f'{name}: docs/{link["page"]}.md has no heading "{section}"')
    assert unlinked == [], 'module docstrings without a docs link: end them with Docs: docs/<page>.md, "<Heading>".'
    assert broken == [], "docs links to a page or heading that does not exist"


def _members(package: Path) -> set[str]:
    modules = {p.stem for p in package.glob("*.py") if not p.stem.startswith("_")}
    return modules | {p.name for p in package.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
                      and (any(p.glob("*.py")) or (p / "Dockerfile").exists())}  # fmt: skip


def _unlisted(init: Path) -> list[str] | None:
    """The package's modules its docstring leaves out; ``None`` when it lists none (names < 3 and at most half)."""
    named = {next(g for g in match.groups() if g) for match in MODULE_NAME.finditer(_docstring(init))}
    members = _members(init.parent)
    listed = len(named & members)
    return None if listed < 3 and 2 * listed <= len(members) else sorted(members - named)


LISTING = [init for init in _product_modules() if init.name == "__init__.py" and _unlisted(init) is not None]
"""The package docstrings that list their modules (decided when the tests are collected)."""


@pytest.mark.parametrize("init", LISTING, ids=lambda p: p.parent.relative_to(REPO_ROOT).as_posix())
def test_a_package_docstring_that_lists_modules_lists_all_of_them(init: Path) -> None:
    assert _unlisted(init) == []


def test_a_listing_that_misses_a_module_is_found_and_a_package_that_lists_none_is_left_alone(tmp_path: Path) -> None:
    # GIVEN a package of four modules whose docstring names three, and one whose docstring names one
    for name in ("a", "b", "c", "d"):
        (tmp_path / f"{name}.py").write_text("")
    init = tmp_path / "__init__.py"
    init.write_text('"""Modules: ``a``, :mod:`.b`, ``c.py``."""\n')
    # THEN the first lists its modules and misses ``d``; the second lists none
    assert _unlisted(init) == ["d"]
    init.write_text('"""Entry point: :mod:`.a`."""\n')
    assert _unlisted(init) is None
    # ... and a small package that names two of its three modules lists them too
    (tmp_path / "d.py").unlink()
    init.write_text('"""Modules: ``a``, ``b``."""\n')
    assert _unlisted(init) == ["c"]
    assert REPO_ROOT / "whisper_build" / "__init__.py" in LISTING  # the tree's listing packages are collected


def _pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_docs_headings_are_unique_per_page(page: Path) -> None:
    in_code, headings = False, []
    for line in page.read_text().splitlines():
        in_code = in_code != line.startswith("```")
        if not in_code and re.match(r"#{1,6} ", line):
            headings.append(line)
    assert sorted({h for h in headings if headings.count(h) > 1}) == []


def test_docs_stay_within_their_line_budget() -> None:
    lines = sum(len(page.read_text().splitlines()) for page in (REPO_ROOT / "docs").glob("*.md"))
    assert lines <= DOCS_LINE_BUDGET, f"docs/*.md: {lines} lines; cut repetition, not facts"


def test_no_tracker_numbers_in_code_tests_or_docs() -> None:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    found = []
    for name in filter(None, names.decode().split("\0")):
        path = REPO_ROOT / name
        if path.suffix not in {".py", ".md", ".sh", ".yaml", ".txt"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if TRACKER_NUMBER.search(line) and path != Path(__file__):
                found.append(f"{name}:{number}: {line.strip()}")
    assert found == [], "cite a public source (owner/repo#N, a URL) or a commit hash"
