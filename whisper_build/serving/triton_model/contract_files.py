"""The committed files rendered from :mod:`whisper_build.serving.contract`: ``config.pbtxt``'s tensors and the docs' tables.

``config.pbtxt`` stays committed (the serving image and the local launcher read it); the part
between :data:`CONFIG_BEGIN` and :data:`CONFIG_END` is :func:`whisper_build.serving.contract.render_config_tensors`,
and the tensor tables of docs/contracts.md §5 (between :data:`DOCS_BEGIN` and :data:`DOCS_END`;
the ``speaker`` model's between the ``SPEAKER_`` markers) are :func:`~whisper_build.serving.contract.markdown_table`.
``python -m whisper_build.serving.triton_model.contract_files`` (``make model-contract``) rewrites
them after an edit of the table; a test fails while any of them is stale.
"""

from __future__ import annotations

import re
from pathlib import Path

from whisper_build.paths import REPO_ROOT
from whisper_build.serving import contract

__all__ = ["CONFIG_PATH", "DOC_PATHS", "config_template", "rendered_files", "stale_files"]

CONFIG_PATH = Path(__file__).parent / "model_repository" / "whisper" / "config.pbtxt"
"""The committed model config (defaults)."""
DOC_PATHS = (REPO_ROOT / "docs" / "contracts.md",)
"""Docs that carry the tensor table (absent in the serving image, which has no docs/)."""

CONFIG_BEGIN = (
    "# Tensors: rendered from whisper_build/serving/contract.py (make model-contract); edit the table there.\n"
)
CONFIG_END = "# End of the rendered tensors.\n"
DOCS_BEGIN = "<!-- tensor table: rendered from whisper_build/serving/contract.py by make model-contract -->\n"
DOCS_END = "<!-- end of the tensor table -->\n"
SPEAKER_DOCS_BEGIN = "<!-- speaker tensor table: rendered from whisper_build/serving/contract.py -->\n"
SPEAKER_DOCS_END = "<!-- end of the speaker tensor table -->\n"


def _replace_between(text: str, begin: str, end: str, body: str, where: Path) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` lines replaced by ``body``.

    Raises:
        ValueError: a marker is missing from ``where``.
    """
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
    if not pattern.search(text):
        raise ValueError(f"{where} lacks the lines {begin.strip()!r} … {end.strip()!r}")
    return pattern.sub(lambda _: begin + body + end, text, count=1)


def config_template() -> str:
    """The committed ``config.pbtxt`` with its tensors rendered from the current table."""
    return _replace_between(
        CONFIG_PATH.read_text(), CONFIG_BEGIN, CONFIG_END, contract.render_config_tensors(), CONFIG_PATH
    )


def rendered_files() -> dict[Path, str]:
    """Every file rendered from the table, by path, with its current-table text (docs only where present)."""
    files = {CONFIG_PATH: config_template()}
    table = contract.markdown_table()
    speaker = contract.markdown_table(contract.SPEAKER_INPUTS, contract.SPEAKER_OUTPUTS)
    for path in DOC_PATHS:
        if path.exists():
            text = _replace_between(path.read_text(), DOCS_BEGIN, DOCS_END, table, path)
            files[path] = _replace_between(text, SPEAKER_DOCS_BEGIN, SPEAKER_DOCS_END, speaker, path)
    return files


def stale_files() -> list[Path]:
    """The rendered files whose committed text differs from the table's."""
    return [path for path, text in rendered_files().items() if path.read_text() != text]


def main() -> None:
    """Rewrite the stale rendered files and print their paths."""
    for path, text in rendered_files().items():
        if path.read_text() != text:
            path.write_text(text)
            print(f"rewrote {path}")


if __name__ == "__main__":
    main()
