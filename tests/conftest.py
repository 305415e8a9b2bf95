"""Shared fixtures. Fixture modules live next to this file and are imported here so that every
test module can request them by name."""

from fixtures_triton import triton_server  # noqa: F401  (real Triton + CPU whisper, session-scoped)
