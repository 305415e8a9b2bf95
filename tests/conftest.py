"""Shared fixtures. Fixture modules live next to this file and are imported here so that every
test module can request them by name."""

# triton_server: real tritonserver + CPU whisper on free ports, session-scoped (tests/fixtures_triton.py)
from fixtures_triton import triton_server  # noqa: F401
