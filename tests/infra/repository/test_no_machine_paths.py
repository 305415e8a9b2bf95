"""No tracked file points at a path of the development machine: a clone has neither the machine's
work root (``MACHINE_ROOT``) nor its shared reference notes, so text cites the public source (a URL)
or a docs/ section instead.

A container path that happens to start with the same root would go in ``ALLOWED`` with its reason; an
entry that no longer matches anything fails too, so the list stays true. The two patterns are spelled
in parts so that this file does not match itself."""

from __future__ import annotations

import re
import subprocess

from whisper_build.paths import REPO_ROOT

NOTES = "shared" + "/reference"
MACHINE_ROOT = "/" + "work/"
MACHINE_PATH = re.compile(r"(?<![\w.~/-])" + MACHINE_ROOT)
"""An absolute path under the root (``whisper_build/workstation``, ``.gpucarry/work/1``: relative, not matched)."""
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/data/golden/default.json", MACHINE_ROOT): "the engine-build Job's container paths: its scratch "
    "volume is mounted at /work (whisper_build/release/invocations.py WORK_DIR)",
}
"""(tracked file, line text containing the path) → why it is no machine path (e.g. a container's mount)."""


def _tracked_text_files() -> list[tuple[str, str]]:
    names = (
        subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    files = []
    for name in filter(None, names):
        path = REPO_ROOT / name
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        try:
            files.append((name, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # binary (audio fixtures, model files)
    return files


def _findings(files: list[tuple[str, str]]) -> tuple[list[str], set[tuple[str, str]]]:
    found, used = [], set()
    for name, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            if NOTES not in line and not MACHINE_PATH.search(line):
                continue
            allowed = next((key for key in ALLOWED if key[0] == name and key[1] in line), None)
            if allowed is not None and NOTES not in line:
                used.add(allowed)
                continue
            found.append(f"{name}:{number}: {line.strip()}")
    return found, used


def test_the_pattern_tells_machine_paths_from_relative_ones() -> None:
    found, _ = _findings(
        [
            ("a.md", f"see {MACHINE_ROOT}shared/notes.md"),
            ("b.md", f"`{MACHINE_ROOT}x` and ({MACHINE_ROOT}y)"),
            ("c.py", f"facts: ~/{NOTES}/x.md"),
            ("d.md", "whisper_build/workstation/cli.py, .gpucarry/work/1, work/x"),
        ]
    )
    assert [f.split(":")[0] for f in found] == ["a.md", "b.md", "c.py"]


def test_no_tracked_file_cites_a_machine_path() -> None:
    found, used = _findings(_tracked_text_files())
    assert not found, "cite the public source (URL) or a docs/ section instead of:\n" + "\n".join(found)
    assert used == set(ALLOWED), f"allow-list entries that match nothing any more: {set(ALLOWED) - used}"
