"""Pod start: the init container's preflight check of the engine against the GPU it landed on.

Docs: docs/kubernetes.md, "Fail-fast preflight (init container)".
"""
