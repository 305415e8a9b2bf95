"""Where the repository lies: the one place that finds its root (README "Layout").

``REPO_ROOT`` is the folder holding ``whisper_build/``, ``config/``, ``docs/`` and ``tests/``, whether
the tree is installed editable (``make install``) or copied and run as ``python -m …`` from its root.
This module imports nothing of the project, so every layer may read it. Docs: docs/development.md, "Layers".
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["REPO_ROOT"]
