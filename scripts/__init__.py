"""Repository scripts, run from the root as ``python -m scripts.<name>`` (``make synth``, ``make golden``, ``make lint``).

Docs: docs/development.md, "What the two commands run".
"""
