"""Config layout mistakes: file, line, column, the line itself and the usual cause; sections given no keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from settings import DEFAULT_CONFIG_PATH, ConfigError, load_config

DEFAULT_LINES = DEFAULT_CONFIG_PATH.read_text(encoding="utf-8").splitlines()


def _line_of(prefix: str) -> int:
    """0-based index of the default config's first line starting with ``prefix``."""
    return next(n for n, line in enumerate(DEFAULT_LINES) if line.startswith(prefix))


def _error(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "my.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(path)
    return str(raised.value)


def test_one_dedented_line_names_the_line_shows_it_and_blames_indentation(tmp_path: Path) -> None:
    lines = DEFAULT_LINES.copy()
    n = _line_of("    threads_per_core:")  # inside the first gpu_groups entry
    lines[n] = lines[n][2:]
    message = _error(tmp_path, lines)
    assert message.startswith(f"deployment config is not valid YAML: {tmp_path / 'my.yaml'}:{n + 1}:3: ")
    assert f"  {n + 1} | {lines[n]}" in message  # the offending line, numbered
    assert f"  {n} | {lines[n - 1]}" in message  # and the one above it
    assert "hint: usually indentation" in message


def test_a_tab_is_named_as_the_cause(tmp_path: Path) -> None:
    lines = DEFAULT_LINES.copy()
    n = _line_of("  max_azs:")
    lines[n] = "\t" + lines[n].lstrip()
    message = _error(tmp_path, lines)
    assert f"my.yaml:{n + 1}:1: found character '\\t'" in message
    assert "hint: a tab: YAML indents with spaces only" in message


def test_a_missing_colon_is_named_as_the_cause(tmp_path: Path) -> None:
    lines = DEFAULT_LINES.copy()
    n = _line_of("  max_azs:")
    lines[n] = lines[n].replace(":", "")
    message = _error(tmp_path, lines)
    assert f"  {n + 1} | {lines[n]}" in message and "hint: a missing colon" in message


def test_a_section_given_a_value_needs_indented_keys(tmp_path: Path) -> None:
    start, end = _line_of("network:"), _line_of("cluster:")
    lines = [*DEFAULT_LINES[:start], "network: 10.42.0.0/16", *DEFAULT_LINES[end:]]
    message = _error(tmp_path, lines)
    assert (
        f"  network: `network:` needs indented keys under it (two spaces in, `key: value` each), not the value '10.42.0.0/16' (line {start + 1})"
        in message
    )
    assert "valid dictionary" not in message


def test_a_section_whose_keys_lost_their_indent_says_where_they_belong(tmp_path: Path) -> None:
    start, end = _line_of("network:"), _line_of("cluster:")
    lines = [line.lstrip() if start < n < end else line for n, line in enumerate(DEFAULT_LINES)]
    message = _error(tmp_path, lines)
    assert (
        f"`network:` needs indented keys under it (two spaces in, `key: value` each); it has none (line {start + 1})"
        in message
    )
    assert (
        f"vpc_cidr: unknown field at the top level; it belongs under `network:`: indent it like the keys there (line {start + 2})"
        in message
    )


def test_a_list_section_given_a_value_asks_for_entries(tmp_path: Path) -> None:
    start, end = _line_of("gpu_groups:"), _line_of("network:")
    lines = [*DEFAULT_LINES[:start], "gpu_groups: g5", "", *DEFAULT_LINES[end:]]
    assert "`gpu_groups:` needs a list under it, one indented `- name: …` entry each, not the value 'g5'" in _error(
        tmp_path, lines
    )


def test_a_config_path_without_its_extension_gets_did_you_mean() -> None:
    with pytest.raises(ConfigError, match=r"did you mean config/examples/bulk\.yaml\?"):
        load_config("config/examples/bulk")
