"""Config layout mistakes in words a newcomer can act on: where, the line itself, and the usual cause.

Two kinds: YAML syntax errors (PyYAML's ``mapping values are not allowed here`` and friends), which
:func:`syntax_message` turns into file, line and column, the offending line (and the one above it,
where the mistake often is) and a hint; and layout errors that parse but put the wrong shape under a
key (``network:`` with nothing or a value under it), which :func:`section_message` words as
"``network:`` needs indented keys under it". Docs: docs/deploy.md, "Synthesize and check (`make synth`)".
"""

from __future__ import annotations

from pathlib import Path

import yaml

_INDENTATION = (
    "usually indentation: the keys of one section line up under each other, indented (two spaces) "
    "under the section's name; check this line and the one above it"
)
HINTS: tuple[tuple[str, str], ...] = (
    ("'\\t'", "a tab: YAML indents with spaces only; replace the tab with spaces"),
    ("could not find expected ':'", "a missing colon: every setting is `key: value` (a space after the colon)"),
    ("mapping values are not allowed here", _INDENTATION + ", or a value holding ': ' that needs quotes"),
    ("expected <block end>", _INDENTATION),
    ("did not find expected key", _INDENTATION),
    (
        "did not find expected '-' indicator",
        "a list entry out of line: every `- ` of one list starts in the same column",
    ),
    ("found duplicate anchor", "an `&anchor` defined twice"),
)
"""(what PyYAML says, what usually causes it), the first match wins."""


def _hint(problem: str) -> str:
    return next(
        (hint for needle, hint in HINTS if needle in problem), "check the indentation and the colons near this line"
    )


def _excerpt(text: str, line: int, column: int) -> list[str]:
    """The line above (when there is one) and line ``line`` (0-based), with a caret under ``column``."""
    lines = text.splitlines()
    shown = [n for n in (line - 1, line) if 0 <= n < len(lines)]
    width = len(str(line + 1))
    out = [f"  {n + 1:>{width}} | {lines[n].expandtabs(1)}" for n in shown]
    if line < len(lines):
        out.append(f"  {' ' * width} | {' ' * column}^")
    return out


def syntax_message(err: yaml.YAMLError, path: Path, text: str) -> str:
    """``deployment config is not valid YAML: <path>:<line>:<column>: <problem>``, the lines, a hint.

    Line and column are 1-based; without a position (rare) the message names the file only.
    """
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err)
    context = getattr(err, "context", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    lines = [f"deployment config is not valid YAML: {where}: {problem}" + (f" ({context})" if context else "")]
    if mark is not None:
        lines += _excerpt(text, mark.line, mark.column)
    lines.append(f"  hint: {_hint(problem)}")
    return "\n".join(lines)


def section_message(key: str | int, value: object, shape: str = "section") -> str:
    """What to write under ``key`` when it holds ``value`` instead of the ``shape`` it takes.

    ``shape``: ``section`` (indented keys, e.g. ``network:``), ``entries`` (a list of sections, e.g.
    ``gpu_groups:``) or ``list`` (a list of values, e.g. ``public_access_cidrs:``).
    """
    given = "; it has none" if value is None else f", not the value {value!r}"
    if isinstance(key, int):
        return f"list entry {key} needs indented `key: value` lines after its `- `{given}"
    if shape == "entries":
        return f"`{key}:` needs a list under it, one indented `- name: …` entry each{given}"
    if shape == "list":
        return f"`{key}:` needs a list: `[a, b]`, or indented `- a` lines under it{given}"
    return f"`{key}:` needs indented keys under it (two spaces in, `key: value` each){given}"
